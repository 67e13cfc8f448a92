-- Why a paused backfill is paused, as a value rather than read out of its sentence: a partition outside its
-- envelope (breach: a continue accepts the difference) or its catalog changed since it was announced (catalog:
-- a continue is refused while it differs and accepts nothing once it is put back). Set with paused_reason by
-- the one pause move (src/core/engine/pause.ts), cleared with it by a continue. A backfill paused before this
-- migration is given the cause its reason names.
ALTER TABLE backfill.backfills ADD COLUMN paused_for text CHECK (paused_for IN ('breach', 'catalog'));
UPDATE backfill.backfills
   SET paused_for = CASE WHEN paused_reason LIKE 'The catalog of % changed since backfill #%' THEN 'catalog' ELSE 'breach' END
 WHERE state = 'paused';
