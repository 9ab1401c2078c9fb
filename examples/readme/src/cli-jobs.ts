// A job module for `skiplock worker`: packages/cli/README.md's snippet, as a complete file.
// Run: skiplock migrate && skiplock worker ./cli-jobs.ts (enqueue from your application).
import { defineJob } from '@skiplock/queue';
import { z } from 'zod';

// Stands in for your mail provider's client.
const mailer = {
  async send(mail: { invoiceId: string; idempotencyKey: string; signal: AbortSignal }) {
    mail.signal.throwIfAborted();
    return { messageId: `msg_${mail.invoiceId}` };
  },
};

export const sendReceipt = defineJob({
  type: 'send-receipt',
  payload: z.object({ invoiceId: z.string() }),
  handler: async ({ invoiceId }, ctx) => {
    const { messageId } = await mailer.send({
      invoiceId,
      idempotencyKey: ctx.idempotencyKey,
      signal: ctx.signal,
    });
    ctx.logger.info({ reason: 'receipt_sent', invoiceId, messageId }, 'receipt sent');
  },
});

export const workerOptions = { concurrency: 20 };
