import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, createClient, createWorker, defineJob } from '../src/index.js';
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
});
