-- A running job enqueued with `singletonRunning` that an operator stops (`cancelJob(id,
-- { running: true })`) is `cancelled` at once, but its handler runs on until its worker's next
-- lease renewal aborts it and it returns. The running set's unique index let go of its key at
-- once, so an enqueue of the key inserted a new job, which a worker could start beside the
-- stopped run: two runs of one singleton key at once, the gap 0005_stopping_runs_hold_slots.sql
-- closed for concurrency slots. A stopped run keeps its lease until its worker clears it once the
-- handler has returned; the index now counts it while it has one. A unique index cannot compare
-- the lease with now(), so a lease that ran out (its worker gone) still counts here: an enqueue
-- that meets one clears it and tries again (`insertSingleton` in client.ts), the rule a
-- concurrency slot follows when the lease runs out.

-- Writers wait from here to the end of the migration (the index build below would make them wait
-- anyway): a process of an earlier version cannot commit a new collision between the fix-up and
-- the index.
LOCK TABLE "skiplock"."jobs" IN SHARE ROW EXCLUSIVE MODE;
--> statement-breakpoint

-- Rows the new index would refuse: a stopped run whose key a newer job took before this release
-- (one of them runs, or ran, beside it already). The newest holder keeps the key; the older
-- stopped runs give it up, and only it: they keep their lease, and with it their concurrency
-- slot, their protection from retry and retention, and a saga's wait for them.
UPDATE "skiplock"."jobs" c SET singleton_key = NULL
WHERE c.status = 'cancelled' AND c.lease_expires_at IS NOT NULL
  AND c.singleton_key IS NOT NULL AND c.singleton_running
  AND EXISTS (
    SELECT 1 FROM "skiplock"."jobs" o
    WHERE o.queue = c.queue AND o.singleton_key = c.singleton_key AND o.singleton_running
      AND o.id <> c.id
      AND (o.status IN ('pending', 'retryable', 'waiting', 'processing')
           OR (o.status = 'cancelled' AND o.lease_expires_at IS NOT NULL AND o.id > c.id)));
--> statement-breakpoint

-- Built before the old index is dropped, so no enqueue in between meets no index at all. Status
-- and lease were indexed columns already (the sweep's and the slot holders' indexes), so no update
-- that was HOT stops being.
CREATE UNIQUE INDEX "jobs_singleton_held_idx" ON "skiplock"."jobs" ("queue", "singleton_key")
  WHERE singleton_key IS NOT NULL AND singleton_running
    AND (status IN ('pending', 'retryable', 'waiting', 'processing')
         OR (status = 'cancelled' AND lease_expires_at IS NOT NULL));
--> statement-breakpoint

DROP INDEX "skiplock"."jobs_singleton_running_idx";
