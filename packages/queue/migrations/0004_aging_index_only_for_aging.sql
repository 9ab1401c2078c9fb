-- The aging index becomes usable only by the aging scan; see jobs_aging_idx in packages/queue/src/schema.ts.
DROP INDEX "skiplock"."jobs_aging_idx";--> statement-breakpoint
CREATE INDEX "jobs_aging_idx" ON "skiplock"."jobs" USING btree ("queue","run_at","id") WHERE status IN ('pending', 'failed') AND priority IS NOT NULL;