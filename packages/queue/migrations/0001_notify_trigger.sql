-- Wake-ups: one NOTIFY per inserting statement and queue, none for jobs scheduled in the future.
-- A statement-level trigger sees every row of a bulk insert at once through its transition table,
-- so a bulk enqueue of 10,000 jobs costs one notification per queue, not 10,000. PostgreSQL also
-- folds identical notifications of one transaction into one.
CREATE FUNCTION "skiplock"."notify_jobs_inserted"() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  q text;
BEGIN
  FOR q IN SELECT DISTINCT queue FROM new_rows WHERE run_at <= now() LOOP
    PERFORM pg_notify('skiplock_jobs', q);
  END LOOP;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "jobs_notify_inserted"
AFTER INSERT ON "skiplock"."jobs"
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION "skiplock"."notify_jobs_inserted"();
