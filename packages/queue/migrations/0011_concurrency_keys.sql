ALTER TYPE "skiplock"."job_status" ADD VALUE 'waiting';--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD COLUMN "concurrency_key" text;--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD COLUMN "concurrency_limit" integer;--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD CONSTRAINT "jobs_concurrency_check" CHECK ((concurrency_key IS NULL) = (concurrency_limit IS NULL) AND concurrency_limit >= 1);