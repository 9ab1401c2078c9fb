-- Singleton keys: at most one queued job per (queue, singleton key). Queued means not started:
-- pending, retryable or waiting (for a concurrency slot), so a running job does not block the
-- next one. Here, not in the first set, because the predicates name `waiting`.
CREATE UNIQUE INDEX "jobs_singleton_idx" ON "skiplock"."jobs" ("queue", "singleton_key")
  WHERE singleton_key IS NOT NULL AND status IN ('pending', 'retryable', 'waiting');
--> statement-breakpoint

-- Jobs enqueued with `singletonRunning`: among them, a processing job holds the key too, so a
-- new one is refused while one runs.
CREATE UNIQUE INDEX "jobs_singleton_running_idx" ON "skiplock"."jobs" ("queue", "singleton_key")
  WHERE singleton_key IS NOT NULL AND singleton_running
    AND status IN ('pending', 'retryable', 'waiting', 'processing');
