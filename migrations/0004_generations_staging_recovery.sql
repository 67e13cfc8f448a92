-- Recovery from a backfill that itself goes wrong: every run writes under a generation that can be fenced,
-- each partition is staged and reconciled by key before it is published, the prior rows are preserved so the
-- backfill can be rolled back, and what was previewed is frozen as a plan with a hash.

ALTER TABLE backfill.backfills
  ADD COLUMN generation integer NOT NULL DEFAULT 1,
  -- Writes of a generation at or below this are refused inside the write transaction itself.
  ADD COLUMN fenced_generation integer NOT NULL DEFAULT 0,
  ADD COLUMN stopped_by text,
  ADD COLUMN stop_reason text,
  ADD COLUMN paused_reason text,
  ADD COLUMN plan_id bigint,
  ADD COLUMN rolled_back_by text,
  ADD COLUMN rolled_back_at timestamptz;

ALTER TABLE backfill.backfills DROP CONSTRAINT backfills_state_check;
ALTER TABLE backfill.backfills ADD CONSTRAINT backfills_state_check
  CHECK (state IN ('announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing', 'done', 'failed',
                   'cancelled', 'stopped', 'rolling_back', 'rolled_back'));

-- A paused or rolling-back backfill still owns its hours.
ALTER TABLE backfill.backfills DROP CONSTRAINT backfills_no_overlap;
ALTER TABLE backfill.backfills ADD CONSTRAINT backfills_no_overlap EXCLUDE USING gist (
  pipeline WITH =, tstzrange(first_hour, last_hour, '[]') WITH &&
) WHERE (state IN ('announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing', 'rolling_back'));

ALTER TABLE backfill.backfill_steps DROP CONSTRAINT backfill_steps_kind_check;
ALTER TABLE backfill.backfill_steps ADD CONSTRAINT backfill_steps_kind_check
  CHECK (kind IN ('announce', 'recompute', 'stage', 'publish', 'watermark', 'replay', 'compare', 'notify', 'report'));

ALTER TABLE backfill.backfill_targets
  -- What the plan's preview (the real step, rolled back) said the partition would hold: the announced envelope.
  ADD COLUMN expected_rows bigint,
  ADD COLUMN expected_total numeric(18, 2),
  -- 0 is the canary; then waves of the configured size, each reconciled before the next.
  ADD COLUMN wave integer NOT NULL DEFAULT 0,
  ADD COLUMN status text NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'staged', 'published', 'unavailable', 'restored')),
  ADD COLUMN published_checksum text,
  ADD COLUMN accepted_by text,
  ADD COLUMN accepted_reason text;

-- Rows are kept as jsonb so any pipeline's table can be staged and preserved without DDL.
CREATE TABLE backfill.staged_rows (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  generation      integer NOT NULL,
  partition_hour  timestamptz NOT NULL,
  row_key         jsonb NOT NULL,
  row_data        jsonb NOT NULL
);
CREATE INDEX staged_rows_partition ON backfill.staged_rows (backfill_id, generation, partition_hour);

-- The live keys when the partition was staged: a live row whose key is not here arrived later (a late row).
CREATE TABLE backfill.stage_baselines (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  generation      integer NOT NULL,
  partition_hour  timestamptz NOT NULL,
  row_key         jsonb NOT NULL
);
CREATE INDEX stage_baselines_partition ON backfill.stage_baselines (backfill_id, generation, partition_hour);

-- The rows a publish replaced, by backfill and generation: what a rollback restores.
CREATE TABLE backfill.preserved_rows (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  generation      integer NOT NULL,
  partition_hour  timestamptz NOT NULL,
  row_data        jsonb NOT NULL
);
CREATE INDEX preserved_rows_partition ON backfill.preserved_rows (backfill_id, generation, partition_hour);

CREATE TABLE backfill.reconciliations (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  generation      integer NOT NULL,
  partition_hour  timestamptz NOT NULL,
  -- staged: live against staged; published: preserved against published.
  phase           text NOT NULL CHECK (phase IN ('staged', 'published')),
  keys_missing    integer NOT NULL,
  keys_added      integer NOT NULL,
  keys_duplicated integer NOT NULL,
  keys_changed    integer NOT NULL,
  late_rows       integer NOT NULL DEFAULT 0,
  total_before    numeric(18, 2) NOT NULL,
  total_after     numeric(18, 2) NOT NULL,
  at              timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (backfill_id, generation, partition_hour, phase)
);

-- What `plan` previewed, frozen: `start` from a plan refuses when the hash of its inputs has changed.
CREATE TABLE backfill.plans (
  id          bigserial PRIMARY KEY,
  pipeline    text NOT NULL REFERENCES backfill.pipelines (name),
  target      text NOT NULL,
  inputs_hash text NOT NULL,
  inputs      jsonb NOT NULL,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

-- A second operator's approval, when a backfill is larger than the capacity limit.
CREATE TABLE backfill.capacity_approvals (
  backfill_id  bigint PRIMARY KEY REFERENCES backfill.backfills (id),
  operator     text NOT NULL,
  at           timestamptz NOT NULL DEFAULT now()
);

-- Set at start when the backfill is larger than the capacity limit then in force.
ALTER TABLE backfill.backfills ADD COLUMN needs_second_approval boolean NOT NULL DEFAULT false;

-- The key of a row kept as jsonb: the values of the pipeline's stable key columns, in order.
CREATE FUNCTION backfill.row_key(row_data jsonb, key_columns text[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT jsonb_agg(row_data -> k ORDER BY o) FROM unnest(key_columns) WITH ORDINALITY AS u(k, o)
$$;

-- The rows the plan's preview produced, by key: the announced envelope. A staged partition may add rows
-- that landed in the source since (normal ingestion), but may not lose or change what the plan showed.
CREATE TABLE backfill.expected_rows (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  partition_hour  timestamptz NOT NULL,
  row_key         jsonb NOT NULL,
  measure         numeric(18, 2) NOT NULL
);
CREATE INDEX expected_rows_partition ON backfill.expected_rows (backfill_id, partition_hour);
