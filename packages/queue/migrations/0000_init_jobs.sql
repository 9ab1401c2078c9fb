CREATE SCHEMA IF NOT EXISTS "skiplock";
--> statement-breakpoint
CREATE TYPE "skiplock"."job_status" AS ENUM('pending', 'processing', 'failed', 'completed', 'dead', 'cancelled');--> statement-breakpoint
CREATE TABLE "skiplock"."jobs" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"queue" text DEFAULT 'default' NOT NULL,
	"job_type" text NOT NULL,
	"payload" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"idempotency_key" text,
	"status" "skiplock"."job_status" DEFAULT 'pending' NOT NULL,
	"priority" integer DEFAULT 0 NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"max_attempts" integer DEFAULT 5 NOT NULL,
	"run_at" timestamp with time zone DEFAULT now() NOT NULL,
	"locked_at" timestamp with time zone,
	"locked_by" text,
	"lease_expires_at" timestamp with time zone,
	"lease_ms" integer DEFAULT 30000 NOT NULL,
	"timeout_ms" integer,
	"last_error" text,
	"errors" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"completed_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "jobs_queue_idempotency_key_unique" UNIQUE("queue","idempotency_key"),
	CONSTRAINT "jobs_attempts_check" CHECK (attempts >= 0 AND max_attempts >= 1),
	CONSTRAINT "jobs_lease_ms_check" CHECK (lease_ms >= 1000)
);
--> statement-breakpoint
CREATE INDEX "jobs_claim_idx" ON "skiplock"."jobs" USING btree ("queue","priority" DESC NULLS LAST,"run_at","id") WHERE status IN ('pending', 'failed');--> statement-breakpoint
CREATE INDEX "jobs_aging_idx" ON "skiplock"."jobs" USING btree ("queue","run_at","id") WHERE status IN ('pending', 'failed');--> statement-breakpoint
CREATE INDEX "jobs_sweep_idx" ON "skiplock"."jobs" USING btree ("lease_expires_at") WHERE status = 'processing';--> statement-breakpoint
CREATE INDEX "jobs_retention_idx" ON "skiplock"."jobs" USING btree ("status","updated_at") WHERE status IN ('completed', 'dead', 'cancelled');