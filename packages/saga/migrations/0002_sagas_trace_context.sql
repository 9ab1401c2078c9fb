ALTER TABLE "skiplock"."sagas" ADD COLUMN "trace_parent" text;--> statement-breakpoint
ALTER TABLE "skiplock"."sagas" ADD COLUMN "trace_state" text;