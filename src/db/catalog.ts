import { PIPELINE_COLUMNS, type Pipeline } from './pipelines.js';
import { undoneIfRefused, type Queryable } from './pool.js';
import { hasSqlState, SqlState } from './sqlState.js';

// The catalog as the database holds it (backfill.pipelines, backfill.consumers with their dependencies,
// backfill.signers), read whole and written row by row for `backfill catalog plan|apply <file>`
// (src/core/catalog). Every value is a bound parameter; the SQL texts a pipeline or consumer carries are
// stored as text here and only ever run through pipelineSql.ts.

export interface CatalogPipelineRow extends Omit<Pipeline, 'estimateSql'> {
  /** Written as the file gives it: null when it declares none. */
  estimateSql: string | null;
  /**
   * The watermark as 2026-11-14T23:00Z: stored, the pipeline's current one (null when it has none); wanted, the
   * file's starting hour (src/core/catalog/plan.ts says when it applies).
   */
  watermark: string | null;
}

export interface CatalogConsumerRow {
  name: string;
  kind: string;
  owner: string;
  pipeline: string | null;
  notifyRule: string;
  explicitRank: number | null;
  dependsOn: string[];
  retrigger: unknown;
  reportTotalSql: string | null;
  /** The escalation path, as the file declares it (src/core/announce/escalationPath.ts); empty: none. */
  escalation: unknown[];
}

export interface CatalogSignerRow {
  report: string;
  signer: string;
}

export interface CatalogRows {
  pipelines: CatalogPipelineRow[];
  consumers: CatalogConsumerRow[];
  signers: CatalogSignerRow[];
}

/**
 * Two applies at once would each diff against what the other is changing: the second waits for the first to
 * commit and then diffs against its result.
 */
export async function lockCatalog(tx: Queryable): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtext('backfill.catalog'))`);
}

/**
 * What `start` takes while it freezes the catalog fields a backfill runs: an apply waits for it to commit, and
 * then sees the backfill in flight; starts do not wait for each other.
 */
export async function lockCatalogShared(tx: Queryable): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock_shared(hashtext('backfill.catalog'))`);
}

export async function readCatalogRows(db: Queryable): Promise<CatalogRows> {
  const pipelines = await db.query<CatalogPipelineRow>(
    `SELECT ${PIPELINE_COLUMNS},
            to_char(w.processed_through AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"') AS watermark
     FROM backfill.pipelines p LEFT JOIN backfill.watermarks w ON w.pipeline = p.name ORDER BY name`);
  const consumers = await db.query<CatalogConsumerRow>(
    `SELECT c.name, c.kind, c.owner, c.pipeline, c.notify_rule AS "notifyRule", c.explicit_rank AS "explicitRank",
            coalesce((SELECT array_agg(d.depends_on ORDER BY d.depends_on) FROM backfill.consumer_dependencies d WHERE d.consumer = c.name), '{}') AS "dependsOn",
            c.retrigger, c.report_total_sql AS "reportTotalSql", c.escalation
     FROM backfill.consumers c ORDER BY c.name`);
  const signers = await db.query<CatalogSignerRow>('SELECT report, signer FROM backfill.signers ORDER BY report, signer');
  return { pipelines: pipelines.rows, consumers: consumers.rows, signers: signers.rows };
}

export async function upsertCatalogPipeline(tx: Queryable, pipeline: CatalogPipelineRow): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.pipelines (name, target_table, partition_column, key_columns, measure_column, step_sql, estimate_sql,
                                     source_shards_sql, shards_expected)
     VALUES ($1::text, $2::text, $3::text, $4::text[], $5::text, $6::text, $7::text, $8::text, $9::int)
     ON CONFLICT (name) DO UPDATE SET target_table = EXCLUDED.target_table, partition_column = EXCLUDED.partition_column,
       key_columns = EXCLUDED.key_columns, measure_column = EXCLUDED.measure_column, step_sql = EXCLUDED.step_sql,
       estimate_sql = EXCLUDED.estimate_sql, source_shards_sql = EXCLUDED.source_shards_sql, shards_expected = EXCLUDED.shards_expected`,
    [pipeline.name, pipeline.targetTable, pipeline.partitionColumn, pipeline.keyColumns, pipeline.measureColumn, pipeline.stepSql,
      pipeline.estimateSql, pipeline.sourceShardsSql, pipeline.shardsExpected]);
}

/** The consumer's row; its dependencies are written by setConsumerDependencies. */
export async function upsertCatalogConsumer(tx: Queryable, consumer: Omit<CatalogConsumerRow, 'dependsOn'>): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.consumers (name, kind, owner, pipeline, notify_rule, explicit_rank, retrigger, report_total_sql, escalation)
     VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::int, $7::jsonb, $8::text, $9::jsonb)
     ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, owner = EXCLUDED.owner, pipeline = EXCLUDED.pipeline,
       notify_rule = EXCLUDED.notify_rule, explicit_rank = EXCLUDED.explicit_rank, retrigger = EXCLUDED.retrigger,
       report_total_sql = EXCLUDED.report_total_sql, escalation = EXCLUDED.escalation`,
    [consumer.name, consumer.kind, consumer.owner, consumer.pipeline, consumer.notifyRule, consumer.explicitRank,
      JSON.stringify(consumer.retrigger), consumer.reportTotalSql, JSON.stringify(consumer.escalation)]);
}

/**
 * Makes the dependency links exactly these: one delete and one insert statement, so the rank trigger
 * (migrations/0001) runs twice in all rather than once per link.
 */
export async function setConsumerDependencies(tx: Queryable, links: readonly { consumer: string; dependsOn: string }[], consumers: readonly string[]): Promise<void> {
  const from = links.map((link) => link.consumer);
  const to = links.map((link) => link.dependsOn);
  await tx.query(
    `DELETE FROM backfill.consumer_dependencies d
     WHERE d.consumer = ANY($3::text[])
       AND NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS l(consumer, depends_on) WHERE l.consumer = d.consumer AND l.depends_on = d.depends_on)`,
    [from, to, consumers]);
  await tx.query(
    `INSERT INTO backfill.consumer_dependencies (consumer, depends_on)
     SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING`, [from, to]);
}

/** Makes the signers exactly these (report, signer) pairs; returns nothing, the plan already said what changes. */
export async function setSigners(tx: Queryable, signers: readonly CatalogSignerRow[], addedBy: string): Promise<void> {
  const reports = signers.map((signer) => signer.report);
  const users = signers.map((signer) => signer.signer);
  await tx.query(
    `DELETE FROM backfill.signers s
     WHERE NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS k(report, signer) WHERE k.report = s.report AND k.signer = s.signer)`,
    [reports, users]);
  await tx.query(
    `INSERT INTO backfill.signers (report, signer, added_by)
     SELECT k.report, k.signer, $3::text FROM unnest($1::text[], $2::text[]) AS k(report, signer) ON CONFLICT DO NOTHING`,
    [reports, users, addedBy]);
}

/** The unfinished backfills (in one of `states`) that list any of these consumers as a reader, by consumer. */
export async function findUnfinishedReaders(db: Queryable, consumers: readonly string[], states: readonly string[]): Promise<{ consumer: string; backfillIds: number[] }[]> {
  const { rows } = await db.query<{ consumer: string; backfillIds: string[] }>(
    `SELECT bc.consumer, array_agg(b.id ORDER BY b.id) AS "backfillIds"
     FROM backfill.backfill_consumers bc JOIN backfill.backfills b ON b.id = bc.backfill_id
     WHERE bc.consumer = ANY($1::text[]) AND b.state = ANY($2::text[])
     GROUP BY bc.consumer ORDER BY bc.consumer`, [consumers, states]);
  return rows.map((row) => ({ consumer: row.consumer, backfillIds: row.backfillIds.map(Number) }));
}

/** The unfinished backfills (in one of `states`) of any of these pipelines, by pipeline. */
export async function findUnfinishedBackfillsOf(db: Queryable, pipelines: readonly string[], states: readonly string[]): Promise<{ pipeline: string; backfillIds: number[] }[]> {
  const { rows } = await db.query<{ pipeline: string; backfillIds: string[] }>(
    `SELECT pipeline, array_agg(id ORDER BY id) AS "backfillIds" FROM backfill.backfills
     WHERE pipeline = ANY($1::text[]) AND state = ANY($2::text[]) GROUP BY pipeline ORDER BY pipeline`, [pipelines, states]);
  return rows.map((row) => ({ pipeline: row.pipeline, backfillIds: row.backfillIds.map(Number) }));
}

/**
 * Deletes the consumer (its dependency links go with it), or, when something of the record still refers to it
 * (its reads, signatures, past backfills), leaves it and names the first table that does. The delete runs under
 * a savepoint so that a refusal leaves the caller's transaction usable.
 */
export async function deleteConsumerUnlessReferenced(tx: Queryable, name: string): Promise<{ deleted: true } | { deleted: false; referencedBy: string }> {
  return deleteUnlessReferenced(tx, 'DELETE FROM backfill.consumers WHERE name = $1::text', name);
}

/**
 * As deleteConsumerUnlessReferenced, for a pipeline (its partition log and backfills refer to it). Its watermark
 * goes with it: without a built partition it is only the starting hour the catalog gave, not a record.
 */
export async function deletePipelineUnlessReferenced(tx: Queryable, name: string): Promise<{ deleted: true } | { deleted: false; referencedBy: string }> {
  return deleteUnlessReferenced(tx,
    `WITH watermark AS (DELETE FROM backfill.watermarks WHERE pipeline = $1::text) DELETE FROM backfill.pipelines WHERE name = $1::text`, name);
}

async function deleteUnlessReferenced(tx: Queryable, statement: string, name: string): Promise<{ deleted: true } | { deleted: false; referencedBy: string }> {
  const tried = await undoneIfRefused(tx, 'catalog_remove', () => tx.query(statement, [name]), (error) => hasSqlState(error, SqlState.ForeignKeyViolation));
  if (tried.done) return { deleted: true };
  return { deleted: false, referencedBy: `backfill.${(tried.error as { table?: string }).table ?? 'another table'}` };
}
