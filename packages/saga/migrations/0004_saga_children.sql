ALTER TABLE "skiplock"."sagas" ADD COLUMN "parent_id" text;--> statement-breakpoint
ALTER TABLE "skiplock"."sagas" ADD COLUMN "parent_step" text;--> statement-breakpoint
CREATE INDEX "sagas_parent_idx" ON "skiplock"."sagas" USING btree ("parent_id") WHERE parent_id IS NOT NULL;