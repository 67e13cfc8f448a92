-- Control tables of backfill-bot. The warehouse tables a pipeline writes live elsewhere
-- (for the Harborlight demo, in schema "warehouse"); these tables only describe and steer them.
-- NOTE: append-only. A change to anything here is a new numbered file.

CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE SCHEMA IF NOT EXISTS backfill;

-- A pipeline writes one hourly-partitioned table with one step SQL. step_sql is an
-- INSERT … SELECT for exactly one partition: $1 is the partition hour (timestamptz).
-- The engine deletes the hour itself; the step never deletes and is never run without the delete.
CREATE TABLE backfill.pipelines (
  name               text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
  target_table       text NOT NULL,
  partition_column   text NOT NULL DEFAULT 'partition_hour',
  key_columns        text[] NOT NULL CHECK (cardinality(key_columns) > 0),
  measure_column     text NOT NULL,
  step_sql           text NOT NULL,
  -- How many distinct shards of the hour the source holds now: $1 is the partition hour.
  source_shards_sql  text NOT NULL,
  shards_expected    integer NOT NULL DEFAULT 1 CHECK (shards_expected > 0),
  created_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE backfill.watermarks (
  pipeline           text PRIMARY KEY REFERENCES backfill.pipelines (name),
  processed_through  timestamptz NOT NULL,
  updated_at         timestamptz NOT NULL DEFAULT now(),
  updated_by         text NOT NULL
);

-- What landed for each partition, and whether the month's record calls it reconciled.
-- shards_landed and row_count describe what the table holds after the last step run.
CREATE TABLE backfill.partition_log (
  pipeline         text NOT NULL REFERENCES backfill.pipelines (name),
  partition_hour   timestamptz NOT NULL CHECK (date_trunc('hour', partition_hour) = partition_hour),
  landed_at        timestamptz,
  on_time          boolean NOT NULL DEFAULT true,
  shards_expected  integer NOT NULL,
  shards_landed    integer NOT NULL DEFAULT 0,
  row_count        bigint NOT NULL DEFAULT 0,
  reconciled       boolean NOT NULL DEFAULT true,
  -- Why a partition is flagged: late_load, upstream_outage, corrupt_batch, flapping_connector, partial_load.
  flag_reason      text CHECK (flag_reason IN ('late_load', 'upstream_outage', 'corrupt_batch', 'flapping_connector', 'partial_load')),
  backfilled_at    timestamptz,
  PRIMARY KEY (pipeline, partition_hour),
  CHECK (shards_landed BETWEEN 0 AND shards_expected)
);
CREATE INDEX partition_log_unreconciled ON backfill.partition_log (pipeline, partition_hour) WHERE NOT reconciled;

-- Who reads a pipeline's output downstream. retrigger is {"kind":"sql","statements":[…]} ($1 = timestamptz[] of
-- the corrected partitions) or {"kind":"webhook","url":"…"}; report_total_sql ($1 = period date) reads what a
-- report currently shows, so the compare step checks the report itself and not only the table under it.
CREATE TABLE backfill.consumers (
  name              text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
  kind              text NOT NULL CHECK (kind IN ('report', 'export', 'model')),
  owner             text NOT NULL,
  notify_rule       text NOT NULL CHECK (notify_rule IN ('before', 'after')),
  explicit_rank     integer CHECK (explicit_rank > 0),
  dependency_rank   integer NOT NULL DEFAULT 1,
  retrigger         jsonb NOT NULL,
  report_total_sql  text,
  CHECK (report_total_sql IS NULL OR kind = 'report')
);

CREATE TABLE backfill.consumer_dependencies (
  consumer    text NOT NULL REFERENCES backfill.consumers (name) ON DELETE CASCADE,
  depends_on  text NOT NULL REFERENCES backfill.consumers (name) ON DELETE CASCADE,
  PRIMARY KEY (consumer, depends_on),
  CHECK (consumer <> depends_on)
);

-- dependency_rank = max(explicit_rank, 1 + rank of everything depended on). A cycle has no rank: refuse it.
CREATE FUNCTION backfill.refresh_consumer_ranks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  unranked integer;
  cycle_members text;
BEGIN
  CREATE TEMP TABLE IF NOT EXISTS pg_temp.consumer_rank_work (name text PRIMARY KEY, rank integer) ON COMMIT DROP;
  TRUNCATE pg_temp.consumer_rank_work;
  LOOP
    INSERT INTO pg_temp.consumer_rank_work (name, rank)
    SELECT c.name,
           greatest(coalesce(c.explicit_rank, 1),
                    1 + coalesce((SELECT max(w.rank) FROM backfill.consumer_dependencies d
                                  JOIN pg_temp.consumer_rank_work w ON w.name = d.depends_on
                                  WHERE d.consumer = c.name), 0))
    FROM backfill.consumers c
    WHERE NOT EXISTS (SELECT 1 FROM pg_temp.consumer_rank_work w WHERE w.name = c.name)
      AND NOT EXISTS (SELECT 1 FROM backfill.consumer_dependencies d
                      WHERE d.consumer = c.name
                        AND NOT EXISTS (SELECT 1 FROM pg_temp.consumer_rank_work w WHERE w.name = d.depends_on));
    EXIT WHEN NOT FOUND;
  END LOOP;
  SELECT count(*), string_agg(name, ', ' ORDER BY name) INTO unranked, cycle_members
  FROM backfill.consumers c WHERE NOT EXISTS (SELECT 1 FROM pg_temp.consumer_rank_work w WHERE w.name = c.name);
  IF unranked > 0 THEN
    RAISE EXCEPTION 'consumer dependencies form a cycle through: %', cycle_members
      USING ERRCODE = 'check_violation', HINT = 'remove one of the depends_on links so every chain ends';
  END IF;
  UPDATE backfill.consumers c SET dependency_rank = w.rank
  FROM pg_temp.consumer_rank_work w WHERE w.name = c.name AND c.dependency_rank IS DISTINCT FROM w.rank;
  RETURN NULL;
END $$;

CREATE TRIGGER consumer_dependencies_rank AFTER INSERT OR UPDATE OR DELETE ON backfill.consumer_dependencies
  FOR EACH STATEMENT EXECUTE FUNCTION backfill.refresh_consumer_ranks();
CREATE TRIGGER consumers_rank AFTER INSERT OR UPDATE OF explicit_rank ON backfill.consumers
  FOR EACH STATEMENT EXECUTE FUNCTION backfill.refresh_consumer_ranks();

CREATE TABLE backfill.read_log (
  consumer        text NOT NULL REFERENCES backfill.consumers (name),
  pipeline        text NOT NULL REFERENCES backfill.pipelines (name),
  partition_hour  timestamptz NOT NULL,
  read_at         timestamptz NOT NULL,
  PRIMARY KEY (consumer, pipeline, partition_hour, read_at)
);
CREATE INDEX read_log_partition ON backfill.read_log (pipeline, partition_hour);

-- Signing is a history: a second signature of the same report and period is a new row.
CREATE TABLE backfill.signoffs (
  id         bigserial PRIMARY KEY,
  report     text NOT NULL REFERENCES backfill.consumers (name),
  period     date NOT NULL,
  total      numeric(18, 2) NOT NULL,
  signed_by  text NOT NULL,
  signed_at  timestamptz NOT NULL
);
CREATE INDEX signoffs_report_period ON backfill.signoffs (report, period, signed_at);

-- The backfill log. States and their transitions are spelled out in src/core/engine/stateMachine.ts.
CREATE TABLE backfill.backfills (
  id               bigserial PRIMARY KEY,
  pipeline         text NOT NULL REFERENCES backfill.pipelines (name),
  reason           text NOT NULL CHECK (length(btrim(reason)) > 0),
  requested_by     text NOT NULL,
  first_hour       timestamptz NOT NULL,
  last_hour        timestamptz NOT NULL,
  partition_count  integer NOT NULL CHECK (partition_count > 0),
  watermark_before timestamptz,
  watermark_reset_to timestamptz NOT NULL,
  -- Totals are over the whole periods (UTC days) the target partitions fall in: what a daily report shows.
  total_before     numeric(18, 2) NOT NULL,
  total_after      numeric(18, 2),
  diff             numeric(18, 2),
  announced_at     timestamptz NOT NULL,
  ran_at           timestamptz,
  ran_by           text,
  finished_at      timestamptz,
  state            text NOT NULL CHECK (state IN ('announced', 'held', 'approved', 'running', 'replaying',
                                                  'comparing', 'done', 'failed', 'cancelled')),
  failure          text,
  limit_override   text,
  CHECK (first_hour <= last_hour),
  -- Two live backfills of one pipeline may not touch the same hour: the database refuses, not the app.
  CONSTRAINT backfills_no_overlap EXCLUDE USING gist (
    pipeline WITH =, tstzrange(first_hour, last_hour, '[]') WITH &&
  ) WHERE (state IN ('announced', 'held', 'approved', 'running', 'replaying', 'comparing'))
);

-- The partitions a backfill targets: every later step reads this list, never recomputes it.
CREATE TABLE backfill.backfill_targets (
  backfill_id      bigint NOT NULL REFERENCES backfill.backfills (id),
  partition_hour   timestamptz NOT NULL,
  rows_before      bigint NOT NULL,
  total_before     numeric(18, 2) NOT NULL,
  checksum_before  text NOT NULL,
  rows_after       bigint,
  total_after      numeric(18, 2),
  checksum_after   text,
  recomputed_at    timestamptz,
  PRIMARY KEY (backfill_id, partition_hour)
);

-- Who read the targets when the backfill was announced: the rows the announcements were generated from.
CREATE TABLE backfill.backfill_consumers (
  backfill_id      bigint NOT NULL REFERENCES backfill.backfills (id),
  consumer         text NOT NULL REFERENCES backfill.consumers (name),
  owner            text NOT NULL,
  notify_rule      text NOT NULL CHECK (notify_rule IN ('before', 'after')),
  dependency_rank  integer NOT NULL,
  depends_on       text[] NOT NULL DEFAULT '{}',
  read_directly    boolean NOT NULL,
  partitions_read  integer NOT NULL,
  announcement     text NOT NULL,
  PRIMARY KEY (backfill_id, consumer)
);

-- The signed figures a backfill touches, and what the rebuilt report showed afterwards.
CREATE TABLE backfill.backfill_signoffs (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  signoff_id      bigint NOT NULL REFERENCES backfill.signoffs (id),
  report          text NOT NULL,
  period          date NOT NULL,
  signed_total    numeric(18, 2) NOT NULL,
  total_before    numeric(18, 2) NOT NULL,
  report_after    numeric(18, 2),
  diff            numeric(18, 2),
  PRIMARY KEY (backfill_id, signoff_id)
);

CREATE TABLE backfill.acknowledgements (
  backfill_id  bigint NOT NULL REFERENCES backfill.backfills (id),
  consumer     text NOT NULL REFERENCES backfill.consumers (name),
  owner        text NOT NULL,
  acked_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (backfill_id, consumer)
);

CREATE TABLE backfill.gate_overrides (
  backfill_id  bigint NOT NULL REFERENCES backfill.backfills (id),
  consumer     text NOT NULL REFERENCES backfill.consumers (name),
  operator     text NOT NULL,
  reason       text NOT NULL CHECK (length(btrim(reason)) > 0),
  at           timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (backfill_id, consumer)
);

-- Units of work. A step is done when its row says so, written in the same transaction as its effect.
CREATE TABLE backfill.backfill_steps (
  backfill_id  bigint NOT NULL REFERENCES backfill.backfills (id),
  kind         text NOT NULL CHECK (kind IN ('recompute', 'watermark', 'replay', 'compare', 'notify')),
  step_key     text NOT NULL,
  status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'failed', 'skipped')),
  attempts     integer NOT NULL DEFAULT 0,
  started_at   timestamptz,
  finished_at  timestamptz,
  result       jsonb,
  error        text,
  PRIMARY KEY (backfill_id, kind, step_key)
);

-- The timeline: every step, every decision and every refusal. backfill_id is null for a refusal that
-- never became a backfill (an unknown pipeline, an overlapping request, a dry run).
CREATE TABLE backfill.events (
  id           bigserial PRIMARY KEY,
  backfill_id  bigint REFERENCES backfill.backfills (id),
  at           timestamptz NOT NULL DEFAULT clock_timestamp(),
  actor        text NOT NULL,
  kind         text NOT NULL,
  detail       jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_backfill ON backfill.events (backfill_id, id);
