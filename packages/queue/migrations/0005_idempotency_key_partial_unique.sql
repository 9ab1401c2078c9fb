-- Unkeyed jobs (most of them) no longer carry an entry in the idempotency index; see schema.ts.
ALTER TABLE "skiplock"."jobs" DROP CONSTRAINT "jobs_queue_idempotency_key_unique";--> statement-breakpoint
CREATE UNIQUE INDEX "jobs_queue_idempotency_key_unique" ON "skiplock"."jobs" USING btree ("queue","idempotency_key") WHERE idempotency_key IS NOT NULL;