-- A running job an operator stops (`cancelJob(id, { running: true })`) is `cancelled` at once,
-- but its handler runs on until its worker's next lease renewal aborts it and it returns. Its
-- concurrency slot was given back at once, so the key's next job could start beside it: two
-- jobs of a key of limit 1 running together (a caveat documented until this migration).
-- Such a run keeps its lease (`lease_expires_at` set on a cancelled row, which no other path
-- leaves) and holds its slot until its worker clears the lease once the handler has returned,
-- or until the lease runs out (its worker gone or stuck: the same rule as for any lease).

-- No cancelled row kept its lease before this release (cancelJob cleared it); a row left so by
-- hand would otherwise hold a slot for the rest of its lease.
UPDATE "skiplock"."jobs" SET lease_expires_at = NULL
WHERE status = 'cancelled' AND lease_expires_at IS NOT NULL;
--> statement-breakpoint

-- The slot holders' index gains the stopping runs. A new index, built before the old one is
-- dropped, so admission never counts without one. Its status and lease are included so that the
-- count stays an index-only scan (the lease is tested for a stopping run); both columns were
-- indexed already (the sweep's and retention's indexes), so no update that was HOT stops being.
CREATE INDEX "jobs_slot_holders_idx" ON "skiplock"."jobs" ("concurrency_key")
  INCLUDE ("status", "lease_expires_at")
  WHERE concurrency_key IS NOT NULL
    AND (status IN ('pending', 'retryable', 'processing')
         OR (status = 'cancelled' AND lease_expires_at IS NOT NULL));
--> statement-breakpoint

DROP INDEX "skiplock"."jobs_admitted_idx";
--> statement-breakpoint

-- The function of 0004_admission_lease_clock.sql, unchanged but for the count of a key's busy
-- slots (`room`), which counts a stopping run while its lease is live.
CREATE OR REPLACE FUNCTION "skiplock"."admit"(
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
                AND (j.status IN ('pending', 'retryable', 'processing')
                     OR (j.status = 'cancelled' AND j.lease_expires_at IS NOT NULL
                         AND j.lease_expires_at > clock_timestamp()))) AS busy,
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
    -- The heads this call can take now: one that another transaction holds (an application's
    -- debounce of it, an operator's update) is left to the key's next admission, in order,
    -- rather than waited for with every other key's lease already computed.
    free AS (
      SELECT j.id FROM skiplock.jobs j
      WHERE j.id IN (SELECT h.id FROM head h)
      FOR NO KEY UPDATE SKIP LOCKED
    ),
    pick AS (
      SELECT r.id, r.busy, r.used, r.rate_limit,
             r.runnable AND row_number() OVER (PARTITION BY r.runnable ORDER BY r.id)
                            <= lease_max - jsonb_array_length(taken) AS ours
      FROM room r
      WHERE r.busy < r.concurrency_limit AND (r.rate_limit IS NULL OR r.used < r.rate_limit)
        AND r.id IN (SELECT f.id FROM free f)
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
          -- From the clock as the job is leased, not from the transaction's start: a pass that
          -- waited on a locked row (an application's transaction holding a waiting job) handed
          -- out leases already expired, and the sweeper took both jobs back from a healthy worker.
          lease_expires_at = CASE WHEN p.ours
                                  THEN clock_timestamp() + j.lease_ms * interval '1 millisecond' END,
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
          'payload_bytes', octet_length(j.payload::text),
          'trace_parent', j.trace_parent, 'trace_state', j.trace_state) END AS claimed
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
