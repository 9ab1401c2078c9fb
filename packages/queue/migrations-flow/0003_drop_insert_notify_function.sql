-- The inserting statements send their own wake-ups now (migrations/0016_notify_in_statement.sql
-- drops the trigger and its function). On a new database this set runs after that one, and
-- 0000_admission.sql creates the function again, with no trigger to call it: drop it here too, so
-- a new database and an upgraded one end up the same.
DROP FUNCTION IF EXISTS "skiplock"."notify_jobs_inserted"();
