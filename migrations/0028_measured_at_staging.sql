-- A partition keeps, with its staged reconciliation, what its publish would otherwise measure again: the live
-- rows staging compared the staged ones with (live_rows; staging kept their keys with row versions in its
-- baseline) and, for a publish by swap, the checksum of the rows staged (staged_checksum). Its publish reads
-- these figures when nothing live changed since it was staged (src/core/recompute/swap.ts, measureSwap; and the
-- rewrite's saveAndDeleteComparing in src/db/rewrite.ts), and measures again when anything did. NULL on the published
-- phase, where staging's join could not be exact, and on partitions staged before this migration, whose publish
-- measures as it used to.
ALTER TABLE backfill.reconciliations
  ADD COLUMN live_rows       bigint,
  ADD COLUMN staged_checksum text;
