-- Escalation: an owner who does not acknowledge is not left to an operator's memory. Each consumer may declare
-- in the catalog whom to tell next, and after how long (src/core/announce/escalationPath.ts reads it); a
-- backfill copies its readers' paths when it is started, so a catalog changed mid-run changes no running
-- escalation (src/core/announce/escalation.ts).

-- The catalog's path, as the file declares it: a list of steps ({after, to, channel | usergroup | user, hours}).
-- Empty: nobody is told but the owner.
ALTER TABLE backfill.consumers ADD COLUMN escalation jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(escalation) = 'array');

-- One row per step of each "before" reader's path, written by start with the backfill (the copy: `definition` is
-- the step as the catalog held it then). due_at is NULL until the owner's announcement went out; then its wait
-- after that instant, by the database's clock, moved into the step's working hours. The row is the decision:
-- waiting → sending is written in the transaction that finds the gate still unanswered (the backfill's row
-- locked against an acknowledgement), before anything is sent; sending → sent once the messenger delivered,
-- each message once by its intent (bf<id>:escalate:<consumer>:<step>). A step still waiting when the owner
-- acknowledges, an operator overrides, the owner holds or the backfill leaves its gate is stopped and never sent.
CREATE TABLE backfill.escalations (
  backfill_id  bigint NOT NULL,
  consumer     text NOT NULL,
  step         integer NOT NULL CHECK (step BETWEEN 1 AND 10),
  definition   jsonb NOT NULL,
  due_at       timestamptz,
  status       text NOT NULL DEFAULT 'waiting'
               CHECK (status IN ('waiting', 'sending', 'sent', 'stopped', 'skipped', 'undeliverable', 'failed')),
  -- Whom the decision named (the delegates then, the channel, the user group or the user), and whom the
  -- messenger reached (a user group's members, when the step went out).
  recipients   jsonb,
  reached      jsonb,
  decided_at   timestamptz,
  sent_at      timestamptz,
  stopped_at   timestamptz,
  stop_reason  text CHECK (stop_reason IN ('acknowledged', 'overridden', 'held', 'left_gate')),
  -- Why a step went to nobody (skipped: no delegates named), or what Slack answered (undeliverable, failed).
  note         text,
  PRIMARY KEY (backfill_id, consumer, step),
  FOREIGN KEY (backfill_id, consumer) REFERENCES backfill.backfill_consumers (backfill_id, consumer),
  CHECK ((status = 'stopped') = (stop_reason IS NOT NULL))
);
-- The sweep's reads: the steps still to send.
CREATE INDEX escalations_outstanding ON backfill.escalations (backfill_id) WHERE status IN ('waiting', 'sending');
