-- Wake-ups now come from the statements that insert jobs (each calls pg_notify for the queues of
-- the due pending jobs it inserted), not from a trigger. The statement-level trigger kept every
-- inserted row in a transition table and ran a PL/pgSQL query over it, for every insert, handed-off
-- saga steps included, which notify nothing: on a one-job enqueue (pgbench, prepared, one client,
-- this schema) 2,500-3,150 inserts/s with it against 3,130-3,700 with the NOTIFY in the statement.
-- Notifications are still one per statement and queue: PostgreSQL folds identical ones of a
-- transaction. A process of an older version that inserts jobs no longer wakes workers: they find
-- its jobs at their next poll.
DROP TRIGGER "jobs_notify_inserted" ON "skiplock"."jobs";
--> statement-breakpoint
DROP FUNCTION "skiplock"."notify_jobs_inserted"();
