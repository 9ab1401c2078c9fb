import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '@skiplock/saga';
import { defineOutbox } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { fast, settled, startSagas, timeline } from '../../saga/test/fixtures.js';

const db = await useTestDatabase();

const events = defineOutbox({
  topics: {
    'invoice.issued': z.object({ invoiceId: z.string() }),
    'invoice.paid': z.object({ invoiceId: z.string(), attempt: z.number() }),
    'invoice.voided': z.object({ invoiceId: z.string() }),
  },
});

/** Issue an invoice, then charge it; `failCharges` attempts of the charge fail after publishing. */
function billing(failCharges: number) {
  return defineSaga({
    name: `billing-${failCharges}`,
    version: 1,
    input: z.object({ invoiceId: z.string() }),
  })
    .step('issue', {
      ...fast,
      run: (ctx, input) =>
        ctx.transaction(async (tx) => {
          await events.publish(tx, {
            topic: 'invoice.issued',
            key: input.invoiceId,
            payload: { invoiceId: input.invoiceId },
          });
          return { issued: true };
        }),
      compensate: (ctx) =>
        ctx.transaction((tx) =>
          events.publish(tx, {
            topic: 'invoice.voided',
            key: ctx.input.invoiceId,
            payload: { invoiceId: ctx.input.invoiceId },
          }),
        ),
    })
    .step('charge', {
      ...fast,
      maxAttempts: 3,
      run: async (ctx, input) => {
        await ctx.transaction((tx) =>
          events.publish(tx, {
            topic: 'invoice.paid',
            key: input.invoiceId,
            payload: { invoiceId: input.invoiceId, attempt: ctx.attempt },
          }),
        );
        // Thrown after the publish: the step's transaction, event included, rolls back.
        if (ctx.attempt <= failCharges) throw new Error(`card declined (attempt ${ctx.attempt})`);
        return { charged: true };
      },
    });
}

async function eventsOf(invoiceId: string) {
  const { rows } = await db.pool.query<{ topic: string; payload: { attempt?: number } }>(
    `SELECT topic, payload FROM skiplock.outbox_messages WHERE key = $1 ORDER BY id`,
    [invoiceId],
  );
  return rows.map((r) => (r.payload.attempt ? `${r.topic}#${r.payload.attempt}` : r.topic));
}

describe('a saga step publishes in its own transaction', () => {
  it('commits the event with the step: one event per step, from the attempt that completed', async () => {
    const saga = billing(1);
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'inv-ok', input: { invoiceId: 'inv-ok' } });
    const done = await settled(runtime, 'inv-ok');
    expect(done.status).toBe('completed');
    // The first charge attempt published, then failed: its event went with its transaction.
    expect(await eventsOf('inv-ok')).toEqual(['invoice.issued', 'invoice.paid#2']);
  });

  it('publishes nothing for a step that failed for good, and the compensation publishes its own', async () => {
    const saga = billing(3);
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'inv-no', input: { invoiceId: 'inv-no' } });
    const done = await settled(runtime, 'inv-no');
    expect(done.status).toBe('compensated');
    expect(timeline(done)).toEqual(['issue:completed', 'charge:failed', 'undo issue:completed']);
    expect(await eventsOf('inv-no')).toEqual(['invoice.issued', 'invoice.voided']);
  });
});
