// The billing saga's definition for diagrams (`skiplock sagas graph billing --module
// examples/billing/src/saga-shape.ts`): its steps never run here, so the provider and the
// signal sender are stand-ins that refuse to be used. The timeout is the system's default.
import { createBillingSaga } from './saga.js';

const unused = () => {
  throw new Error('saga-shape: this definition is for diagrams; its steps do not run');
};

export const billingSaga = createBillingSaga({
  provider: new Proxy({}, { get: unused }) as never,
  confirmTimeoutMs: 30_000,
  confirm: async () => unused(),
});
