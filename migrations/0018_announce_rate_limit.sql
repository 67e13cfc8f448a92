-- Slack rate-limits an announcement (429 with Retry-After): the announce step waits as long as Slack says,
-- keeping its claim, and never fails over it (src/core/engine/steps.ts, waitOutRateLimits). When Slack said
-- the next try may go out, by the database clock, so the gate in the status message can say who is still
-- being told and when the next try is, whichever process renders it. NULL: not waiting on Slack (cleared once
-- the announcement lands).
ALTER TABLE backfill.backfill_consumers ADD COLUMN announce_retry_at timestamptz;
