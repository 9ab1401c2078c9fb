-- Claim and aging indexes each get a marker only their own scan states, on nullable columns (PostgreSQL 17 drops IS NOT NULL on NOT NULL columns); see schema.ts.
DROP INDEX "skiplock"."jobs_claim_idx";--> statement-breakpoint
DROP INDEX "skiplock"."jobs_aging_idx";--> statement-breakpoint
CREATE INDEX "jobs_claim_idx" ON "skiplock"."jobs" USING btree ("queue","priority" DESC NULLS LAST,"run_at","id") WHERE status IN ('pending', 'failed') AND lease_expires_at IS NULL;--> statement-breakpoint
CREATE INDEX "jobs_aging_idx" ON "skiplock"."jobs" USING btree ("queue","run_at","id") WHERE status IN ('pending', 'failed') AND completed_at IS NULL;--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD CONSTRAINT "jobs_claimable_unleased_check" CHECK (status NOT IN ('pending', 'failed') OR (lease_expires_at IS NULL AND completed_at IS NULL));