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
-- after `after_key`, at most `max_keys`) while their key has a free slot. The keys are locked
-- first, each with a transaction advisory lock (class 377101, the queue's namespace + 1), in
-- sorted order; nothing else takes these locks, so two admitters cannot deadlock. With `wait`
-- false a key whose lock is held is skipped: its holder, or the next pass, admits it. Only then
-- are slots counted and jobs admitted, by statements that start after every lock is held: in
-- READ COMMITTED each statement of a volatile function reads a fresh snapshot, so every admission
-- that committed before a lock was granted is counted.
--
-- An admitted job goes to the caller itself when `lease_to` names a worker that runs its queue and
-- type and has room (`lease_max`): it is leased to that worker as a claim would (status
-- processing, attempt counted, lock token, lease) and returned in `leased`, so the worker starts
-- it with no NOTIFY and no claim (a key's jobs then follow each other at the speed of two round
-- trips). Any other admitted job becomes pending, and its queue is notified.
--
-- A rate-limited job (rate_limit starts per rate_interval_ms of its key) is admitted only while
-- its key's starts in `skiplock.rate_starts` within the interval are fewer than the limit, and
-- only leased, so that its start is the one logged: it never waits as pending for a claim that
-- would start it later than counted.
--
-- Set-based: one UPDATE admits the next job of every key with room, and another round runs only
-- for keys with room left (none when the limit is 1). Per key and statement, as first written,
-- admission cost about 70 ms per 1,000 keys; a LIMIT computed from variables made it 260 ms (a
-- generic plan).
CREATE FUNCTION "skiplock"."admit"(
  keys text[], wait boolean, max_keys integer, after_key text,
  lease_to text, lease_max integer, lease_queues text[], lease_types text[],
  OUT admitted integer, OUT last_key text, OUT leased jsonb
) LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  open_keys text[];
  taken jsonb := '[]';
  round_taken jsonb;
  round_admitted integer;
  round_queues text[];
  q text;
  round integer;
BEGIN
  admitted := 0;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'skiplock.admit needs READ COMMITTED (got %): a fixed snapshot would miss '
      'admissions committed while it waited for a key', current_setting('transaction_isolation');
  END IF;
  -- An admission lost in a server crash leaves its jobs waiting for the next pass: no need to
  -- wait for the WAL flush (as the worker's claims).
  PERFORM set_config('synchronous_commit', 'off', true);
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
    -- Starts older than the longest interval (a day) count for no key: a bounded prune per pass
    -- keeps keys that stopped having jobs from keeping theirs.
    DELETE FROM skiplock.rate_starts
    WHERE ctid = ANY(ARRAY(SELECT r.ctid FROM skiplock.rate_starts r
                           WHERE r.started_at < clock_timestamp() - interval '1 day'
                           LIMIT 1000));
  END IF;
  -- Locks are taken in the order of their lock ids (a key's hash, then the key), so two keys
  -- that share a hash cannot make two admitters wait for each other.
  IF wait THEN
    open_keys := ARRAY(
      SELECT u FROM (SELECT DISTINCT u FROM unnest(keys) AS u WHERE u IS NOT NULL) s
      ORDER BY hashtext(u), u);
    PERFORM pg_advisory_xact_lock(377101, hashtext(u)) FROM unnest(open_keys) AS u;
  ELSE
    open_keys := ARRAY(
      SELECT u FROM (SELECT u FROM (SELECT DISTINCT u FROM unnest(keys) AS u
                                    WHERE u IS NOT NULL) d
                     ORDER BY hashtext(u), u) s
      WHERE pg_try_advisory_xact_lock(377101, hashtext(u)));
  END IF;
  -- Each round admits at most one job per key: a bound on one call's work and lock time. A key
  -- with room left is admitted further by its next admission.
  FOR round IN 1..50 LOOP
    EXIT WHEN cardinality(open_keys) = 0;
    WITH head AS (
      SELECT k.key, w.id, w.concurrency_limit, w.rate_limit, w.rate_interval_ms,
             lease_to IS NOT NULL AND w.queue = ANY(lease_queues)
               AND w.job_type = ANY(lease_types) AS runnable
      FROM unnest(open_keys) AS k(key)
      CROSS JOIN LATERAL (
        SELECT w.id, w.queue, w.job_type, w.concurrency_limit, w.rate_limit, w.rate_interval_ms
        FROM skiplock.jobs w
        WHERE w.concurrency_key = k.key AND w.status = 'waiting' AND w.run_at <= now()
        ORDER BY w.priority DESC, w.run_at, w.id LIMIT 1) w
    ),
    room AS (
      SELECT h.*,
             (SELECT count(*) FROM skiplock.jobs j
              WHERE j.concurrency_key = h.key
                AND j.status IN ('pending', 'retryable', 'processing')) AS busy,
             -- Starts within the interval, in the clock as it reads now that the key is held: a
             -- start logged by an earlier holder is never in this one's future.
             CASE WHEN h.rate_limit IS NULL THEN 0
                  ELSE (SELECT count(*) FROM skiplock.rate_starts r
                        WHERE r.key = h.key
                          AND r.started_at > clock_timestamp()
                                             - h.rate_interval_ms * interval '1 millisecond')
             END AS used
      FROM head h
    ),
    pick AS (
      SELECT r.id, r.busy, r.used, r.rate_limit,
             r.runnable AND row_number() OVER (PARTITION BY r.runnable ORDER BY r.id)
                            <= lease_max - jsonb_array_length(taken) AS ours
      FROM room r
      WHERE r.busy < r.concurrency_limit AND (r.rate_limit IS NULL OR r.used < r.rate_limit)
    ),
    admitted_now AS (
      UPDATE skiplock.jobs j
      SET status = CASE WHEN p.ours THEN 'processing' ELSE 'pending' END::skiplock.job_status,
          attempts = CASE WHEN p.ours THEN j.attempts + 1 ELSE j.attempts END,
          locked_by = CASE WHEN p.ours THEN lease_to END,
          -- A started job no longer holds its singleton key, unless it asked to (see the claim).
          singleton_key = CASE WHEN p.ours AND NOT j.singleton_running THEN NULL
                               ELSE j.singleton_key END,
          locked_at = CASE WHEN p.ours THEN clock_timestamp() END,
          lease_expires_at = CASE WHEN p.ours
                                  THEN now() + j.lease_ms * interval '1 millisecond' END,
          updated_at = now()
      FROM pick p
      -- A rate-limited job starts only leased, so that its start is the admission logged here.
      WHERE j.id = p.id AND j.status = 'waiting' AND (p.ours OR p.rate_limit IS NULL)
      RETURNING j.concurrency_key, j.queue, p.ours, p.rate_limit IS NOT NULL AS rated,
        p.busy + 1 < j.concurrency_limit AND (p.rate_limit IS NULL OR p.used + 1 < p.rate_limit)
          AS room_left,
        CASE WHEN p.ours THEN jsonb_build_object(
          'id', j.id::text, 'queue', j.queue, 'job_type', j.job_type, 'payload', j.payload,
          'attempts', j.attempts, 'max_attempts', j.max_attempts, 'priority', j.priority,
          'timeout_ms', j.timeout_ms, 'lease_ms', j.lease_ms,
          'idempotency_key', j.idempotency_key, 'concurrency_key', j.concurrency_key,
          'payload_bytes', octet_length(j.payload::text)) END AS claimed
    ),
    logged AS (
      INSERT INTO skiplock.rate_starts (key, started_at)
      SELECT a.concurrency_key, clock_timestamp() FROM admitted_now a WHERE a.rated
    ),
    -- A rate-limited key keeps at most its starts of the last interval.
    pruned AS (
      DELETE FROM skiplock.rate_starts r USING head h
      WHERE h.rate_limit IS NOT NULL AND r.key = h.key
        AND r.started_at <= clock_timestamp() - h.rate_interval_ms * interval '1 millisecond'
    )
    SELECT count(*)::int,
           coalesce(jsonb_agg(a.claimed) FILTER (WHERE a.ours), '[]'),
           coalesce(array_agg(DISTINCT a.queue) FILTER (WHERE NOT a.ours), '{}'),
           coalesce(array_agg(a.concurrency_key) FILTER (WHERE a.room_left), '{}')
    INTO round_admitted, round_taken, round_queues, open_keys
    FROM admitted_now a;
    admitted := admitted + round_admitted;
    taken := taken || round_taken;
    FOREACH q IN ARRAY round_queues LOOP
      PERFORM pg_notify('skiplock_jobs', q);
    END LOOP;
  END LOOP;
  leased := taken;
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
