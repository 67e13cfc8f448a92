import type { Pipeline } from '../../db/pipelines.js';
import { quoteIdent, quoteQualified, type PoolClient, type Queryable } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { snapshotPartition, type PartitionSnapshot } from './partitionStep.js';
import { reconcileByKey, type Reconciliation, type RowSource } from './reconcile.js';
import { keysEqual, stepRows, storeSchemaName, type RowStore } from './rowStore.js';
import { formatHour, HOUR_MS } from '../time.js';

/*
 * Publish by swap, for a target declaratively partitioned by its partition column with one partition per hour.
 *
 *   stage    the step's rows go into a table of their own in the pipeline's store, shaped like the target, with
 *            a CHECK that holds exactly the hour (so ATTACH need not scan it) and the target's indexes built
 *            after the load (so the publish builds none);
 *   publish  under the partition lock: writers of the target wait (EXCLUSIVE; readers go on) while the late
 *            rows are carried, the keys written recorded and the outcome measured; then, in a window of
 *            catalog changes only (ACCESS EXCLUSIVE: readers wait too), the live partition is detached and
 *            moved into the store as the saved prior generation, and the staged table takes its name and place;
 *   rollback swaps them back the same way, carrying rows written after the publish (late rows) into the prior
 *            partition first, so they stay live as they do when a rewrite is rolled back.
 *
 * A plain table, or partitions wider than an hour, are published by rewrite (stagePublish.ts).
 */

/** The target's partition holding exactly one hour: schema and name unquoted, `qualified` quoted. */
export interface HourPartition {
  schema: string;
  name: string;
  qualified: string;
}

/**
 * The leaf partition of the target whose bounds are exactly [hour, hour + 1 h), when the target is range
 * partitioned on the partition column alone; undefined otherwise (publish by rewrite).
 */
export async function hourPartitionOf(db: Queryable, pipeline: Pipeline, hour: Date): Promise<HourPartition | undefined> {
  const candidate = await partitionHolding(db, pipeline, hour);
  if (!candidate) return undefined;
  // PERF: a step's transaction plans without nested loops (preferHashJoins); over the catalogs that means hash
  // joins of whole pg_attribute and pg_class, a second on a month of hourly partitions. Index lookups here.
  const { rows: setting } = await db.query<{ nestloop: string }>(`SELECT current_setting('enable_nestloop') AS nestloop`);
  if (setting[0]?.nestloop === 'off') await db.query('SET LOCAL enable_nestloop = on');
  try {
    return await boundOfExactlyTheHour(db, pipeline, hour, candidate);
  } finally {
    if (setting[0]?.nestloop === 'off') await db.query('SET LOCAL enable_nestloop = off');
  }
}

async function boundOfExactlyTheHour(db: Queryable, pipeline: Pipeline, hour: Date, candidate: string): Promise<HourPartition | undefined> {
  // The bound is compared as PostgreSQL prints it, formatted in the same session: no parsing of its text. The
  // one candidate is deparsed first (a CTE is computed once), so no other partition's bound is.
  const { rows } = await db.query<{ schema: string; name: string }>(
    `WITH candidate AS MATERIALIZED (
       SELECT c.oid, n.nspname, c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($4::text) AND c.relkind = 'r' AND c.relispartition)
     SELECT k.nspname AS schema, k.relname AS name
     FROM candidate k
     JOIN pg_inherits i ON i.inhrelid = k.oid
     JOIN pg_partitioned_table p ON p.partrelid = i.inhparent
     JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
     WHERE p.partrelid = to_regclass($1::text) AND p.partstrat = 'r' AND p.partnatts = 1 AND a.attname = $2::name
       AND k.bound = format('FOR VALUES FROM (%L) TO (%L)', $3::timestamptz, $3::timestamptz + interval '1 hour')`,
    [quoteQualified(pipeline.targetTable), pipeline.partitionColumn, hour, candidate]);
  const row = rows[0];
  return row && { ...row, qualified: `${quoteIdent(row.schema)}.${quoteIdent(row.name)}` };
}

/**
 * The one partition a query of the hour would read, as the planner prunes to it; undefined for a plain table.
 * PERF: asking the planner is a lookup in the cached partition bounds; deparsing every partition's bound
 * (pg_get_expr) opens each of them, and took 0.4 s on a month of hourly partitions.
 */
async function partitionHolding(db: Queryable, pipeline: Pipeline, hour: Date): Promise<string | undefined> {
  const { rows: kind } = await db.query<{ partitioned: boolean }>(`SELECT relkind = 'p' AS partitioned FROM pg_class WHERE oid = to_regclass($1::text)`, [quoteQualified(pipeline.targetTable)]);
  if (!kind[0]?.partitioned) return undefined;
  const { rows } = await db.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
    `EXPLAIN (VERBOSE, FORMAT JSON) SELECT 1 FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = ${hourLiteral(hour)}`);
  const scanned = scannedRelations(rows[0]?.['QUERY PLAN'][0].Plan);
  return scanned.length === 1 ? scanned[0] : undefined;
}

interface PlanNode {
  'Relation Name'?: string;
  Schema?: string;
  Plans?: PlanNode[];
}

function scannedRelations(node: PlanNode | undefined): string[] {
  if (!node) return [];
  const own = node['Relation Name'] && node.Schema ? [`${quoteIdent(node.Schema)}.${quoteIdent(node['Relation Name'])}`] : [];
  return [...own, ...(node.Plans ?? []).flatMap(scannedRelations)];
}

/** 2026111503: hours sort by name in the store. */
export function hourCode(hour: Date): string {
  return hour.toISOString().slice(0, 13).replace(/[-T]/g, '');
}

export function stagedTableName(backfillId: number, generation: number, hour: Date): string {
  return `p${hourCode(hour)}_b${backfillId}_g${generation}`;
}

export function savedTableName(backfillId: number, hour: Date): string {
  return `p${hourCode(hour)}_b${backfillId}_saved`;
}

/**
 * The keys of one run of one hour, each in a table of its own without an index (a hash join reads them whole):
 * the live keys when it was staged (late rows are the ones not there), and the keys its publish wrote (a
 * rollback tells them from rows written after it). PERF: copying 50,000 keys into the store's shared tables,
 * whose btree on (backfill, generation, hour, key) grows with every row, took about 190 ms; into a table of
 * their own, under 90 ms.
 */
export const baselineTableName = (backfillId: number, generation: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_g${generation}_baseline`;
export const writtenTableName = (backfillId: number, hour: Date) => `p${hourCode(hour)}_b${backfillId}_written`;

const inStore = (store: RowStore, name: string) => `${store.schema}.${quoteIdent(name)}`;

/** Keeps the keys of `source` (a RowSource with the run's parameters) in the store table `name`, made anew. */
async function keepKeys(tx: PoolClient, store: RowStore, name: string, source: RowSource, run: [number, number, Date]): Promise<void> {
  const keys = [store.partition, ...store.keys].map((key) => `t.${key}`).join(', ');
  await tx.query(`DROP TABLE IF EXISTS ${inStore(store, name)}`);
  await tx.query(`CREATE TABLE ${inStore(store, name)} AS SELECT ${keys} FROM ${store.target} t WITH NO DATA`);
  // Every source takes the run's three parameters, whether it reads them all or not.
  await tx.query(`INSERT INTO ${inStore(store, name)} SELECT ${keys} FROM ${source} AND $1::bigint IS NOT NULL AND $2::int IS NOT NULL`, run);
}

/** The live keys of the hour when it is staged for a swap: what its publish compares against for late rows. */
export async function keepBaseline(tx: PoolClient, store: RowStore, run: [number, number, Date], live: RowSource): Promise<void> {
  await keepKeys(tx, store, baselineTableName(...run), live, run);
}

/** The rows of a standalone table of the target's shape as a RowSource (the run's parameters kept typed). */
export function tableSource(store: RowStore, table: string, alias = 't'): RowSource {
  return `${table} ${alias} WHERE $1::bigint IS NOT NULL AND $2::int IS NOT NULL AND ${alias}.${store.partition} = $3::timestamptz`;
}

const hourLiteral = (hour: Date) => `'${hour.toISOString()}'::timestamptz`;

const CHECK_VIOLATION = '23514';
const UNIQUE_VIOLATION = '23505';
const IN_HOUR = 'bf_in_hour';

/**
 * Runs the step into a new table of the store for this run and hour, shaped like the target and constrained to
 * the hour. Returns its name, and its qualified, quoted name. A re-run of the same stage starts the table over.
 */
export async function stageIntoTable(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date]): Promise<{ name: string; qualified: string }> {
  const hour = run[2];
  const name = stagedTableName(...run);
  const table = inStore(store, name);
  await refuseIfAttached(tx, table);
  await tx.query(`DROP TABLE IF EXISTS ${table}`);
  const p = store.partition;
  await tx.query(
    `CREATE TABLE ${table} (LIKE ${store.target} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE,
       CONSTRAINT ${IN_HOUR} CHECK (${p} IS NOT NULL AND ${p} >= ${hourLiteral(hour)} AND ${p} < ${hourLiteral(new Date(hour.getTime() + HOUR_MS))}))`);
  try {
    await tx.query(`INSERT INTO ${table} (${store.stepColumns.join(', ')}) SELECT q.* FROM ${stepRows(store)}`, [hour]);
  } catch (error) {
    const pgError = error as { code?: string; constraint?: string };
    if (pgError.code !== CHECK_VIOLATION || pgError.constraint !== IN_HOUR) throw error;
    throw new BackfillError(ErrorCode.StepFailed,
      `the ${pipeline.name} step produced rows for ${formatHour(hour)} that are not in that hour: ` +
      `it must produce only rows whose ${pipeline.partitionColumn} is $1. Nothing was changed.`, { cause: error });
  }
  return { name, qualified: table };
}

async function refuseIfAttached(db: Queryable, table: string): Promise<void> {
  const { rows } = await db.query<{ attached: boolean }>('SELECT relispartition AS attached FROM pg_class WHERE oid = to_regclass($1::text)', [table]);
  if (rows[0]?.attached) {
    throw new BackfillError(ErrorCode.StepFailed, `${table} is already attached to the target: this run's partition was published, so it is not staged again`);
  }
}

/**
 * Builds on the staged table every index the target has (the parent's partitioned indexes), so ATTACH adopts
 * them instead of building them while the target is locked; then analyzes it, so the partition it becomes has
 * statistics from its first query (autovacuum may be off).
 */
export async function indexLikeTarget(tx: PoolClient, pipeline: Pipeline, store: RowStore, table: string, tableName: string): Promise<void> {
  const { rows } = await tx.query<{ def: string; name: string; constraint: 'p' | 'u' | null }>(
    `SELECT pg_get_indexdef(i.indexrelid) AS def, c.relname AS name,
            (SELECT con.contype::text FROM pg_constraint con WHERE con.conindid = i.indexrelid AND con.contype IN ('p', 'u')) AS constraint
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = to_regclass($1::text) ORDER BY c.relname`, [store.target]);
  for (const [n, index] of rows.entries()) {
    const name = quoteIdent(`${tableName}_i${n + 1}`);
    const mirrored = index.def.replace(/^CREATE (UNIQUE )?INDEX \S+ ON ONLY \S+ USING /, (_all, unique: string | undefined) => `CREATE ${unique ?? ''}INDEX ${name} ON ${table} USING `);
    if (mirrored === index.def) {
      throw new BackfillError(ErrorCode.StepFailed, `the index ${index.name} of ${pipeline.targetTable} cannot be built on a staged partition (${index.def}): publish by swap needs plain names`);
    }
    try {
      await tx.query(mirrored);
    } catch (error) {
      if ((error as { code?: string }).code !== UNIQUE_VIOLATION) throw error;
      throw new BackfillError(ErrorCode.StepFailed, `the staged rows of ${tableName} break the unique index ${index.name} of ${pipeline.targetTable}: fix the step. Nothing was changed.`, { cause: error });
    }
    // ATTACH adopts an index for a primary key or unique constraint only from a constraint of the same kind:
    // without one it would build another index while readers wait.
    if (index.constraint) await tx.query(`ALTER TABLE ${table} ADD CONSTRAINT ${name} ${index.constraint === 'p' ? 'PRIMARY KEY' : 'UNIQUE'} USING INDEX ${name}`);
  }
  await tx.query(`ANALYZE ${table}`);
}

/** Where a partition published by swap went, and what it measured, for the caller to record. */
export interface SwapOutcome {
  savedRows: number;
  lateRows: number;
  published: Reconciliation;
  snapshot: PartitionSnapshot;
  savedTable: string;
  publishedTable: string;
  /** How long the catalog changes took, while readers of the target waited (the commit adds its own few ms). */
  swapMs: number;
}

/** Hooks a test uses to measure or act inside the window where readers of the target wait. */
export interface SwapHooks {
  onSwapWindow?(milliseconds: number): void;
}

/**
 * Publishes the staged table in place of the live hour partition, inside the caller's transaction (which then
 * checks the fence and the claim, and commits). The caller holds the partition lock.
 */
export async function publishBySwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], staged: string, hooks: SwapHooks = {}): Promise<SwapOutcome> {
  const hour = run[2];
  await lockForSwap(tx, store);
  const live = await hourPartitionOf(tx, pipeline, hour);
  if (!live) {
    throw new BackfillError(ErrorCode.StepFailed, `${pipeline.targetTable} has no partition of exactly ${formatHour(hour)} any more: it was staged for a swap, so it is not published. Nothing was changed.`);
  }
  await refuseIfAttached(tx, staged);
  const lateRows = await carryLateRows(tx, store, run, live.qualified, staged);
  await recordWrittenKeys(tx, store, run, staged);
  const published = await reconcileByKey(tx, store, run, tableSource(store, live.qualified), tableSource(store, staged));
  const savedRows = await countRows(tx, live.qualified);
  const snapshot = await snapshotPartition(tx, pipeline, hour, staged);
  const savedName = savedTableName(run[0], hour);
  const started = performance.now();
  await swapTables(tx, store, { out: live, outTo: { schema: storeSchemaName(pipeline.name), name: savedName }, inTable: staged, hour });
  const swapMs = performance.now() - started;
  hooks.onSwapWindow?.(swapMs);
  return { savedRows, lateRows, published, snapshot, savedTable: inStore(store, savedName), publishedTable: live.qualified, swapMs };
}

/**
 * Writers of the target wait from here to the commit (their rows would otherwise land in a partition being
 * replaced); readers wait only for the DETACH … ATTACH window. Taken before the transaction reads the target
 * at all: a swap that held a reader's lock while it queued for this one would deadlock with the next swap, each
 * waiting for the other's read lock to go before it can DETACH.
 */
export async function lockForSwap(tx: PoolClient, store: RowStore): Promise<void> {
  await tx.query(`LOCK TABLE ${store.target} IN EXCLUSIVE MODE`);
}

/**
 * The catalog changes of a swap, in one transaction: detach `out`, move it to `outTo`, give `inTable` its
 * schema and name, attach it for the hour. ATTACH skips its scan when the table's CHECK holds the hour.
 */
export async function swapTables(tx: PoolClient, store: RowStore, move: { out: HourPartition; outTo: { schema: string; name: string }; inTable: string; hour: Date }): Promise<void> {
  const { out, outTo, inTable, hour } = move;
  await tx.query(`ALTER TABLE ${store.target} DETACH PARTITION ${out.qualified}`);
  if (outTo.schema !== out.schema) await tx.query(`ALTER TABLE ${out.qualified} SET SCHEMA ${quoteIdent(outTo.schema)}`);
  await tx.query(`ALTER TABLE ${quoteIdent(outTo.schema)}.${quoteIdent(out.name)} RENAME TO ${quoteIdent(outTo.name)}`);
  const inName = await relationName(tx, inTable);
  if (inName.schema !== out.schema) await tx.query(`ALTER TABLE ${inTable} SET SCHEMA ${quoteIdent(out.schema)}`);
  await tx.query(`ALTER TABLE ${quoteIdent(out.schema)}.${quoteIdent(inName.name)} RENAME TO ${quoteIdent(out.name)}`);
  await tx.query(`ALTER TABLE ${store.target} ATTACH PARTITION ${out.qualified} FOR VALUES FROM (${hourLiteral(hour)}) TO (${hourLiteral(new Date(hour.getTime() + HOUR_MS))})`);
}

async function relationName(db: Queryable, table: string): Promise<{ schema: string; name: string }> {
  const { rows } = await db.query<{ schema: string; name: string }>(
    'SELECT n.nspname AS schema, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1::text)', [table]);
  const row = rows[0];
  if (!row) throw new BackfillError(ErrorCode.StepFailed, `${table} does not exist: it was dropped since it was staged. Nothing was changed.`);
  return row;
}

/**
 * Rows of the live partition that were neither there when it was staged nor produced by the step: written since
 * by normal ingestion. They go into the staged table, so the published generation keeps them.
 */
async function carryLateRows(tx: PoolClient, store: RowStore, run: [number, number, Date], live: string, staged: string): Promise<number> {
  const late = await tx.query(
    `INSERT INTO ${staged} (${store.columns.join(', ')})
     SELECT ${store.columns.map((column) => `p.${column}`).join(', ')} FROM ${tableSource(store, live, 'p')}
       AND NOT EXISTS (SELECT 1 FROM ${inStore(store, baselineTableName(...run))} b WHERE ${keysEqual(store, 'b', 'p')})
       AND NOT EXISTS (SELECT 1 FROM ${staged} s WHERE ${keysEqual(store, 's', 'p')})`, run);
  return late.rowCount ?? 0;
}

/** The keys this publish writes (staged and carried): a rollback checks that nobody else changed those rows. */
async function recordWrittenKeys(tx: PoolClient, store: RowStore, run: [number, number, Date], staged: string): Promise<void> {
  await keepKeys(tx, store, writtenTableName(run[0], run[2]), tableSource(store, staged), run);
}

async function countRows(db: Queryable, table: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return rows[0]?.n ?? 0;
}

/**
 * Tables of this backfill's swaps still in the store and not attached: what retention drops with its rows of
 * that kind (scratch: the staged live keys; undo: the staged, saved and swapped-out tables and the written keys).
 */
export async function detachedTablesOf(db: Queryable, pipeline: string, backfillId: number, kind: 'scratch' | 'undo'): Promise<string[]> {
  const suffix = kind === 'scratch' ? 'g[0-9]+_baseline' : '(g[0-9]+|saved|rolledback|written)';
  const { rows } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1::text AND c.relkind = 'r' AND NOT c.relispartition AND c.relname ~ ('^p[0-9]{10}_b' || $2::bigint || '_' || $3::text || '$')
     ORDER BY c.relname`, [`bf_${pipeline}`, backfillId, suffix]);
  return rows.map((row) => row.name);
}

/** A partition a backfill published by swap: the prior partition it keeps, and the name the published one took. */
export interface SwappedPartition {
  savedTable: string;
  publishedTable: string;
  rowsSaved: number;
  /** The keys its publish wrote (writtenTableName). */
  writtenTable: string;
}

export async function swappedPartition(db: Queryable, store: RowStore, backfillId: number, hour: Date): Promise<SwappedPartition | undefined> {
  const { rows } = await db.query<Omit<SwappedPartition, 'writtenTable'>>(
    `SELECT saved_table AS "savedTable", published_table AS "publishedTable", rows_saved::int AS "rowsSaved"
     FROM backfill.preserved_partitions WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz AND saved_table IS NOT NULL`, [backfillId, hour]);
  const row = rows[0];
  return row && { ...row, writtenTable: inStore(store, writtenTableName(backfillId, hour)) };
}

/**
 * Live rows of the partition whose key a publish by swap wrote (the keys it recorded) or replaced (the saved
 * partition's): what a rollback compares against the published checksum and swaps out. Run parameters as usual.
 */
export function writtenBySwap(store: RowStore, swapped: SwappedPartition): RowSource {
  return `${store.target} t WHERE t.${store.partition} = $3::timestamptz AND $1::bigint IS NOT NULL AND $2::int IS NOT NULL
    AND (EXISTS (SELECT 1 FROM ${swapped.writtenTable} w WHERE ${keysEqual(store, 'w', 't')})
      OR EXISTS (SELECT 1 FROM ${swapped.savedTable} p WHERE ${keysEqual(store, 'p', 't')}))`;
}

/**
 * Swaps a published partition back out, inside the caller's rollback transaction (which holds the partition
 * lock, and the target's lockForSwap, taken before it read anything): rows written after the publish (late rows) are carried into the saved partition first, so they stay
 * live; then the saved partition takes its name and place again, and the published one goes back to the store.
 * Returns the rows put back.
 */
export async function restoreBySwap(tx: PoolClient, pipeline: Pipeline, store: RowStore, run: [number, number, Date], swapped: SwappedPartition): Promise<number> {
  const hour = run[2];
  const live = await hourPartitionOf(tx, pipeline, hour);
  if (live?.qualified !== swapped.publishedTable) {
    throw new BackfillError(ErrorCode.WrongState,
      `${formatHour(hour)}: the partition backfill #${run[0]} attached (${swapped.publishedTable}) is no longer the live one (${live?.qualified ?? 'none'}); nothing was changed`);
  }
  await refuseIfAttached(tx, swapped.savedTable);
  const late = await tx.query(
    `INSERT INTO ${swapped.savedTable} (${store.columns.join(', ')})
     SELECT ${store.columns.map((column) => `t.${column}`).join(', ')} FROM ${tableSource(store, live.qualified)}
       AND NOT EXISTS (SELECT 1 FROM ${swapped.writtenTable} w WHERE ${keysEqual(store, 'w', 't')})
       AND NOT EXISTS (SELECT 1 FROM ${swapped.savedTable} p WHERE ${keysEqual(store, 'p', 't')})`, run);
  const putBack = await countRows(tx, swapped.savedTable);
  if (putBack !== swapped.rowsSaved + (late.rowCount ?? 0)) {
    throw new BackfillError(ErrorCode.StepFailed,
      `restoring ${formatHour(hour)} would put back ${putBack} rows, not the ${swapped.rowsSaved} saved and ${late.rowCount ?? 0} written since; nothing was changed`);
  }
  await swapTables(tx, store, { out: live, outTo: { schema: storeSchemaName(pipeline.name), name: `p${hourCode(hour)}_b${run[0]}_rolledback` }, inTable: swapped.savedTable, hour });
  return swapped.rowsSaved;
}
