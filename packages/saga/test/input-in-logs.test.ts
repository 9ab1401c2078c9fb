import { describe, expect, it } from 'vitest';
import { quotingEmail, REFUSED_EMAIL } from '../../../test/support/quoting-schema.js';
import { z } from 'zod';
import { defineSaga } from '../src/index.js';
import { useTestDatabase } from '../../../test/support/db.js';
import { captureLogs, fast, settled, startSagas } from './fixtures.js';

// A validator whose messages quote the refused value, as valibot's do: the worker's log lines of
// a child input it refused carried the value (found in review).

const db = await useTestDatabase();
const SECRET = REFUSED_EMAIL;

const notify = defineSaga({ name: 'notify', version: 1, input: quotingEmail }).step('send', {
  ...fast,
  run: () => null,
});
const signup = defineSaga({ name: 'signup', version: 1, input: z.object({ email: z.string() }) })
  .step('create', { ...fast, run: () => null })
  .child('welcome', notify, (ctx) => ({ email: ctx.input.email }));

describe('saga input values in logs', () => {
  it("a child's input its schema refuses is logged by its fields only, and kept whole on the saga", async () => {
    const logs = captureLogs();
    const { runtime } = await startSagas(db.pool, [signup], { logger: logs.logger });
    await runtime.start(signup, { id: 'su1', input: { email: SECRET } });
    const saga = await settled(runtime, 'su1');
    expect(saga.status).toBe('compensated');
    expect(saga.error).toContain(SECRET);
    const dead = logs.lines.find((l) => l.reason === 'non_retryable');
    expect(dead).toMatchObject({
      err: 'child step "welcome": input of saga "notify" is invalid at input.email',
    });
    expect(JSON.stringify(logs.lines)).not.toContain(SECRET);
  });
});
