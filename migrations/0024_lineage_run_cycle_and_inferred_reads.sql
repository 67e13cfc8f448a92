-- OpenLineage in as the specification has it (src/core/lineage/ingest.ts, docs/lineage.md): a run's events are
-- cumulative (its START may name what it reads, its COMPLETE carry `inputs: []`), and most producers say nothing
-- of which partitions a run read. So the inputs a run's earlier events name are kept until its COMPLETE, and an
-- operator confirming a job may declare which hours it reads; the reads that rule gives are marked as inferred.

-- A read the bot worked out from the job's read rule, not one the event named (by the bot's partitions facet,
-- the run's nominal time or the spec's subset facet). Every row from before this migration was named.
ALTER TABLE backfill.read_log ADD COLUMN inferred boolean NOT NULL DEFAULT false;

-- The job's read rule, declared when an operator confirms it (`reads <N>h-to-watermark`): a run of it that names
-- no hours read the N hours up to its pipeline's watermark at the event's time. NULL: no rule; such a run adds
-- nothing. 744 (a month) bounds the column; MAX_PARTITIONS bounds what a confirmation accepts.
ALTER TABLE backfill.lineage_jobs ADD COLUMN reads_hours_to_watermark integer CHECK (reads_hours_to_watermark BETWEEN 1 AND 744);

-- Where each watermark stood since when, so that "the watermark at the event's time" has an answer for an event
-- that arrives after the hourly run moved it. Written by the trigger below from every insert and update of
-- backfill.watermarks (valid_from is the row's updated_at, which the demo sets in its own time), seeded from the
-- watermarks as they are. A pipeline's history goes with it.
CREATE TABLE backfill.watermark_history (
  pipeline           text NOT NULL REFERENCES backfill.pipelines (name) ON DELETE CASCADE,
  valid_from         timestamptz NOT NULL,
  processed_through  timestamptz NOT NULL,
  PRIMARY KEY (pipeline, valid_from)
);
INSERT INTO backfill.watermark_history (pipeline, valid_from, processed_through)
SELECT pipeline, updated_at, processed_through FROM backfill.watermarks;

CREATE FUNCTION backfill.record_watermark_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO backfill.watermark_history (pipeline, valid_from, processed_through)
  VALUES (NEW.pipeline, NEW.updated_at, NEW.processed_through)
  ON CONFLICT (pipeline, valid_from) DO UPDATE SET processed_through = EXCLUDED.processed_through;
  RETURN NULL;
END
$$;
CREATE TRIGGER watermarks_history AFTER INSERT OR UPDATE ON backfill.watermarks
  FOR EACH ROW EXECUTE FUNCTION backfill.record_watermark_history();

-- A run that has not completed yet and whose events named a pipeline's table: its job (a later event of the same
-- run id but another job adds nothing to it) and its nominal time, if an event gave one. Its COMPLETE takes the
-- row and its inputs; a FAIL or an ABORT drops them; a run still open after a week is dropped when another is noted.
CREATE TABLE backfill.lineage_runs (
  run_id          uuid PRIMARY KEY,
  job_namespace   text NOT NULL,
  job_name        text NOT NULL,
  nominal_start   timestamptz,
  nominal_end     timestamptz,
  first_noted_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX lineage_runs_first_noted ON backfill.lineage_runs (first_noted_at);

-- The pipelines' tables the run's events named as inputs so far, with the hours each named, by the bot's
-- partitions facet (reported_hours) or the spec's subset facet (subset_hours); empty: the events said none.
CREATE TABLE backfill.lineage_run_inputs (
  run_id          uuid NOT NULL REFERENCES backfill.lineage_runs (run_id) ON DELETE CASCADE,
  pipeline        text NOT NULL REFERENCES backfill.pipelines (name) ON DELETE CASCADE,
  reported_hours  timestamptz[] NOT NULL DEFAULT '{}',
  subset_hours    timestamptz[] NOT NULL DEFAULT '{}',
  PRIMARY KEY (run_id, pipeline)
);

-- A read of a proposed job whose run said no hours: kept, like its other pending reads, until an operator
-- decides. A confirmation with a read rule turns each into the hours the rule gives at read_at (inferred read
-- log rows); one without a rule, or a rejection, drops them.
CREATE TABLE backfill.lineage_pending_reads_without_hours (
  proposal_id  bigint NOT NULL REFERENCES backfill.lineage_proposals (id),
  pipeline     text NOT NULL REFERENCES backfill.pipelines (name),
  read_at      timestamptz NOT NULL,
  PRIMARY KEY (proposal_id, pipeline, read_at)
);
