-- Staged, saved, baseline and expected rows move out of jsonb into tables shaped like each pipeline's target,
-- in a schema of the bot's own per pipeline (bf_<pipeline>, created by the first backfill of that pipeline:
-- src/core/rowStore.ts). Rows are compared on typed key columns by set-based joins and never leave PostgreSQL.
-- The jsonb tables and their key function go; what they held belonged to backfills run before this version.

DROP TABLE backfill.staged_rows;
DROP TABLE backfill.stage_baselines;
DROP TABLE backfill.preserved_rows;
DROP TABLE backfill.expected_rows;
DROP FUNCTION backfill.row_key(jsonb, text[]);
