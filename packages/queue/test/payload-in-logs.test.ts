import { describe, expect, it } from 'vitest';
import { quotingEmail, REFUSED_EMAIL } from '../../../test/support/quoting-schema.js';
import { z } from 'zod';
import {
  createClient,
  createScheduler,
  defineJob,
  defineSchedule,
  InvalidPayloadError,
  NonRetryableError,
} from '../src/index.js';
import { loggedAs } from '../src/engine.js';
import { captureLogs, useTestDatabase } from '../../../test/support/db.js';
import { memoryTracing } from '../../../test/support/tracing.js';
import { jobRow, quiet, testWorker } from './fixtures.js';

// A validator whose messages quote the refused value, as valibot's do ("Received ..."): the
// worker's and the scheduler's log lines and the job's span carried it (found in an audit).

const db = await useTestDatabase();
const otel = memoryTracing();
const SECRET = REFUSED_EMAIL;

const signup = defineJob({
  type: 'signup',
  queue: 'signup',
  payload: quotingEmail,
  handler: () => {},
});

describe('payload values in logs and spans', () => {
  it("a stored payload its schema refuses: the worker's log and span name the fields only", async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO skiplock.jobs (job_type, queue, payload) VALUES ('signup', 'signup', $1)
       RETURNING id::text`,
      [JSON.stringify({ email: SECRET })],
    );
    const id = rows[0]!.id;
    const logs = captureLogs();
    const worker = testWorker(db.pool, [signup], { logger: logs.logger, tracing: otel.tracing });
    expect(await worker.runOnce()).toBe(1);
    const dead = logs.lines.find((l) => l.reason === 'invalid_payload');
    expect(dead).toMatchObject({ err: 'invalid payload for job type "signup" at payload.email' });
    expect(JSON.stringify(logs.lines)).not.toContain(SECRET);
    const span = otel.spans().find((s) => s.attributes['messaging.message.id'] === id);
    expect(span?.status.message).toBe('invalid payload for job type "signup" at payload.email');
    expect(JSON.stringify({ status: span?.status, events: span?.events })).not.toContain(SECRET);
    // Operators still read the whole message on the job.
    const row = await jobRow(db.pool, id);
    expect(row.status).toBe('dead');
    expect(row.last_error).toContain(SECRET);
  });

  it("a schedule's payload its job refuses: schedule_failed names the fields only", async () => {
    const logs = captureLogs();
    const schedule = defineSchedule({
      name: 'signup-nightly',
      cron: '* * * * *',
      job: signup,
      payload: { email: SECRET },
    });
    const client = createClient({ pool: db.pool, logger: quiet });
    const scheduler = createScheduler({
      pool: db.pool,
      client,
      schedules: [schedule],
      logger: logs.logger,
    });
    const t0 = new Date('2026-04-01T00:00:30Z');
    await scheduler.runOnce({ now: t0 });
    const result = await scheduler.runOnce({ now: new Date(t0.getTime() + 60_000) });
    expect(result.failed).toEqual(['signup-nightly']);
    expect(logs.lines.find((l) => l.reason === 'schedule_failed')).toMatchObject({
      err: 'invalid payload for job type "signup" at items[0].payload.email',
    });
    expect(JSON.stringify(logs.lines)).not.toContain(SECRET);
    expect(
      new InvalidPayloadError('signup', [{ path: 'payload.email', message: SECRET }]).message,
    ).toContain(SECRET);
  });

  it("an error marked with loggedAs: its log lines and its span's exception carry that text only", async () => {
    const logs = captureLogs();
    const marked = defineJob({
      type: 'marked',
      queue: 'marked',
      payload: z.object({}),
      maxAttempts: 1,
      handler: () => {
        throw loggedAs(new NonRetryableError(`refused: Received "${SECRET}"`), 'refused at email');
      },
    });
    const client = createClient({ pool: db.pool, logger: quiet });
    const { id } = await client.enqueue(marked, {});
    const worker = testWorker(db.pool, [marked], { logger: logs.logger, tracing: otel.tracing });
    expect(await worker.runOnce()).toBe(1);
    expect(logs.lines.find((l) => l.reason === 'non_retryable')).toMatchObject({
      err: 'refused at email',
    });
    expect(JSON.stringify(logs.lines)).not.toContain(SECRET);
    const span = otel.spans().find((s) => s.attributes['messaging.message.id'] === id);
    expect(span?.events.map((e) => e.name)).toContain('exception');
    // Before: the exception event carried the error itself, its message and stack whole.
    expect(JSON.stringify({ status: span?.status, events: span?.events })).not.toContain(SECRET);
    expect((await jobRow(db.pool, id)).last_error).toContain(SECRET);
  });
});
