ALTER TYPE "skiplock"."saga_status" ADD VALUE 'queued';--> statement-breakpoint
ALTER TABLE "skiplock"."sagas" ADD COLUMN "lock_key" text;--> statement-breakpoint
CREATE UNIQUE INDEX "sagas_lock_key_active_idx" ON "skiplock"."sagas" USING btree ("name","lock_key") WHERE lock_key IS NOT NULL AND status IN ('running', 'waiting', 'compensating');--> statement-breakpoint
CREATE INDEX "sagas_lock_key_idx" ON "skiplock"."sagas" USING btree ("status","name","lock_key","created_at","id") WHERE lock_key IS NOT NULL;