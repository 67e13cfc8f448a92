-- The step engine: steps get states of their own and fenced claims, announcements that cannot be delivered
-- become facts, acceptance is per partition, every publish over a partition is a generation with lineage,
-- a backfill that published anything holds its hours, and each message a step sends is an intent first.

-- Step states (spelled out in src/core/engine/stepGraph.ts): blocked is what a pause does to a step that was running
-- (a continue makes it pending again); skipped is what a stop, a cancel or a rollback does (for good);
-- undeliverable is a message Slack will never take (user_not_found, …): final, and not a failure.
ALTER TABLE backfill.backfill_steps DROP CONSTRAINT backfill_steps_status_check;
ALTER TABLE backfill.backfill_steps ADD CONSTRAINT backfill_steps_status_check
  CHECK (status IN ('pending', 'running', 'blocked', 'done', 'undeliverable', 'failed', 'skipped'));

-- A claim: the token a worker wrote by compare-and-set, and until when it holds (renewed while the step runs).
-- A step whose lease ran out belonged to a worker that died: another may take it over with a new token, and
-- the old worker's commit then fails its claim check.
ALTER TABLE backfill.backfill_steps
  ADD COLUMN claim_token uuid,
  ADD COLUMN lease_expires_at timestamptz,
  ADD CONSTRAINT backfill_steps_running_claimed CHECK (status <> 'running' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL));

-- An owner Slack cannot reach: the reason, and when it was found. Counts as a missing acknowledgement.
ALTER TABLE backfill.backfill_consumers
  ADD COLUMN undeliverable text,
  ADD COLUMN undeliverable_at timestamptz;

-- Why a staged partition is outside its envelope (set by the publish that found it, cleared when accepted),
-- and the generation its publish created.
ALTER TABLE backfill.backfill_targets
  ADD COLUMN breach text,
  ADD COLUMN published_generation integer;

-- Lineage: every publish over a partition is the next generation of that partition, kept with the backfill that
-- wrote it. Generation 0 is what the normal run built. The current generation is the highest not rolled back;
-- a rollback restores the one before its own and is refused while a later one stands.
CREATE TABLE backfill.partition_generations (
  pipeline        text NOT NULL REFERENCES backfill.pipelines (name),
  partition_hour  timestamptz NOT NULL,
  generation      integer NOT NULL CHECK (generation > 0),
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  published_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  rolled_back_at  timestamptz,
  PRIMARY KEY (pipeline, partition_hour, generation),
  UNIQUE (backfill_id, partition_hour)
);

-- Set by the first publish: from then on the backfill holds its hours until it finishes or is rolled back.
ALTER TABLE backfill.backfills ADD COLUMN published_any boolean NOT NULL DEFAULT false;

ALTER TABLE backfill.backfills DROP CONSTRAINT backfills_no_overlap;
ALTER TABLE backfill.backfills ADD CONSTRAINT backfills_no_overlap EXCLUDE USING gist (
  pipeline WITH =, tstzrange(first_hour, last_hour, '[]') WITH &&
) WHERE (state IN ('announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing', 'rolling_back')
         OR (published_any AND state IN ('stopped', 'failed')));

-- Prior rows are saved once: a second save of the same partition by the same backfill is refused.
CREATE TABLE backfill.preserved_partitions (
  backfill_id     bigint NOT NULL REFERENCES backfill.backfills (id),
  partition_hour  timestamptz NOT NULL,
  rows_saved      bigint NOT NULL,
  saved_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (backfill_id, partition_hour)
);

-- Exactly one message per intent: the row is written before the message is sent; ts is filled in once Slack
-- answers (or once the message is found in the conversation's history after a crash in between).
CREATE TABLE backfill.message_intents (
  intent        text PRIMARY KEY,
  backfill_id   bigint REFERENCES backfill.backfills (id),
  channel       text NOT NULL,
  ts            text,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  delivered_at  timestamptz,
  -- true when the ts came from the conversation's history rather than from Slack's answer
  recovered     boolean NOT NULL DEFAULT false
);
