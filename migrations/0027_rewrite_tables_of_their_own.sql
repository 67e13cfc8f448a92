-- A partition staged to be published by rewrite keeps its staged rows, and its publish the rows it deleted, in
-- tables of the run's own without an index (src/core/recompute/storeTables.ts) when the hour is not small
-- (SWAP_MIN_ROWS), instead of the store's shared staged and saved tables, whose btree grows with every run.
-- Where they are is recorded when the partition is staged, so its publish and its rollback read the same tables
-- whatever the configuration is by then. False on partitions staged before this migration: the shared tables.
ALTER TABLE backfill.backfill_targets
  ADD COLUMN staged_apart boolean NOT NULL DEFAULT false;
