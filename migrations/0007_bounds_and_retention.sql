-- Sized backfills and retention of their stored rows.

-- What the plan said a backfill would stage and keep (src/core/identify/sizing.ts), recorded when it starts: the rows it
-- writes (the preview's count) and replaces (the live rows of its partitions), and the bytes of the pipeline's
-- store they take: staging (staged rows, baseline and expected keys, with their indexes), kept until retention
-- drops them, and the saved prior rows a rollback restores.
ALTER TABLE backfill.backfills
  ADD COLUMN planned_rows bigint,
  ADD COLUMN planned_replaced_rows bigint,
  ADD COLUMN planned_stage_bytes bigint,
  ADD COLUMN planned_keep_bytes bigint;

-- Rows of a backfill dropped from its pipeline's store (bf_<pipeline>), once per kind: 'scratch' is the baseline
-- and expected keys (needed only until its last publish), 'undo' the staged and saved rows a rollback reads.
-- A row here is why those rows are gone, and keeps the retention job from looking at the backfill again.
CREATE TABLE backfill.row_retention (
  backfill_id    bigint NOT NULL REFERENCES backfill.backfills (id),
  rows_kind      text NOT NULL CHECK (rows_kind IN ('scratch', 'undo')),
  pruned_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  pruned_by      text NOT NULL,
  rows_dropped   bigint NOT NULL,
  bytes_dropped  bigint NOT NULL,
  rule           text NOT NULL,
  PRIMARY KEY (backfill_id, rows_kind)
);
