-- Who may sign which report (managed with `backfill signer …`), and the record of a normal run that filled
-- hours readers had already read while they were missing: told like a backfill's diff, and kept like one.

CREATE TABLE backfill.signers (
  report    text NOT NULL REFERENCES backfill.consumers (name),
  signer    text NOT NULL,
  added_by  text NOT NULL,
  added_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (report, signer)
);

CREATE TABLE backfill.catch_ups (
  id          bigserial PRIMARY KEY,
  pipeline    text NOT NULL REFERENCES backfill.pipelines (name),
  first_hour  timestamptz NOT NULL,
  last_hour   timestamptz NOT NULL,
  partitions  integer NOT NULL CHECK (partitions > 0),
  ran_at      timestamptz NOT NULL DEFAULT now(),
  ran_by      text NOT NULL
);

-- One per stale reader and period: what its report showed when it read the hole, and what the table holds now.
CREATE TABLE backfill.catch_up_notices (
  catch_up_id   bigint NOT NULL REFERENCES backfill.catch_ups (id),
  consumer      text NOT NULL REFERENCES backfill.consumers (name),
  owner         text NOT NULL,
  period        date NOT NULL,
  hours_read    integer NOT NULL,
  first_read_at timestamptz NOT NULL,
  report_before numeric(18, 2),
  total_after   numeric(18, 2) NOT NULL,
  told_at       timestamptz,
  PRIMARY KEY (catch_up_id, consumer, period)
);
CREATE INDEX catch_up_notices_untold ON backfill.catch_up_notices (catch_up_id) WHERE told_at IS NULL;
