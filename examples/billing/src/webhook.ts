import { defineJob } from '@skiplock/queue';
import { z } from 'zod';
import type { FakeProvider } from './provider.js';
import type { PaymentConfirmationSignal } from './saga.js';

export const WEBHOOK_QUEUE = 'billing-webhooks';

/**
 * The provider's webhook for a charge it answered `pending`. A real provider would POST to us; here
 * its delivery is a delayed job scheduled in the provider's own transaction, so a delivery survives
 * a worker being killed. The handler settles the charge at the provider and signals the saga;
 * both are idempotent, so a retried delivery repeats nothing.
 */
export function defineWebhookJob(deps: {
  provider: FakeProvider;
  deliver: (sagaId: string, payload: PaymentConfirmationSignal) => Promise<void>;
}) {
  return defineJob({
    type: 'billing.provider-webhook',
    queue: WEBHOOK_QUEUE,
    payload: z.object({ providerKey: z.string().min(1), sagaId: z.string().min(1) }),
    maxAttempts: 20,
    backoff: { baseMs: 100, maxMs: 2_000 },
    // A delivery is quick; a short lease brings it back soon if its worker dies.
    leaseMs: 5_000,
    handler: async ({ providerKey, sagaId }, ctx) => {
      const charge = await deps.provider.confirm(providerKey);
      if (charge?.status === 'succeeded' || charge?.status === 'declined') {
        await deps.deliver(sagaId, { status: charge.status, declineCode: charge.declineCode });
        return;
      }
      // Voided or refunded: the saga stopped waiting and reversed the charge; nothing to tell it.
      ctx.logger.info(
        { reason: 'webhook_stale', status: charge?.status ?? null },
        'webhook ignored',
      );
    },
  });
}
