import type { Pipeline } from '../../db/pipelines.js';
import { quoteIdent, quoteQualified, type Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { parseStepSql } from './stepSql.js';

/*
 * A backfill's rows, kept in tables shaped like the pipeline's target, in a schema of the bot's own per
 * pipeline (bf_<pipeline>): rows are staged, saved, compared and restored by statements inside PostgreSQL on
 * typed key columns, never as JSON and never through Node.
 *
 *   staged    the step's output per partition, before it is published (bf_backfill, bf_generation, <target>)
 *   saved     exactly the rows a publish deleted: what a rollback restores (same shape)
 *   baseline  the live keys when the partition was staged: a live key not there arrived later (a late row)
 *   expected  the keys and measure the preview showed: the announced envelope
 *
 * A publish by swap keeps its staged rows and keys in tables of their own instead (swap.ts).
 */
export interface RowStore {
  schema: string;
  staged: string;
  saved: string;
  baseline: string;
  expected: string;
  target: string;
  /** The target's columns, quoted, in table order. */
  columns: string[];
  /** Key columns and the partition column, quoted. */
  keys: string[];
  partition: string;
  measure: string;
  /** The step's query ($1 = the hour) and the quoted columns it yields, in order. */
  stepQuery: string;
  stepColumns: string[];
}

export function storeSchemaName(pipeline: string): string {
  return `bf_${pipeline}`;
}

/** The names and columns of a pipeline's store (the tables exist once ensureRowStore ran for it). */
export async function rowStoreOf(db: Queryable, pipeline: Pipeline): Promise<RowStore> {
  const step = parseStepSql(pipeline.name, pipeline.stepSql);
  const { rows } = await db.query<{ name: string }>(
    `SELECT attname AS name FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
    [pipeline.targetTable]);
  const schema = quoteIdent(storeSchemaName(pipeline.name));
  return {
    schema,
    staged: `${schema}.staged`,
    saved: `${schema}.saved`,
    baseline: `${schema}.baseline`,
    expected: `${schema}.expected`,
    target: quoteQualified(pipeline.targetTable),
    columns: rows.map((row) => quoteIdent(row.name)),
    keys: pipeline.keyColumns.map(quoteIdent),
    partition: quoteIdent(pipeline.partitionColumn),
    measure: quoteIdent(pipeline.measureColumn),
    stepQuery: step.query,
    stepColumns: step.columns,
  };
}

/**
 * Creates the pipeline's store if it is missing, under a lock so two starts cannot race the DDL. Its tables
 * are built from the target's own definition (LIKE), with the columns the bot needs in front, and indexed on
 * (backfill, generation, partition, key) for the joins of reconciliation, publish and rollback.
 */
export async function ensureRowStore(tx: Queryable, pipeline: Pipeline): Promise<RowStore> {
  if (storeSchemaName(pipeline.name).length > 63) {
    throw new BackfillError(ErrorCode.BadInput, `The pipeline name ${pipeline.name} is too long for its store schema (bf_<name> must fit in 63 characters).`);
  }
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('row-store:' || $1::text, 0))`, [pipeline.name]);
  const store = await rowStoreOf(tx, pipeline);
  const index = [store.partition, ...store.keys].join(', ');
  const keyList = [store.partition, ...store.keys].map((column) => `t.${column}`).join(', ');
  await tx.query(`CREATE SCHEMA IF NOT EXISTS ${store.schema}`);
  for (const table of [store.staged, store.saved]) {
    await tx.query(`CREATE TABLE IF NOT EXISTS ${table} (bf_backfill bigint NOT NULL, bf_generation integer NOT NULL, LIKE ${store.target})`);
    await tx.query(`CREATE INDEX IF NOT EXISTS ${table.split('.')[1] ?? 'rows'}_by_key ON ${table} (bf_backfill, bf_generation, ${index})`);
  }
  await tx.query(`CREATE TABLE IF NOT EXISTS ${store.baseline} AS SELECT 0::bigint AS bf_backfill, 0::integer AS bf_generation, ${keyList} FROM ${store.target} t WITH NO DATA`);
  await tx.query(`CREATE INDEX IF NOT EXISTS baseline_by_key ON ${store.baseline} (bf_backfill, bf_generation, ${index})`);
  await tx.query(
    `CREATE TABLE IF NOT EXISTS ${store.expected} AS SELECT 0::bigint AS bf_backfill, ${keyList}, 0::numeric(18, 2) AS bf_measure FROM ${store.target} t WITH NO DATA`);
  await tx.query(`CREATE INDEX IF NOT EXISTS expected_by_key ON ${store.expected} (bf_backfill, ${index})`);
  return store;
}

/** `a.k1 = b.k1 AND a.k2 = b.k2 …` over the key columns (the partition is filtered on both sides already). */
export function keysEqual(store: RowStore, a: string, b: string): string {
  return store.keys.map((key) => `${a}.${key} = ${b}.${key}`).join(' AND ');
}

/** The rows of one table of the store for a backfill's run and partition: $1 backfill, $2 generation, $3 hour. */
export function runRows(store: RowStore, table: string): string {
  return `${table} WHERE bf_backfill = $1::bigint AND bf_generation = $2::int AND ${store.partition} = $3::timestamptz`;
}

/** The text of a row of the target's shape, for comparing rows and for checksums. */
export function rowText(store: RowStore, alias: string): string {
  return `ROW(${store.columns.map((column) => `${alias}.${column}`).join(', ')})::text`;
}

/** The step's query as a row source `q` whose columns carry the names the step inserts into ($1 = the hour). */
export function stepRows(store: RowStore): string {
  // The newline ends a trailing -- comment of the step before the closing parenthesis.
  return `(${store.stepQuery}\n) AS q(${store.stepColumns.join(', ')})`;
}
