import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { settled, startSagas, timeline } from './fixtures.js';

const db = await useTestDatabase();
const DAY = 86_400_000;

describe('a deadline longer than a Node timer holds (2^31-1 ms, about 24.8 days)', () => {
  it('a 30-day deadline, from the definition or the start, does not abort the steps', async () => {
    const seen: string[] = [];
    const saga = defineSaga({
      name: 'month-deadline',
      version: 1,
      input: z.object({}),
      deadlineMs: 30 * DAY,
    })
      .step('reserve', {
        run: async (ctx) => {
          await sleep(30);
          seen.push(`${ctx.sagaId} reserve aborted=${ctx.signal.aborted}`);
          return 1;
        },
        compensate: async (ctx) => void seen.push(`${ctx.sagaId} undo reserve`),
      })
      .step('charge', {
        pivot: true,
        run: async (ctx) => {
          await sleep(30);
          seen.push(`${ctx.sagaId} charge aborted=${ctx.signal.aborted}`);
          return 2;
        },
      });
    const { runtime } = await startSagas(db.pool, [saga]);
    await runtime.start(saga, { id: 'd30', input: {} });
    await runtime.start(saga, { id: 'd365', input: {}, deadlineMs: 365 * DAY });
    for (const id of ['d30', 'd365']) {
      const view = await settled(runtime, id);
      expect(view.status).toBe('completed');
      expect(timeline(view)).toEqual(['reserve:completed', 'charge:completed']);
    }
    expect(seen.sort()).toEqual([
      'd30 charge aborted=false',
      'd30 reserve aborted=false',
      'd365 charge aborted=false',
      'd365 reserve aborted=false',
    ]);
  });
});
