-- Wake-ups only for jobs someone must claim: a job a worker inserts already leased to itself (a
-- saga step handed off to the worker that finished the step before it) needs no NOTIFY, and one
-- would only wake every idle worker into an empty claim.
CREATE OR REPLACE FUNCTION "skiplock"."notify_jobs_inserted"() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  q text;
BEGIN
  FOR q IN SELECT DISTINCT queue FROM new_rows WHERE run_at <= now() AND status = 'pending' LOOP
    PERFORM pg_notify('skiplock_jobs', q);
  END LOOP;
  RETURN NULL;
END;
$$;
