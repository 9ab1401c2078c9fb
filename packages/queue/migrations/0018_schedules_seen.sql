ALTER TABLE "skiplock"."schedules" ADD COLUMN "seen_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "skiplock"."schedules" ADD COLUMN "seen_for" jsonb;