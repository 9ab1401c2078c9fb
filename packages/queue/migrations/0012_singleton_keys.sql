ALTER TABLE "skiplock"."jobs" ADD COLUMN "singleton_key" text;--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD COLUMN "singleton_running" boolean DEFAULT false NOT NULL;