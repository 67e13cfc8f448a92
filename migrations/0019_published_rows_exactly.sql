-- What a publish wrote, exactly: published_checksum was taken over the whole live partition after the
-- publish's writes, so on the rewrite path a row another writer committed in between (a late row, new key)
-- counted as written by the publish, and every rollback under live ingestion was refused. From now on both
-- figures come from the statements that wrote the rows (INSERT … RETURNING on the rewrite path; the staged
-- table, which writers cannot reach, on the swap path): published_rows rows with published_checksum over them
-- in key order (src/db/partitions.ts, rowsChecksum). A rollback compares the live rows with those keys against
-- them. NULL published_rows: published before this migration, when the two were the partition's.
ALTER TABLE backfill.backfill_targets ADD COLUMN published_rows bigint;
