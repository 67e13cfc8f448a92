-- What each owner is told is kept as facts, not as text in one front end's markup: the announcement's figures,
-- hours, signed figures and people (src/core/notices.ts AnnouncementFacts), worded by whichever view shows it
-- (a Slack DM, a terminal, the incident package). Rows announced before this keep their text, shown as it was.
ALTER TABLE backfill.backfill_consumers
  ADD COLUMN announcement_facts jsonb,
  ALTER COLUMN announcement DROP NOT NULL,
  ADD CONSTRAINT backfill_consumers_announcement_kept CHECK (announcement IS NOT NULL OR announcement_facts IS NOT NULL);
