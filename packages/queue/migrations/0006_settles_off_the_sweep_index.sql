-- The sweep index becomes usable only by statements that bound lease_expires_at; see schema.ts.
DROP INDEX "skiplock"."jobs_sweep_idx";--> statement-breakpoint
CREATE INDEX "jobs_sweep_idx" ON "skiplock"."jobs" USING btree ("lease_expires_at") WHERE status = 'processing' AND lease_expires_at IS NOT NULL;