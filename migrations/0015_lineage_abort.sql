-- Lineage out: a backfill an operator stopped after it started running ends its OpenLineage run with ABORT, so a
-- lineage server does not show it running for ever (src/core/lineage/emit.ts).
ALTER TABLE backfill.lineage_emissions DROP CONSTRAINT lineage_emissions_event_type_check;
ALTER TABLE backfill.lineage_emissions ADD CONSTRAINT lineage_emissions_event_type_check CHECK (event_type IN ('START', 'COMPLETE', 'ABORT', 'FAIL'));
