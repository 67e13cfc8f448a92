-- A partition staged for a publish by swap keeps, with its staged reconciliation, what its publish would
-- otherwise measure again while writers of the target wait: the live rows it was compared with (live_rows)
-- and the checksum of the rows staged (staged_checksum). Its publish reads these figures when nothing live
-- changed since it was staged (src/core/recompute/swap.ts, measureSwap), and measures again when anything
-- did. NULL on the published phase, on a partition staged to be rewritten, and on partitions staged before
-- this migration, whose publish measures as it used to.
ALTER TABLE backfill.reconciliations
  ADD COLUMN live_rows       bigint,
  ADD COLUMN staged_checksum text;
