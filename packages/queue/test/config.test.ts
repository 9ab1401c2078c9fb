import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import pg from 'pg';
import {
  ConfigError,
  createClient,
  createRetention,
  createScheduler,
  createSweeper,
  createWorker,
  defineJob,
  defineSchedule,
} from '../src/index.js';
import { quiet } from './fixtures.js';

const job = defineJob({ type: 'cfg', payload: z.object({}), handler: async () => {} });
const url = 'postgres://nobody@127.0.0.1:1/none';

describe('malformed configuration', () => {
  it('names the bad worker option', () => {
    expect(() =>
      createWorker({ connectionString: url, jobs: [job], concurrency: 0, logger: quiet }),
    ).toThrow(/worker options: concurrency/);
    expect(() => createWorker({ connectionString: url, jobs: [], logger: quiet })).toThrow(/jobs/);
    expect(() =>
      createWorker({ connectionString: url, jobs: [job], logger: quiet, concurency: 5 } as never),
    ).toThrow(/unknown option "concurency"/);
    expect(() => createWorker({ connectionString: url, jobs: [job, job], logger: quiet })).toThrow(
      /defined twice/,
    );
    expect(() =>
      createWorker({
        connectionString: url,
        jobs: [job],
        logger: quiet,
        heartbeatIntervalMs: 60_000,
      }),
    ).toThrow(/heartbeatIntervalMs/);
  });

  it('names the bad job definition option', () => {
    const bad = () =>
      defineJob({ type: 'bad type!', payload: z.object({}), handler: async () => {} });
    expect(bad).toThrow(ConfigError);
    expect(bad).toThrow(/job type/);
    expect(() =>
      defineJob({ type: 'ok', payload: z.object({}), handler: async () => {}, maxAttempts: 0 }),
    ).toThrow(/maxAttempts/);
    expect(() =>
      defineJob({ type: 'ok', payload: z.object({}), handler: async () => {}, leaseMs: 10 }),
    ).toThrow(/leaseMs/);
  });

  it('names the bad client option', () => {
    expect(() =>
      createClient({ connectionString: url, logger: quiet, maxPayloadBytes: -1 }),
    ).toThrow(/maxPayloadBytes/);
    expect(() => createClient({ connectionString: url, logger: quiet, pol: 1 } as never)).toThrow(
      /unknown option "pol"/,
    );
  });

  it('names a misspelt option of the sweeper, retention and scheduler, nested or on their own', async () => {
    const schedules = [defineSchedule({ name: 'cfg', cron: '* * * * *', job, payload: {} })];
    const worker = (extra: object) => () =>
      createWorker({ connectionString: url, jobs: [job], logger: quiet, ...extra });
    // Before: each was accepted and ran on its defaults.
    expect(worker({ sweeper: { intervalMS: 1_000 } })).toThrow(
      /sweeper options: unknown option "intervalMS"/,
    );
    expect(worker({ retention: { completedAgeMS: 0 } })).toThrow(
      /retention options: unknown option "completedAgeMS"/,
    );
    expect(worker({ schedules, scheduler: { interval: 200 } })).toThrow(
      /scheduler options: unknown option "interval"/,
    );
    const pool = new pg.Pool({ connectionString: url });
    try {
      expect(() => createSweeper({ pool, logger: quiet, batchsize: 5 } as never)).toThrow(
        /unknown option "batchsize"/,
      );
      expect(() => createRetention({ pool, logger: quiet, deadAgeDays: 1 } as never)).toThrow(
        /unknown option "deadAgeDays"/,
      );
      expect(() =>
        createScheduler({ pool, logger: quiet, schedules, intervalMS: 200 } as never),
      ).toThrow(/unknown option "intervalMS"/);
      // Before: accepted, then every pass failed with "timestamp out of range".
      expect(() =>
        createRetention({ pool, logger: quiet, completedAgeMs: Number.MAX_SAFE_INTEGER }),
      ).toThrow(/retention options: completedAgeMs/);
      expect(() => createRetention({ pool, logger: quiet, deadAgeMs: 1e15 })).toThrow(
        /retention options: deadAgeMs/,
      );
      expect(() =>
        createRetention({ pool, logger: quiet, completedAgeMs: 99 * 365 * 86_400_000 }),
      ).not.toThrow();
    } finally {
      await pool.end();
    }
  });
});
