-- Slack delivery: the incident channel and its status message live on the backfill row, announcements and
-- the diff post are steps like any other (so a failed DM is retried and never sent twice once done), and an
-- owner may name delegates who can acknowledge for them.

ALTER TABLE backfill.backfills
  ADD COLUMN incident_channel text,
  ADD COLUMN status_ts text;

ALTER TABLE backfill.backfill_steps DROP CONSTRAINT backfill_steps_kind_check;
ALTER TABLE backfill.backfill_steps ADD CONSTRAINT backfill_steps_kind_check
  CHECK (kind IN ('announce', 'recompute', 'watermark', 'replay', 'compare', 'notify', 'report'));

-- Where each owner's announcement landed (a DM channel and ts), so acknowledgements can update it in place.
ALTER TABLE backfill.backfill_consumers
  ADD COLUMN message_channel text,
  ADD COLUMN message_ts text;

CREATE TABLE backfill.delegates (
  owner     text NOT NULL,
  delegate  text NOT NULL,
  PRIMARY KEY (owner, delegate),
  CHECK (owner <> delegate)
);
