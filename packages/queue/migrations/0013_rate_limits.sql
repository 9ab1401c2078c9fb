CREATE TABLE "skiplock"."rate_starts" (
	"key" text NOT NULL,
	"started_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD COLUMN "rate_limit" integer;--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD COLUMN "rate_interval_ms" integer;--> statement-breakpoint
CREATE INDEX "rate_starts_key_idx" ON "skiplock"."rate_starts" USING btree ("key","started_at");--> statement-breakpoint
CREATE INDEX "rate_starts_started_idx" ON "skiplock"."rate_starts" USING btree ("started_at");--> statement-breakpoint
ALTER TABLE "skiplock"."jobs" ADD CONSTRAINT "jobs_rate_limit_check" CHECK ((rate_limit IS NULL) = (rate_interval_ms IS NULL) AND (rate_limit IS NULL OR concurrency_key IS NOT NULL) AND rate_limit >= 1 AND rate_interval_ms >= 1);