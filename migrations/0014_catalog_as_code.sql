-- Catalog as code (src/core/catalog, `backfill catalog plan|apply <file>`): a consumer may name the pipeline
-- whose table it reads itself, so the catalog file can say so and a name that is no pipeline is refused before
-- anything is applied. Null: it reads another consumer's output (an export built from a report).
ALTER TABLE backfill.consumers ADD COLUMN pipeline text REFERENCES backfill.pipelines (name);
