-- Staging's one join of a partition also keeps the row versions it read that are at or above its snapshot's xmin
-- (live_versions_seen: the ids of the transactions that wrote them, as bigint; at most a few hundred, else NULL).
-- The xmin is the whole server's oldest running transaction, so one long writer anywhere (another database's, a
-- held FOR UPDATE) made every row written after it began look recent, and each publish measured both sides again
-- though nothing had changed. A version staging saw was written by a transaction that had committed before it read
-- the partition, and such a transaction writes nothing more: a publish counts it as seen (src/db/rowStore.ts,
-- versionsSinceSnapshot). NULL where none was kept, as on partitions staged before this migration: only the xmin tells.
ALTER TABLE backfill.reconciliations ADD COLUMN live_versions_seen bigint[];
