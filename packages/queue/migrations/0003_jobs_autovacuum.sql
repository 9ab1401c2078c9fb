-- The jobs table is a queue: every job leaves several dead row versions behind (pending ->
-- processing -> completed, then the retention delete) while the live row count stays small. With
-- PostgreSQL's defaults (vacuum once 20% of the table is dead, cost limit 200) autovacuum falls
-- behind under steady churn and the claim index fills with dead entries that every claim must
-- step over. Vacuum early and let it work faster on this one table.
ALTER TABLE "skiplock"."jobs" SET (
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_insert_scale_factor = 0.02,
  autovacuum_analyze_scale_factor = 0.02,
  autovacuum_vacuum_cost_limit = 1000
);
