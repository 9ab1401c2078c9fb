import type { BillingInput } from './billing.js';

export interface SagaEngine {
  /** Starts one saga; resolves when it has started, with a promise of its end. */
  start(input: BillingInput): Promise<{ finished: Promise<void> }>;
  close(): Promise<void>;
}

/**
 * The workflows both engines run: `billing` (create invoice → charge → receipt, three steps in a
 * line) and `fanout` (create invoice → four branches at once → receipt).
 */
export type SagaShapeId = 'billing' | 'fanout';

export interface SagaSystem {
  id: string;
  /** Creates the engine's own tables (the business tables exist already). */
  install(url: string): Promise<void>;
  engine(url: string, shape: SagaShapeId): Promise<SagaEngine>;
}
