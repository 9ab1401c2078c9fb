CREATE SCHEMA IF NOT EXISTS "billing";
--> statement-breakpoint
CREATE TYPE "billing"."invoice_status" AS ENUM('draft', 'open', 'paid', 'void');--> statement-breakpoint
CREATE TYPE "billing"."payment_status" AS ENUM('pending', 'confirmed', 'voided', 'refunded');--> statement-breakpoint
CREATE TYPE "billing"."provider_charge_status" AS ENUM('succeeded', 'pending', 'declined', 'voided', 'refunded');--> statement-breakpoint
CREATE TYPE "billing"."reservation_status" AS ENUM('held', 'captured', 'released');--> statement-breakpoint
CREATE TABLE "billing"."credit_reservations" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"invoice_id" text NOT NULL,
	"customer_id" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"status" "billing"."reservation_status" DEFAULT 'held' NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "credit_reservations_invoice_id_unique" UNIQUE("invoice_id"),
	CONSTRAINT "credit_reservations_amount_check" CHECK ("billing"."credit_reservations"."amount_cents" >= 0)
);
--> statement-breakpoint
CREATE TABLE "billing"."customers" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"opening_balance_cents" integer NOT NULL,
	"balance_cents" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "customers_balance_check" CHECK ("billing"."customers"."balance_cents" >= 0),
	CONSTRAINT "customers_opening_balance_check" CHECK ("billing"."customers"."opening_balance_cents" >= 0)
);
--> statement-breakpoint
CREATE TABLE "billing"."invoices" (
	"id" text PRIMARY KEY NOT NULL,
	"customer_id" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"status" "billing"."invoice_status" DEFAULT 'draft' NOT NULL,
	"number" text,
	"void_reason" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"settled_at" timestamp with time zone,
	CONSTRAINT "invoices_number_unique" UNIQUE("number"),
	CONSTRAINT "invoices_amount_check" CHECK ("billing"."invoices"."amount_cents" > 0)
);
--> statement-breakpoint
CREATE TABLE "billing"."ledger_entries" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"journal_id" text NOT NULL,
	"invoice_id" text NOT NULL,
	"account" text NOT NULL,
	"debit_cents" integer DEFAULT 0 NOT NULL,
	"credit_cents" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "ledger_entries_journal_account_unique" UNIQUE("journal_id","account"),
	CONSTRAINT "ledger_entries_one_side_check" CHECK ("billing"."ledger_entries"."debit_cents" >= 0 AND "billing"."ledger_entries"."credit_cents" >= 0 AND ("billing"."ledger_entries"."debit_cents" = 0) <> ("billing"."ledger_entries"."credit_cents" = 0))
);
--> statement-breakpoint
CREATE TABLE "billing"."payments" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"invoice_id" text NOT NULL,
	"customer_id" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"provider_key" text NOT NULL,
	"status" "billing"."payment_status" NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "payments_invoice_id_unique" UNIQUE("invoice_id"),
	CONSTRAINT "payments_provider_key_unique" UNIQUE("provider_key"),
	CONSTRAINT "payments_amount_check" CHECK ("billing"."payments"."amount_cents" > 0)
);
--> statement-breakpoint
CREATE TABLE "billing"."provider_charges" (
	"idempotency_key" text PRIMARY KEY NOT NULL,
	"invoice_id" text NOT NULL,
	"customer_id" text NOT NULL,
	"amount_cents" integer NOT NULL,
	"status" "billing"."provider_charge_status" NOT NULL,
	"decline_code" text,
	"calls" integer DEFAULT 1 NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "provider_charges_amount_check" CHECK ("billing"."provider_charges"."amount_cents" > 0)
);
--> statement-breakpoint
CREATE TABLE "billing"."receipts" (
	"invoice_id" text PRIMARY KEY NOT NULL,
	"number" text NOT NULL,
	"issued_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "receipts_number_unique" UNIQUE("number")
);
--> statement-breakpoint
ALTER TABLE "billing"."credit_reservations" ADD CONSTRAINT "credit_reservations_invoice_id_invoices_id_fk" FOREIGN KEY ("invoice_id") REFERENCES "billing"."invoices"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "billing"."credit_reservations" ADD CONSTRAINT "credit_reservations_customer_id_customers_id_fk" FOREIGN KEY ("customer_id") REFERENCES "billing"."customers"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "billing"."invoices" ADD CONSTRAINT "invoices_customer_id_customers_id_fk" FOREIGN KEY ("customer_id") REFERENCES "billing"."customers"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "billing"."ledger_entries" ADD CONSTRAINT "ledger_entries_invoice_id_invoices_id_fk" FOREIGN KEY ("invoice_id") REFERENCES "billing"."invoices"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "billing"."payments" ADD CONSTRAINT "payments_invoice_id_invoices_id_fk" FOREIGN KEY ("invoice_id") REFERENCES "billing"."invoices"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "billing"."payments" ADD CONSTRAINT "payments_customer_id_customers_id_fk" FOREIGN KEY ("customer_id") REFERENCES "billing"."customers"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "billing"."receipts" ADD CONSTRAINT "receipts_invoice_id_invoices_id_fk" FOREIGN KEY ("invoice_id") REFERENCES "billing"."invoices"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "invoices_status_idx" ON "billing"."invoices" USING btree ("status");--> statement-breakpoint
CREATE INDEX "ledger_entries_invoice_idx" ON "billing"."ledger_entries" USING btree ("invoice_id");--> statement-breakpoint
CREATE INDEX "provider_charges_invoice_idx" ON "billing"."provider_charges" USING btree ("invoice_id");