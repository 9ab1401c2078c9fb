// A cron schedule run by a worker: packages/queue/README.md's schedule snippet, as a complete
// program. Run: DATABASE_URL=postgres://... npx tsx schedule.ts
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import {
  createClient,
  createWorker,
  defineJob,
  defineSchedule,
  listSchedules,
  migrate,
  pauseSchedule,
} from '@skiplock/queue';

const ran: string[] = [];
const report = defineJob({
  type: 'usage-report',
  payload: z.object({ tick: z.string() }),
  handler: async ({ tick }) => void ran.push(tick),
});

const everySecond = defineSchedule({
  name: 'usage-report',
  cron: '* * * * * *', // 5 fields, or 6 with seconds first (croner's syntax): here every second
  timezone: 'Europe/Paris', // IANA name; default UTC
  job: report,
  payload: (tick) => ({ tick: tick.toISOString() }), // or a plain value
  catchUp: 'skip', // after downtime; or 'latest', or { withinMs }
});

const connectionString = process.env['DATABASE_URL'];
await migrate({ connectionString });
// Any number of workers may run the same schedules: each tick is enqueued once.
const worker = createWorker({
  connectionString,
  jobs: [report],
  schedules: [everySecond],
  scheduler: { intervalMs: 200 },
});
await worker.start();
for (let i = 0; i < 100 && ran.length < 3; i++) await sleep(100);
// Operators pause, resume and list schedules in code or with `skiplock schedules ...`.
const client = createClient({ connectionString });
await pauseSchedule(client.pool, 'usage-report');
const [state] = await listSchedules(client.pool);
await worker.stop();
await client.close();

console.log(
  `ticks run: ${ran.length >= 3 && new Set(ran).size === ran.length ? '3 or more, each once' : ran.join(', ')}`,
);
console.log(
  `schedule ${state?.name} (${state?.cron}, ${state?.timezone}): ${state?.paused ? 'paused' : 'active'}`,
);
