-- Concurrency keys: admission of `waiting` jobs into a key's slots. This is the second migration
-- set of the queue, applied in a transaction of its own after the first: it names the enum value
-- `waiting` (added by migrations/0011_concurrency_keys.sql), which PostgreSQL lets no statement
-- use before the transaction that added it commits. Hand-written: drizzle-kit does not model
-- functions, and these indexes name that value.

-- Jobs holding a slot of their key: counted under the key's lock before admitting more.
CREATE INDEX "jobs_admitted_idx" ON "skiplock"."jobs" ("concurrency_key")
  WHERE concurrency_key IS NOT NULL AND status IN ('pending', 'retryable', 'processing');
--> statement-breakpoint

-- Jobs waiting for a slot, in the order they are admitted within a key; the admission pass also
-- walks its distinct keys (a skip scan). Not a claim index: waiting rows are never claimed, so a
-- busy key's backlog costs a claim nothing (no head-of-line blocking).
CREATE INDEX "jobs_waiting_idx" ON "skiplock"."jobs"
  ("concurrency_key", "priority" DESC, "run_at", "id")
  WHERE status = 'waiting';
--> statement-breakpoint

-- Admits waiting jobs of the given keys (NULL: of the keys that have waiting jobs, in key order
-- after `after_key`, at most `max_keys`) while their key has a free slot. Each key is taken under
-- a transaction advisory lock (class 377101, the queue's namespace + 1), then its head and its
-- slots are read by statements that start after the lock is held: in READ COMMITTED each
-- statement of a volatile function reads a fresh snapshot, so every admission that committed
-- before the lock was granted is counted. Keys are locked in sorted order, and nothing else takes
-- these locks, so two admitters cannot deadlock. With `wait` false a key whose lock is held is
-- skipped: its holder, or the next pass, admits it. Admitted jobs' queues are notified.
CREATE FUNCTION "skiplock"."admit"(
  keys text[], wait boolean, max_keys integer, after_key text,
  OUT admitted integer, OUT last_key text
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  k text;
  head_limit integer;
  busy integer;
  n integer;
  q text;
BEGIN
  admitted := 0;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock.admit needs READ COMMITTED (got %): a fixed snapshot would miss '
      'admissions committed while it waited for a key', current_setting('transaction_isolation');
  END IF;
  IF keys IS NULL THEN
    keys := ARRAY(
      WITH RECURSIVE found(key) AS (
        (SELECT j.concurrency_key FROM skiplock.jobs j
         WHERE j.status = 'waiting' AND j.concurrency_key > coalesce(after_key, '')
         ORDER BY j.concurrency_key LIMIT 1)
        UNION ALL
        SELECT (SELECT j.concurrency_key FROM skiplock.jobs j
                WHERE j.status = 'waiting' AND j.concurrency_key > f.key
                ORDER BY j.concurrency_key LIMIT 1)
        FROM found f WHERE f.key IS NOT NULL
      )
      SELECT key FROM found WHERE key IS NOT NULL LIMIT max_keys);
    -- A full batch says where the next pass goes on; a short one reached the last key.
    IF cardinality(keys) >= max_keys THEN last_key := keys[cardinality(keys)]; END IF;
  END IF;
  FOR k IN SELECT DISTINCT u FROM unnest(keys) AS u WHERE u IS NOT NULL ORDER BY 1 LOOP
    IF wait THEN
      PERFORM pg_advisory_xact_lock(377101, hashtext(k));
    ELSIF NOT pg_try_advisory_xact_lock(377101, hashtext(k)) THEN
      CONTINUE;
    END IF;
    SELECT j.concurrency_limit INTO head_limit FROM skiplock.jobs j
    WHERE j.concurrency_key = k AND j.status = 'waiting' AND j.run_at <= now()
    ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1;
    CONTINUE WHEN head_limit IS NULL;
    SELECT count(*) INTO busy FROM skiplock.jobs j
    WHERE j.concurrency_key = k AND j.status IN ('pending', 'retryable', 'processing');
    CONTINUE WHEN busy >= head_limit;
    FOR q IN
      WITH picked AS (
        UPDATE skiplock.jobs j SET status = 'pending', updated_at = now()
        WHERE j.id IN (SELECT w.id FROM skiplock.jobs w
                       WHERE w.concurrency_key = k AND w.status = 'waiting' AND w.run_at <= now()
                       ORDER BY w.priority DESC, w.run_at, w.id
                       LIMIT head_limit - busy)
          AND j.status = 'waiting'
        RETURNING j.queue
      )
      SELECT picked.queue FROM picked
    LOOP
      admitted := admitted + 1;
      -- Identical notifications of one transaction are delivered once.
      PERFORM pg_notify('skiplock_jobs', q);
    END LOOP;
  END LOOP;
END;
$$;
--> statement-breakpoint

-- Inserted jobs wake workers: pending ones on `skiplock_jobs` (by queue, as before), waiting ones
-- on `skiplock_admit` (by key, or `*` for many keys), so a worker admits them once the insert has
-- committed. A notification goes out at commit only, when the rows are visible.
CREATE OR REPLACE FUNCTION "skiplock"."notify_jobs_inserted"() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  q text;
  keys text[];
BEGIN
  FOR q IN SELECT DISTINCT queue FROM new_rows WHERE run_at <= now() AND status = 'pending' LOOP
    PERFORM pg_notify('skiplock_jobs', q);
  END LOOP;
  keys := ARRAY(SELECT DISTINCT concurrency_key FROM new_rows
                WHERE status = 'waiting' AND run_at <= now() LIMIT 17);
  IF cardinality(keys) > 16 THEN
    PERFORM pg_notify('skiplock_admit', '*');
  ELSE
    FOREACH q IN ARRAY keys LOOP
      PERFORM pg_notify('skiplock_admit', q);
    END LOOP;
  END IF;
  RETURN NULL;
END;
$$;
