/** The saga of clock-skew.test.ts: a sleep until the input's wake time, then a step that records when it ran. */
import { defineSaga } from '../../packages/saga/src/index.js';
import { z } from 'zod';

export const SKEW_SCHEMA_SQL = `
  CREATE SCHEMA IF NOT EXISTS skew;
  CREATE TABLE skew.woke (saga_id text PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());`;

export const napSaga = defineSaga({
  name: 'skew_nap',
  version: 1,
  input: z.object({ wakeAt: z.string() }),
})
  .sleep('nap', (ctx) => new Date(ctx.input.wakeAt))
  .step('after', {
    run: (ctx) =>
      ctx.transaction((tx) =>
        tx.query('INSERT INTO skew.woke (saga_id) VALUES ($1) ON CONFLICT DO NOTHING', [
          ctx.sagaId,
        ]),
      ),
  });
