-- Publish by swap. When a pipeline's target is declaratively partitioned by its partition column with one
-- partition per hour, a backfill stages each hour into a table of its own in the pipeline's store
-- (bf_<pipeline>.p<YYYYMMDDHH>_b<backfill>_g<generation>), shaped and indexed like a partition; publishing
-- detaches the live partition, keeps it in the store as the saved prior generation
-- (bf_<pipeline>.p<YYYYMMDDHH>_b<backfill>_saved) and attaches the staged table under the live one's name.
-- Otherwise (a plain table, or partitions wider than an hour) the rows are rewritten as before.

-- The table this partition was staged into, when it will be published by swap; NULL: by rewrite. By oid: the
-- table keeps it through the renames of a swap (staged, then live under the prior partition's name, then saved
-- or swapped back out), and staged_relid::regclass names it wherever it is.
ALTER TABLE backfill.backfill_targets ADD COLUMN staged_relid oid;

-- For a partition published by swap: the detached prior partition (in the store) and the table attached in its
-- place (in the target's schema, under the prior partition's name). A rollback swaps them back.
ALTER TABLE backfill.preserved_partitions
  ADD COLUMN saved_table text,
  ADD COLUMN published_table text,
  ADD CONSTRAINT swap_tables_together CHECK ((saved_table IS NULL) = (published_table IS NULL));

