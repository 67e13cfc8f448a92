-- Whether the rows start kept of an hour as the announced envelope (the store's expected table) hold each key once (false: a key repeats),
-- as the store's unique index expected_keys_once proves for them (src/db/rowStore.ts, keepKeysOnceInExpected). Where
-- it is true and the live and staged sides are proven likewise by unique indexes of their own, staging's one measure
-- needs no count of distinct keys (src/db/reconcile.ts, measureStaged). NULL on targets started before: not proven.
ALTER TABLE backfill.backfill_targets ADD COLUMN expected_keys_once boolean;
