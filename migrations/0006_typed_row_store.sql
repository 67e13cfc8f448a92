-- Staged, saved, baseline and expected rows move out of jsonb into tables shaped like each pipeline's target,
-- in a schema of the bot's own per pipeline (bf_<pipeline>, created by the first backfill of that pipeline:
-- src/core/recompute/rowStore.ts). Rows are compared on typed key columns by set-based joins and never leave PostgreSQL.
-- The jsonb tables and their key function go; what they held belonged to backfills run before this version.

DROP TABLE backfill.staged_rows;
DROP TABLE backfill.stage_baselines;
DROP TABLE backfill.preserved_rows;
DROP TABLE backfill.expected_rows;
DROP FUNCTION backfill.row_key(jsonb, text[]);

-- A pipeline may declare a cheaper query that says what its step would produce for an hour ($1), as one row
-- (rows bigint, total numeric): plan and start then use it instead of running the step's query, and the
-- envelope a partition is checked against is its row count and total rather than its keys.
ALTER TABLE backfill.pipelines ADD COLUMN estimate_sql text;
ALTER TABLE backfill.backfills ADD COLUMN previewed_by text NOT NULL DEFAULT 'step' CHECK (previewed_by IN ('step', 'estimate'));
