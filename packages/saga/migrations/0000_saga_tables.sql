-- The saga tables, once part of the queue's migrations (as its 0002_saga_tables). Written to be
-- idempotent so that a database migrated by that older layout adopts this baseline unchanged.
CREATE SCHEMA IF NOT EXISTS "skiplock";--> statement-breakpoint
DO $$ BEGIN CREATE TYPE "skiplock"."saga_status" AS ENUM('running', 'waiting', 'compensating', 'completed', 'compensated', 'cancelled', 'failed'); EXCEPTION WHEN duplicate_object THEN NULL; END $$;--> statement-breakpoint
DO $$ BEGIN CREATE TYPE "skiplock"."saga_step_kind" AS ENUM('step', 'compensation'); EXCEPTION WHEN duplicate_object THEN NULL; END $$;--> statement-breakpoint
DO $$ BEGIN CREATE TYPE "skiplock"."saga_step_status" AS ENUM('pending', 'running', 'waiting', 'completed', 'failed', 'cancelled'); EXCEPTION WHEN duplicate_object THEN NULL; END $$;--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "skiplock"."saga_signals" (
	"saga_id" text NOT NULL,
	"name" text NOT NULL,
	"payload" jsonb NOT NULL,
	"received_at" timestamp with time zone DEFAULT now() NOT NULL,
	"consumed_at" timestamp with time zone,
	CONSTRAINT "saga_signals_pk" PRIMARY KEY("saga_id","name")
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "skiplock"."saga_steps" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"saga_id" text NOT NULL,
	"step" text NOT NULL,
	"kind" "skiplock"."saga_step_kind" NOT NULL,
	"status" "skiplock"."saga_step_status" DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"job_id" bigint,
	"output" jsonb,
	"error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "saga_steps_saga_kind_step_unique" UNIQUE("saga_id","kind","step")
);
--> statement-breakpoint
CREATE TABLE IF NOT EXISTS "skiplock"."sagas" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"version" integer NOT NULL,
	"status" "skiplock"."saga_status" DEFAULT 'running' NOT NULL,
	"input" jsonb NOT NULL,
	"current_step" text,
	"current_kind" "skiplock"."saga_step_kind",
	"current_job_id" bigint,
	"pivoted" boolean DEFAULT false NOT NULL,
	"cancel_requested" boolean DEFAULT false NOT NULL,
	"deadline" timestamp with time zone,
	"error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"finished_at" timestamp with time zone,
	CONSTRAINT "sagas_version_check" CHECK (version >= 1)
);
--> statement-breakpoint
DO $$ BEGIN ALTER TABLE "skiplock"."saga_signals" ADD CONSTRAINT "saga_signals_saga_id_sagas_id_fk" FOREIGN KEY ("saga_id") REFERENCES "skiplock"."sagas"("id") ON DELETE cascade ON UPDATE no action; EXCEPTION WHEN duplicate_object THEN NULL; END $$;--> statement-breakpoint
DO $$ BEGIN ALTER TABLE "skiplock"."saga_steps" ADD CONSTRAINT "saga_steps_saga_id_sagas_id_fk" FOREIGN KEY ("saga_id") REFERENCES "skiplock"."sagas"("id") ON DELETE cascade ON UPDATE no action; EXCEPTION WHEN duplicate_object THEN NULL; END $$;--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "sagas_status_created_idx" ON "skiplock"."sagas" USING btree ("status","created_at","id");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "sagas_name_created_idx" ON "skiplock"."sagas" USING btree ("name","created_at","id");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "sagas_created_idx" ON "skiplock"."sagas" USING btree ("created_at","id");--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "sagas_live_job_idx" ON "skiplock"."sagas" USING btree ("current_job_id") WHERE status IN ('running', 'compensating');--> statement-breakpoint
CREATE INDEX IF NOT EXISTS "sagas_waiting_deadline_idx" ON "skiplock"."sagas" USING btree ("deadline") WHERE status = 'waiting' AND deadline IS NOT NULL;