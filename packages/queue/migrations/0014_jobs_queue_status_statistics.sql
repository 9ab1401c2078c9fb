-- The job gauges (createJobGauges) count each queue and status exactly up to a limit and, above it,
-- show the planner's estimate of `queue = $1 AND status = $2`. Without statistics on the pair the
-- planner multiplies the two columns' frequencies as if they were independent, and a backlog in
-- one queue is exactly when they are not: 200,000 pending jobs all in one of four queues were
-- estimated at 52,000. A most-common-values list over the pair makes it 180,000 (ANALYZE reads a
-- sample). Autovacuum's ANALYZE keeps it current; it costs ANALYZE a little and writes nothing.
CREATE STATISTICS "skiplock"."jobs_queue_status" (mcv) ON "queue", "status" FROM "skiplock"."jobs";
