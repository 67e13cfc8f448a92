-- Lineage in and out (src/core/lineage). OpenLineage run events from the team's schedulers become read log rows,
-- but only through an explicit mapping from a job to a consumer that an operator confirmed: the read log decides
-- who is told before a backfill, so an event can never make someone an owner by itself.

-- Which consumer an OpenLineage job (namespace + name) is. Written only when an operator confirms a proposal.
CREATE TABLE backfill.lineage_jobs (
  job_namespace  text NOT NULL CHECK (length(job_namespace) BETWEEN 1 AND 200),
  job_name       text NOT NULL CHECK (length(job_name) BETWEEN 1 AND 500),
  consumer       text NOT NULL REFERENCES backfill.consumers (name),
  confirmed_by   text NOT NULL,
  confirmed_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_namespace, job_name)
);

-- A job that read a pipeline's table and maps to no consumer: one proposal per job, ever. A rejected job stays
-- rejected (its later events are kept as seen and add nothing), so operators are not asked again and again.
CREATE TABLE backfill.lineage_proposals (
  id              bigserial PRIMARY KEY,
  job_namespace   text NOT NULL,
  job_name        text NOT NULL,
  -- The consumer name a confirmation creates unless the operator gives another.
  suggested_name  text NOT NULL CHECK (suggested_name ~ '^[a-z][a-z0-9_]{0,62}$'),
  state           text NOT NULL DEFAULT 'proposed' CHECK (state IN ('proposed', 'confirmed', 'rejected')),
  proposed_at     timestamptz NOT NULL DEFAULT now(),
  consumer        text REFERENCES backfill.consumers (name),
  decided_by      text,
  decided_at      timestamptz,
  decision_note   text,
  UNIQUE (job_namespace, job_name),
  CHECK ((state = 'proposed') = (decided_by IS NULL)),
  CHECK ((state = 'confirmed') = (consumer IS NOT NULL))
);

-- The reads of a proposed job, kept here until an operator decides: a confirmation moves them into
-- backfill.read_log (so nothing the job read before it was known is lost), a rejection drops them.
CREATE TABLE backfill.lineage_pending_reads (
  proposal_id     bigint NOT NULL REFERENCES backfill.lineage_proposals (id),
  pipeline        text NOT NULL REFERENCES backfill.pipelines (name),
  partition_hour  timestamptz NOT NULL CHECK (date_trunc('hour', partition_hour) = partition_hour),
  read_at         timestamptz NOT NULL,
  PRIMARY KEY (proposal_id, pipeline, partition_hour, read_at)
);

-- Every run event that was acted on, once: the key makes a duplicate (a retried POST, two at once) add nothing,
-- since its insert and the read rows commit in one transaction.
CREATE TABLE backfill.lineage_events (
  run_id         uuid NOT NULL,
  event_type     text NOT NULL CHECK (event_type IN ('START', 'RUNNING', 'COMPLETE', 'ABORT', 'FAIL', 'OTHER')),
  job_namespace  text NOT NULL,
  job_name       text NOT NULL,
  event_time     timestamptz NOT NULL,
  received_at    timestamptz NOT NULL DEFAULT now(),
  -- What became of it: read rows written, kept pending on a proposal, or ignored (a rejected job).
  outcome        text NOT NULL CHECK (outcome IN ('recorded', 'pending', 'rejected_job')),
  reads          integer NOT NULL DEFAULT 0,
  PRIMARY KEY (run_id, event_type)
);

-- The bot's own run events, one row per backfill and event type, written before the POST: each is sent at most
-- once, even by two workers at once or a retried step. sent_at or error says how it went.
CREATE TABLE backfill.lineage_emissions (
  backfill_id   bigint NOT NULL REFERENCES backfill.backfills (id),
  event_type    text NOT NULL CHECK (event_type IN ('START', 'COMPLETE', 'FAIL')),
  run_id        uuid NOT NULL,
  intended_at   timestamptz NOT NULL DEFAULT now(),
  sent_at       timestamptz,
  http_status   integer,
  error         text,
  PRIMARY KEY (backfill_id, event_type)
);
