-- A backfill runs what was announced, not whatever the catalog says later. When it is started, the catalog
-- fields it runs are frozen with it: its pipeline's step query, source shard query and shards expected, and
-- the re-trigger of every consumer it replays (src/core/catalog/frozen.ts). Kept as a hash of each field
-- (catalog_field_hashes: names what changed, without copying SQL or a re-trigger's URL into a second place)
-- and the hash of them all (catalog_hash). `catalog apply` refuses to change them while the backfill is in
-- flight; before a stage or publish writes, the engine compares the live catalog with them and pauses the
-- backfill on a difference. NULL: started before this migration, and not checked.
ALTER TABLE backfill.backfills ADD COLUMN catalog_hash text, ADD COLUMN catalog_field_hashes jsonb;
