-- No second fence beside the state. fenced_generation was set to generation by a stop, and a write was refused
-- when fenced_generation >= generation; but generation never moves (see below), so that only ever held for a
-- stopped backfill, whose writes the state check already refuses. What refuses a late write is, in the
-- transaction that would commit it (checkClaim, src/core/engine/stepClaims.ts): the backfill's state, read under
-- its row lock (FOR NO KEY UPDATE), which a stop, pause or rollback moves under the same lock, so the write
-- either commits before the move or sees it and rolls back; then the step's claim token, read under the step's
-- row lock, which a takeover replaces (and whose old holder's session it ends). The column goes, so nothing reads
-- it as a fence.
ALTER TABLE backfill.backfills DROP COLUMN fenced_generation;

COMMENT ON COLUMN backfill.backfills.generation IS
  'The run''s staging key in the row store: staged, baseline and saved rows and staged table names carry it. '
  'Always 1: a re-stage replaces that run''s rows. Not a fence: what refuses a late write is the backfill''s '
  'state under its row lock and the step''s claim token, both checked in the write''s own transaction.';
