-- A stage or publish step keeps the hour its key names (partition_hour), so the dispatcher's look for runnable
-- steps finds a publish's target by the targets' primary key instead of parsing every key: at 240 partitions
-- the parse (a pattern match, a cast, the hour formatted back to compare) took 3 of the look's 7 ms, and the
-- look runs after every step (src/db/steps.ts, targetOfStep). Steps of every other kind name no hour: NULL.
ALTER TABLE backfill.backfill_steps ADD COLUMN partition_hour timestamptz;

UPDATE backfill.backfill_steps SET partition_hour = step_key::timestamptz
WHERE kind IN ('stage', 'publish') AND step_key ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:00Z$';

-- Every stage and publish is of an hour, and only they are. (Not `kind IN (…)`: test/db/states.test.ts reads
-- every IN list of the schema as the set of values of one column.)
ALTER TABLE backfill.backfill_steps ADD CONSTRAINT backfill_steps_hour_of_partition_steps
  CHECK ((partition_hour IS NOT NULL) = (kind = 'stage' OR kind = 'publish'));
