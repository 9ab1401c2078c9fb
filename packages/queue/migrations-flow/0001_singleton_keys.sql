-- Singleton keys: at most one queued job per (queue, singleton key). Queued means not started:
-- the claim (and an admission that leases) clears the key of a job that starts, so a running job
-- does not block the next one, and a retry or a release can never collide with a newer job.
-- Here, not in the first set, because the predicates name `waiting`.
CREATE UNIQUE INDEX "jobs_singleton_idx" ON "skiplock"."jobs" ("queue", "singleton_key")
  WHERE singleton_key IS NOT NULL AND NOT singleton_running
    AND status IN ('pending', 'retryable', 'waiting');
--> statement-breakpoint

-- Jobs enqueued with `singletonRunning` keep their key while they run, and among them one job
-- per key is queued or running: a new one is refused while one runs, and the running one's
-- retry or release moves within this set without meeting another.
CREATE UNIQUE INDEX "jobs_singleton_running_idx" ON "skiplock"."jobs" ("queue", "singleton_key")
  WHERE singleton_key IS NOT NULL AND singleton_running
    AND status IN ('pending', 'retryable', 'waiting', 'processing');
