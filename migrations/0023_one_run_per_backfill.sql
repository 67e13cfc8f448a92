-- A backfill has one run. backfills.generation was always 1: nothing ever moved it (a stop ends a backfill, a
-- restart goes on with the same claims, a re-stage replaces that run's rows), and after 0020 no check read it.
-- It goes, so that "generation" means one thing: a partition's generation (partition_generations), the
-- version of its rows a publish wrote. The row store's bf_generation and reconciliations.generation keep the
-- staged run's number (1) under their old names: renaming them would rewrite every stored row table and its
-- index, for a value that never varies (src/db/rowStore.ts STAGED_RUN).
ALTER TABLE backfill.backfills DROP COLUMN generation;
