-- What a backfill cost: the attention and the trust it spent, as numbers a team can watch per pipeline and quarter
-- (`backfill costs --since …`, the Home tab). One row per finished backfill (done, failed, cancelled, stopped or
-- rolled back), written in the transaction that finishes it and written again, whole, in the transaction of every
-- later step of it (the owners told after the run, the diff post, a rollback's replays). Every figure is
-- recomputed from the backfill's own rows by src/db/costs.ts, never added to: filing twice gives the same row.
CREATE TABLE backfill.backfill_costs (
  backfill_id           bigint PRIMARY KEY REFERENCES backfill.backfills (id),
  -- The rows the published partitions hold, over every partition the backfill published (rolled back since or not).
  rows_rewritten        bigint NOT NULL CHECK (rows_rewritten >= 0),
  partitions            integer NOT NULL CHECK (partitions >= 0),
  -- Re-trigger steps done: the run's, and a rollback's.
  replays               integer NOT NULL CHECK (replays >= 0),
  -- Distinct owners an announcement, an after-run message or a rollback message reached.
  people_told           integer NOT NULL CHECK (people_told >= 0),
  -- announced_at to the last acknowledgement (or override) the gate needed; to the finish when it never opened.
  ack_wait_ms           bigint NOT NULL CHECK (ack_wait_ms >= 0),
  -- The steps' run time: each step's first claim (started_at) to its finish, summed.
  compute_ms            bigint NOT NULL CHECK (compute_ms >= 0),
  -- Signed figures whose rebuilt report no longer showed what was signed.
  signed_figures_moved  integer NOT NULL CHECK (signed_figures_moved >= 0),
  filed_at              timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The costs are summed by the quarter a backfill was announced in, from a date on.
CREATE INDEX backfills_announced_at ON backfill.backfills (announced_at);
