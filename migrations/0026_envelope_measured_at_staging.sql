-- The envelope (the staged rows against the rows the plan previewed) is measured where the staged rows are made,
-- in the same statement as the staged reconciliation (src/db/reconcile.ts measureStaged), and kept with it: the
-- staged rows do not change until their publish, nor do the plan's, so the publish reads these figures instead
-- of joining both sets again. NULL on the published phase, and on partitions staged before this migration,
-- whose publish measures the envelope itself as it used to.
ALTER TABLE backfill.reconciliations
  ADD COLUMN plan_lost          integer,
  ADD COLUMN plan_added         integer,
  ADD COLUMN plan_rows          integer,
  ADD COLUMN plan_total         numeric(18, 2),
  ADD COLUMN staged_known_total numeric(18, 2),
  ADD COLUMN staged_rows        integer,
  ADD COLUMN staged_total       numeric(18, 2);
