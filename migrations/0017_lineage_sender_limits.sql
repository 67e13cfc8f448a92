-- Lineage senders are bounded (src/core/lineage/ingest.ts, README "Lineage"): each token names a sender
-- (LINEAGE_TOKENS' name, or LINEAGE_TOKEN for the all-namespaces token).
--
-- The sender whose event created a proposal: at most LINEAGE_MAX_OPEN_PROPOSALS of a sender's stay open at once,
-- counted under a per-sender advisory lock. NULL: created before senders were named.
ALTER TABLE backfill.lineage_proposals ADD COLUMN proposed_by text;
CREATE INDEX lineage_proposals_open_by_sender ON backfill.lineage_proposals (proposed_by) WHERE state = 'proposed';

-- The read rows a sender may still write: a token bucket, LINEAGE_READS_PER_HOUR deep, refilled continuously at
-- that rate. In PostgreSQL rather than in a process's memory so that every bot process shares one bound per
-- sender and a restart does not refill it; the row lock of the update serializes a sender's concurrent requests.
CREATE TABLE backfill.lineage_read_buckets (
  sender       text PRIMARY KEY,
  tokens       double precision NOT NULL CHECK (tokens >= 0),
  refilled_at  timestamptz NOT NULL
);
