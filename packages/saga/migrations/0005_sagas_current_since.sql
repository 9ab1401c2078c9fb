-- When the saga reached its current step: a step's history row is now written when the step ends
-- (not also when it is reached), and takes its created_at from here. Set by the pointer's HOT
-- update (the column is in no index).
ALTER TABLE "skiplock"."sagas" ADD COLUMN "current_since" timestamp with time zone;
