-- The status of a job waiting for its retry was `failed`, which read like a saga's terminal
-- `failed`. Renamed in place (hand-written: drizzle-kit would drop and recreate the type, which
-- fails on existing rows and rewrites the table). Partial indexes and the check constraint refer
-- to the enum value by its OID, so they keep working unchanged.
ALTER TYPE "skiplock"."job_status" RENAME VALUE 'failed' TO 'retryable';
