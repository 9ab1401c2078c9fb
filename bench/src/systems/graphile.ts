import { Logger, makeWorkerUtils, run, runMigrations, type Runner } from 'graphile-worker';
import { labelOf } from './labels.js';
import { chunks, type Payload, type QueueSystem } from './types.js';

const logger = new Logger(() => (level, message) => {
  if (level === 'error') process.stderr.write(`graphile-worker: ${message}\n`);
});

function graphile(variant: { id: string; preset?: GraphileConfig.Preset }): QueueSystem {
  return {
    id: variant.id,
    label: labelOf(variant.id),
    async install(url) {
      await runMigrations({ connectionString: url, logger });
    },
    async enqueueBulk(url, payloads, chunk) {
      const utils = await makeWorkerUtils({ connectionString: url, logger });
      try {
        for (const part of chunks(payloads, chunk)) {
          await utils.addJobs(part.map((p) => ({ identifier: 'noop', payload: p })));
        }
      } finally {
        await utils.release();
      }
    },
    async producer(url) {
      const utils = await makeWorkerUtils({ connectionString: url, logger });
      return {
        enqueue: async (p) => {
          await utils.addJob('noop', p);
        },
        enqueueMany: async (ps) => {
          await utils.addJobs(ps.map((p) => ({ identifier: 'noop', payload: p })));
        },
        close: async () => {
          await utils.release();
        },
      };
    },
    async worker({ url, concurrency, onJob }) {
      let runner: Runner | null = null;
      return {
        go: async () => {
          runner = await run({
            connectionString: url,
            concurrency,
            noHandleSignals: true,
            logger,
            taskList: { noop: async (payload) => onJob(payload as Payload) },
            ...(variant.preset ? { preset: variant.preset } : {}),
          });
        },
        stop: async () => {
          await runner?.stop();
        },
      };
    },
    // Graphile Worker deletes a job when it succeeds.
    remainingSql: 'SELECT count(*)::int AS n FROM graphile_worker._private_jobs',
    schema: 'graphile_worker',
    isClaim: (text) => /get_job|locked_by = \$|FOR UPDATE\s+SKIP LOCKED/i.test(text),
  };
}

export const graphileDefaults = graphile({
  id: 'graphile',
});

/** Its documented batching: a local queue per pool and batched completion. */
export const graphileLocalQueue = graphile({
  id: 'graphile-lq',
  preset: {
    worker: {
      localQueue: { size: 500 },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
});
