-- Staging's one join of a partition also keeps the xmin of the snapshot it read the live rows in
-- (live_snapshot_xmin: every transaction below it had finished when they were read). A publish by swap then tells
-- whether the live partition is still exactly the rows staging counted by one scan of it: no row version written by
-- a transaction at or above that xmin, and as many rows as staging counted (src/db/swap.ts, liveUnchangedSince),
-- instead of joining the live keys and row versions with the baseline under the target's lock. NULL on partitions
-- staged before this migration, whose publish compares with the baseline as it used to.
ALTER TABLE backfill.reconciliations ADD COLUMN live_snapshot_xmin xid8;
