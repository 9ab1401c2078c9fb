ALTER TABLE "skiplock"."jobs" ADD COLUMN "trace_parent" text;--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD COLUMN "trace_state" text;