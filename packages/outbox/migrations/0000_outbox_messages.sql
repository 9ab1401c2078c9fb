CREATE TYPE "skiplock"."outbox_status" AS ENUM('pending', 'delivered', 'dead');--> statement-breakpoint
CREATE TABLE "skiplock"."outbox_messages" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"topic" text NOT NULL,
	"key" text,
	"payload" jsonb NOT NULL,
	"headers" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"status" "skiplock"."outbox_status" DEFAULT 'pending' NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"run_after" timestamp with time zone DEFAULT now() NOT NULL,
	"lease_id" uuid,
	"lease_until" timestamp with time zone,
	"locked_by" text,
	"last_error" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"settled_at" timestamp with time zone,
	CONSTRAINT "outbox_messages_attempts_check" CHECK (attempts >= 0)
);
--> statement-breakpoint
CREATE INDEX "outbox_messages_pending_idx" ON "skiplock"."outbox_messages" USING btree ("run_after","id") WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX "outbox_messages_pending_key_idx" ON "skiplock"."outbox_messages" USING btree ("key","id") WHERE status = 'pending' AND key IS NOT NULL;--> statement-breakpoint
CREATE INDEX "outbox_messages_settled_idx" ON "skiplock"."outbox_messages" USING btree ("status","settled_at") WHERE status <> 'pending';--> statement-breakpoint
-- Room on each page for the claim's new row version (lease columns only, none indexed) to stay
-- a HOT update: no new index entries. Relaying 20,000 messages of 230-byte payloads written in
-- bulk: 1,368 WAL bytes per message at fillfactor 100 (no claim HOT), 866 at 70, 752 at 60, 525
-- at 50. The price: delivered rows kept for retention take twice the pages.
ALTER TABLE "skiplock"."outbox_messages" SET (fillfactor = 50);
