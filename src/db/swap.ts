import { quoteIdent, quoteQualified, type Queryable } from './pool.js';
import { runPipelineSql } from './pipelineSql.js';
import {
  keysEqual, liveSource, sameRowsSince, stepRows, tableSource, versionsAgainstBaseline, versionsSinceSnapshot,
  type CountedAtStaging, type RowSource, type RowStore, type VersionChanges, type VersionsSince,
} from './rowStore.js';
import type { Pipeline } from './pipelines.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { hasSqlState, SqlState } from './sqlState.js';

// The statements of a publish by swap (src/core/recompute/swap.ts describes it): the lookup of the target's
// partition of exactly one hour, the store's tables of one run (keys, staged rows) and their indexes, and the
// catalog changes that detach, move, rename and attach partitions.

/** The planner's enable_nestloop in this session ('on' or 'off'). */
export async function readNestloopSetting(db: Queryable): Promise<string | undefined> {
  const { rows } = await db.query<{ nestloop: string }>(`SELECT current_setting('enable_nestloop') AS nestloop`);
  return rows[0]?.nestloop;
}

export async function setLocalNestloop(db: Queryable, on: boolean): Promise<void> {
  await db.query(on ? 'SET LOCAL enable_nestloop = on' : 'SET LOCAL enable_nestloop = off');
}

/** The candidate partition (qualified, quoted), when its bound is exactly [hour, hour + 1 h) of the target partitioned on the partition column alone. */
export async function findExactHourBound(db: Queryable, pipeline: Pipeline, hour: Date, candidate: string): Promise<{ schema: string; name: string } | undefined> {
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
  return rows[0];
}

export async function isPartitionedTable(db: Queryable, pipeline: Pipeline): Promise<boolean | undefined> {
  const { rows } = await db.query<{ partitioned: boolean }>(`SELECT relkind = 'p' AS partitioned FROM pg_class WHERE oid = to_regclass($1::text)`, [quoteQualified(pipeline.targetTable)]);
  return rows[0]?.partitioned;
}

export interface PlanNode {
  'Relation Name'?: string;
  Schema?: string;
  Plans?: PlanNode[];
}

const hourLiteral = (hour: Date) => `'${hour.toISOString()}'::timestamptz`;

/** The plan of a query of the target's hour (EXPLAIN, not run): which partitions the planner prunes to. */
export async function explainHourQuery(db: Queryable, pipeline: Pipeline, hour: Date): Promise<PlanNode | undefined> {
  const { rows } = await db.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
    `EXPLAIN (VERBOSE, FORMAT JSON) SELECT 1 FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = ${hourLiteral(hour)}`);
  return rows[0]?.['QUERY PLAN'][0].Plan;
}

/** Keeps the keys of `source` (a RowSource with the run's parameters) in the table `table` (qualified, quoted), made anew. */
export async function keepKeysIn(tx: Queryable, store: RowStore, table: string, source: RowSource, run: [number, number, Date], options: { rowVersions?: boolean } = {}): Promise<void> {
  // rowVersions: each row's xmin beside its key (bf_xmin). An UPDATE by anyone makes a new row version with
  // another xmin, and DETACH, ATTACH, SET SCHEMA and RENAME rewrite nothing: a later rollback tells which rows
  // another writer changed by key, at the cost of four bytes a key instead of a copy of every row.
  const keys = [store.partition, ...store.keys].map((key) => `t.${key}`).join(', ') + (options.rowVersions ? ', t.xmin AS bf_xmin' : '');
  // PERF: CREATE TABLE AS writes its rows in bulk (a ring of buffers, no free-space lookups): 85-152 ms against
  // 102-190 ms for the same table created empty and filled by INSERT … SELECT, 200,000 keys in psql. The
  // columns are the source's, which is the target's shape (liveSource, runSource, tableSource), so of its types.
  await tx.query(`DROP TABLE IF EXISTS ${table}`);
  await tx.query(`CREATE TABLE ${table} AS SELECT ${keys} FROM ${source}`, run);
}

/**
 * A new, empty table (qualified, quoted) of the target's partition and key columns, of their types; one of that
 * name is dropped first. Filled later by a statement that picks which keys (measureStaged's missing keys).
 */
export async function createKeysTable(tx: Queryable, store: RowStore, table: string): Promise<void> {
  const keys = [store.partition, ...store.keys].map((key) => `t.${key}`).join(', ');
  // One round trip for the drop and the create (a simple-protocol string: names quoted, no outside text).
  await tx.query(`DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} AS SELECT ${keys} FROM ${store.target} t WITH NO DATA`);
}

/**
 * A new, empty written table by difference (qualified, quoted; one of that name is dropped first): the keys a
 * publish by swap writes, told against the partition it swaps out (its saved table) instead of copied. Rows:
 *
 *   added     a key the staged rows have and the live rows lacked (written, not replaced)
 *   dropped   a live key the staged rows lack (replaced, not written)
 *   version   no key: the row version (xmin) of every row the publish writes, in bf_xmin
 *
 * So the keys written are the saved table's, less the dropped ones, with the added ones. That holds only while the
 * saved table is exactly the live rows staging measured, as it is when the publish finds nothing live changed since
 * (measureSwap); a publish that finds otherwise records every written key instead (recordWrittenKeys), as a partition
 * staged before this form was. Filled by staging's one join (measureStaged); keysChangedSinceSwap reads either form,
 * and the late-row tests (writtenBySwap, carryLateRowsIntoSaved) need no change: they read the keys written or saved,
 * which are the saved ones with the added ones in both.
 */
export async function createWrittenByDifference(tx: Queryable, store: RowStore, table: string): Promise<void> {
  const keys = [store.partition, ...store.keys].map((key) => `t.${key}`).join(', ');
  await tx.query(`DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} AS SELECT ${keys}, NULL::xid AS bf_xmin, NULL::text AS bf_change FROM ${store.target} t WITH NO DATA`);
}

/**
 * The target's shape as `CREATE TABLE … (LIKE target INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED
 * INCLUDING STORAGE)` would copy it, spelled out from the catalog: each column's name, type, collation, NOT NULL,
 * default or generation expression, and the CHECK constraints by name; `storage`, the columns whose storage is not
 * their type's. Why not LIKE: it holds ACCESS SHARE on the target until the transaction ends, and a publish by swap
 * needs the target ACCESS EXCLUSIVE, so every swap would wait for every stage. Read in a subtransaction given back
 * (stagingReads, src/core/recompute/swap.ts), since deparsing an expression locks its table from PostgreSQL 16.
 * test/db/targetShape.test.ts holds a table made from it equal to one made by LIKE.
 */
export interface TargetShape {
  /** Column definitions, then CHECK constraints, comma separated: the inside of CREATE TABLE's parentheses. */
  definitions: string;
  /** ALTER TABLE subcommands (`ALTER COLUMN … SET STORAGE …`), one a column whose storage is not its type's. */
  storage: string[];
}

export async function readTargetShape(db: Queryable, target: string): Promise<TargetShape> {
  const { rows } = await db.query<{ definitions: string | null; storage: string[] | null }>(
    `WITH target AS (SELECT to_regclass($1::text) AS oid),
     columns AS (
       SELECT a.attnum, a.attname, a.attstorage <> t.typstorage AS own_storage, a.attstorage,
              format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod))
              || CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                      THEN format(' COLLATE %I.%I', cn.nspname, co.collname) ELSE '' END
              || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
              || CASE WHEN a.attgenerated = 's' THEN format(' GENERATED ALWAYS AS (%s) STORED', pg_get_expr(d.adbin, d.adrelid))
                      WHEN a.attgenerated = 'v' THEN format(' GENERATED ALWAYS AS (%s) VIRTUAL', pg_get_expr(d.adbin, d.adrelid))
                      WHEN d.adbin IS NOT NULL THEN format(' DEFAULT %s', pg_get_expr(d.adbin, d.adrelid)) ELSE '' END AS definition
       FROM target JOIN pg_attribute a ON a.attrelid = target.oid
       JOIN pg_type t ON t.oid = a.atttypid
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
       LEFT JOIN pg_collation co ON co.oid = a.attcollation LEFT JOIN pg_namespace cn ON cn.oid = co.collnamespace
       WHERE a.attnum > 0 AND NOT a.attisdropped),
     checks AS (
       SELECT c.conname, format('CONSTRAINT %I CHECK (%s)', c.conname, pg_get_expr(c.conbin, c.conrelid)) AS definition
       FROM target JOIN pg_constraint c ON c.conrelid = target.oid WHERE c.contype = 'c')
     SELECT (SELECT string_agg(definition, ', ' ORDER BY attnum) FROM columns)
            || coalesce((SELECT ', ' || string_agg(definition, ', ' ORDER BY conname) FROM checks), '') AS definitions,
            (SELECT array_agg(format('ALTER COLUMN %I SET STORAGE %s', attname,
                      CASE attstorage WHEN 'p' THEN 'PLAIN' WHEN 'e' THEN 'EXTERNAL' WHEN 'm' THEN 'MAIN' ELSE 'EXTENDED' END) ORDER BY attnum)
             FROM columns WHERE own_storage) AS storage`,
    [target]);
  const definitions = rows[0]?.definitions;
  if (!definitions) throw new BackfillError(ErrorCode.StepFailed, `the target ${target} has no columns to stage a partition of: was it dropped?`);
  return { definitions, storage: rows[0]?.storage ?? [] };
}

/**
 * A new table (qualified, quoted) of the target's shape (readTargetShape), with the CHECK `constraint` holding
 * exactly the hour; one of that name is dropped first. It names no other table, so it locks none.
 */
export async function createStagedTable(tx: Queryable, store: RowStore, shape: TargetShape, table: string, constraint: string, hour: Date, next: Date): Promise<void> {
  const p = store.partition;
  // One round trip for the drop, the create and the storage, as keepKeysIn's (catalog text and quoted names only).
  const storage = shape.storage.length > 0 ? `; ALTER TABLE ${table} ${shape.storage.join(', ')}` : '';
  await tx.query(
    `DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} (${shape.definitions},
       CONSTRAINT ${constraint} CHECK (${p} IS NOT NULL AND ${p} >= ${hourLiteral(hour)} AND ${p} < ${hourLiteral(next)}))${storage}`);
}

export async function isAttachedPartition(db: Queryable, table: string): Promise<boolean | undefined> {
  const { rows } = await db.query<{ attached: boolean }>('SELECT relispartition AS attached FROM pg_class WHERE oid = to_regclass($1::text)', [table]);
  return rows[0]?.attached;
}

/** One of the target's indexes (the parent's partitioned indexes): its definition, its name, the constraint it backs ('p' or 'u'). */
export interface TargetIndex {
  def: string;
  name: string;
  constraint: 'p' | 'u' | null;
}

export async function listTargetIndexes(tx: Queryable, store: RowStore): Promise<TargetIndex[]> {
  const { rows } = await tx.query<TargetIndex>(
    `SELECT pg_get_indexdef(i.indexrelid) AS def, c.relname AS name,
            (SELECT con.contype::text FROM pg_constraint con WHERE con.conindid = i.indexrelid AND con.contype IN ('p', 'u')) AS constraint
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
     WHERE i.indrelid = to_regclass($1::text) ORDER BY c.relname`, [store.target]);
  return rows;
}

/** Locks `table` (qualified, quoted) ACCESS SHARE, as reading it would, until the transaction ends. */
export async function lockTableShared(tx: Queryable, table: string): Promise<void> {
  await tx.query(`LOCK TABLE ${table} IN ACCESS SHARE MODE`);
}

/** Runs a CREATE INDEX built from one of the target's own definitions (pg_get_indexdef), renamed for the staged table. */
export async function createMirroredIndex(tx: Queryable, definition: string): Promise<void> {
  await tx.query(definition);
}

/** `name` (quoted) becomes the table's primary key or unique constraint, using the index of that name. */
export async function addConstraintUsingIndex(tx: Queryable, table: string, name: string, constraint: 'p' | 'u'): Promise<void> {
  await tx.query(`ALTER TABLE ${table} ADD CONSTRAINT ${name} ${constraint === 'p' ? 'PRIMARY KEY' : 'UNIQUE'} USING INDEX ${name}`);
}

/**
 * The statistics target a staged table is analyzed at: 10 samples 3,000 rows (the default 100, 30,000) and keeps
 * ten most common values and histogram bounds a column.
 *
 * PERF: the staged table was just filled by one known query, and every statement that reads it in the publish is
 * a hash join on its keys or a scan of the whole hour, which need its row count (already set by CREATE INDEX) and
 * each column's distinct count more than a fine histogram: ANALYZE at 100 took 105-170 ms at 50,000 rows, at 10
 * 8-16 ms, with the same plans (test/core/stagedStatistics.test.ts). A session setting, not the columns' SET STATISTICS:
 * the partition this table becomes keeps the default target for every later ANALYZE (autovacuum's, anyone's).
 */
const STAGED_STATISTICS_TARGET = 10;

/** ANALYZE of a staged table at STAGED_STATISTICS_TARGET; the transaction's own target is back as it was after. */
export async function analyzeStagedTable(tx: Queryable, table: string): Promise<void> {
  const { rows } = await tx.query<{ previous: string }>(`SELECT current_setting('default_statistics_target') AS previous`);
  const previous = Number(rows[0]?.previous ?? '100');
  if (!Number.isInteger(previous)) throw new Error(`default_statistics_target is not a whole number: ${rows[0]?.previous}`);
  // One round trip for the three (a simple-protocol string: the targets are integers, the table quoted by the caller).
  await tx.query(`SET LOCAL default_statistics_target = ${STAGED_STATISTICS_TARGET}; ANALYZE ${table}; SET LOCAL default_statistics_target = ${previous}`);
}

/**
 * The target's turn to swap (`target` qualified and quoted, as the store names it): one swap of a target at a
 * time, until the end of the caller's transaction. An advisory lock, so it holds nothing of any table; its own key
 * space beside lockPartition's ('swap:' against 'partition:').
 */
export async function takeSwapTurn(tx: Queryable, target: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('swap:' || $1::text, 0))`, [target]);
}

/** The modes a swap locks its tables in: EXCLUSIVE keeps writers of the target out (readers go on), ACCESS EXCLUSIVE everyone. */
type SwapLockMode = 'EXCLUSIVE' | 'ACCESS EXCLUSIVE';

/** One lock a swap takes: a table (qualified, quoted) in a mode. */
export interface TableLock {
  table: string;
  mode: SwapLockMode;
  /**
   * The table alone (LOCK TABLE ONLY): a lock of a partitioned table otherwise locks every partition too, so it
   * would wait for a stage reading another hour's partition.
   */
  only?: boolean;
}

/** This session's lock_timeout in milliseconds, 0 for none: LOCK_TIMEOUT_MS on the bot's pools. */
export async function readLockTimeoutMs(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ ms: number }>(`SELECT setting::int AS ms FROM pg_settings WHERE name = 'lock_timeout'`);
  return rows[0]?.ms ?? 0;
}

const LOCK_TRY = 'bf_swap_locks';

/** Gives back everything since the savepoint `name` and the savepoint itself, in one round trip. */
const undoSince = (name: string) => `ROLLBACK TO SAVEPOINT ${name}; RELEASE SAVEPOINT ${name}`;

/**
 * One try at taking `locks`, in their order, each waiting at most `waitMs`. Either every one is held (to the
 * commit), or none of this try's is: a lock not granted in time rolls the try back to its savepoint, which
 * withdraws the queued request too, so nobody waits behind it any more; `waitingOn` names that table. The
 * session's own lock_timeout (`restoreMs`, readLockTimeoutMs) is back as it was either way (a SET LOCAL in a
 * savepoint outlives its release).
 *
 * PERF: a publish by swap makes three or four tries; each is two round trips besides its LOCKs (the savepoint
 * with its timeout, and the timeout given back with the release, each one simple-protocol string of two
 * statements), not five. The timeouts are integers this module formats, never outside text.
 */
export async function tryTableLocks(tx: Queryable, locks: readonly TableLock[], waitMs: number, options: { release?: boolean; restoreMs: number }): Promise<{ held: true } | { held: false; waitingOn: string }> {
  await tx.query(`SAVEPOINT ${LOCK_TRY}; SET LOCAL lock_timeout = '${wholeMs(Math.max(1, waitMs))}ms'`);
  for (const lock of locks) {
    try {
      await tx.query(`LOCK TABLE ${lock.only ? 'ONLY ' : ''}${lock.table} IN ${lock.mode} MODE`);
    } catch (error) {
      if (!hasSqlState(error, SqlState.LockNotAvailable)) throw error;
      await tx.query(undoSince(LOCK_TRY));
      return { held: false, waitingOn: lock.table };
    }
  }
  // A probe (release) only asks whether the locks can be had now, and gives them back at once.
  if (options.release) await tx.query(undoSince(LOCK_TRY));
  else await tx.query(`SET LOCAL lock_timeout = '${wholeMs(options.restoreMs)}ms'; RELEASE SAVEPOINT ${LOCK_TRY}`);
  return { held: true };
}

/** A non-negative whole number of milliseconds, as a setting's text takes it. */
function wholeMs(ms: number): number {
  if (!Number.isFinite(ms) || ms < 0) throw new Error(`not a lock timeout: ${ms} ms`);
  return Math.ceil(ms);
}

const PUBLISH_TRY = 'bf_swap_publish';

/** A savepoint before a publish by swap locks the target: undoPublishTry gives back all it did and took since. */
export async function beginPublishTry(tx: Queryable): Promise<void> {
  await tx.query(`SAVEPOINT ${PUBLISH_TRY}`);
}

export async function keepPublishTry(tx: Queryable): Promise<void> {
  await tx.query(`RELEASE SAVEPOINT ${PUBLISH_TRY}`);
}

export async function undoPublishTry(tx: Queryable): Promise<void> {
  await tx.query(undoSince(PUBLISH_TRY));
}

/** The target's default partition (qualified, quoted), when it has one: DETACH and ATTACH both lock it ACCESS EXCLUSIVE. */
export async function findDefaultPartition(db: Queryable, store: RowStore): Promise<string | undefined> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_partitioned_table p
     JOIN pg_class c ON c.oid = p.partdefid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.partrelid = to_regclass($1::text)`, [store.target]);
  return rows[0]?.name;
}

/** A partition of the target holding exactly one hour: schema and name unquoted, `qualified` quoted. */
export interface HourPartition {
  schema: string;
  name: string;
  qualified: string;
}

/**
 * The catalog changes of a swap, in one transaction: detach `out`, move it to `outTo`, give `inTable` its
 * schema and name, attach it for the hour. ATTACH skips its scan when the table's CHECK holds the hour. The
 * caller holds every lock these take (swap.ts, "Locks"), so none of them waits: DETACH takes ACCESS EXCLUSIVE
 * on the target, `out`, its indexes and the default partition; SET SCHEMA and RENAME ACCESS EXCLUSIVE on the
 * table moved; ATTACH SHARE UPDATE EXCLUSIVE on the target and its indexes, ACCESS EXCLUSIVE on `inTable` and
 * the default partition (PostgreSQL 15 and 18 alike). An index is only reached through its table's lock.
 */
export async function swapTables(tx: Queryable, store: RowStore, move: { out: HourPartition; outTo: { schema: string; name: string }; inTable: string; hour: Date; next: Date }): Promise<void> {
  const { out, outTo, inTable, hour, next } = move;
  await tx.query(`ALTER TABLE ${store.target} DETACH PARTITION ${out.qualified}`);
  if (outTo.schema !== out.schema) await tx.query(`ALTER TABLE ${out.qualified} SET SCHEMA ${quoteIdent(outTo.schema)}`);
  await tx.query(`ALTER TABLE ${quoteIdent(outTo.schema)}.${quoteIdent(out.name)} RENAME TO ${quoteIdent(outTo.name)}`);
  const inName = await relationName(tx, inTable);
  if (inName.schema !== out.schema) await tx.query(`ALTER TABLE ${inTable} SET SCHEMA ${quoteIdent(out.schema)}`);
  await tx.query(`ALTER TABLE ${quoteIdent(out.schema)}.${quoteIdent(inName.name)} RENAME TO ${quoteIdent(out.name)}`);
  await tx.query(`ALTER TABLE ${store.target} ATTACH PARTITION ${out.qualified} FOR VALUES FROM (${hourLiteral(hour)}) TO (${hourLiteral(next)})`);
}

async function relationName(db: Queryable, table: string): Promise<{ schema: string; name: string }> {
  const { rows } = await db.query<{ schema: string; name: string }>(
    'SELECT n.nspname AS schema, c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1::text)', [table]);
  const row = rows[0];
  if (!row) throw new BackfillError(ErrorCode.StepFailed, `${table} does not exist: it was dropped since it was staged. Nothing was changed.`);
  return row;
}

/**
 * Rows of the live partition that were neither there when it was staged (the baseline keys, `baseline`) nor
 * produced by the step: written since by normal ingestion. They go into the staged table, so the published
 * generation keeps them. Returns how many.
 */
export async function carryLateRowsIntoStaged(tx: Queryable, store: RowStore, run: [number, number, Date], tables: { live: string; staged: string; baseline: string }): Promise<number> {
  const { live, staged, baseline } = tables;
  const late = await tx.query(
    `INSERT INTO ${staged} (${store.columns.join(', ')})
     SELECT ${store.columns.map((column) => `p.${column}`).join(', ')} FROM ${tableSource(store, live, 'p')}
       AND NOT EXISTS (SELECT 1 FROM ${baseline} b WHERE ${keysEqual(store, 'b', 'p')})
       AND NOT EXISTS (SELECT 1 FROM ${staged} s WHERE ${keysEqual(store, 's', 'p')})`, run);
  return late.rowCount ?? 0;
}

/** The live partition `live` against the baseline kept with row versions when it was staged (versionsAgainstBaseline). */
export async function liveChangesSince(tx: Queryable, store: RowStore, run: [number, number, Date], tables: { live: string; baseline: string }): Promise<VersionChanges> {
  const versioned = `SELECT ${store.keys.map((key) => `t.${key}`).join(', ')}, t.xmin AS bf_xmin FROM ${tableSource(store, tables.live)}`;
  const { rows } = await tx.query<VersionChanges>(versionsAgainstBaseline(store, versioned, tables.baseline), run);
  const row = rows[0];
  if (!row) throw new Error('the live partition\'s changes returned no row');
  return row;
}

/** Whether the live partition `live` holds exactly the rows staging counted in its snapshot (versionsSinceSnapshot): one scan of it. */
export async function liveUnchangedSince(tx: Queryable, store: RowStore, run: [number, number, Date], live: string, counted: CountedAtStaging): Promise<boolean> {
  const { rows } = await tx.query<VersionsSince>(`SELECT ${versionsSinceSnapshot('t.xmin', '$4', '$5')} FROM ${tableSource(store, live)}`, [...run, counted.snapshotXmin, counted.versionsSeen]);
  const row = rows[0];
  if (!row) throw new Error('the live partition\'s count returned no row');
  return sameRowsSince(row, counted);
}

/**
 * Rows of the live partition written after a publish by swap (neither written by it nor replaced by it): carried
 * into the saved partition before it is swapped back in, so they stay live. Returns how many.
 */
export async function carryLateRowsIntoSaved(tx: Queryable, store: RowStore, run: [number, number, Date], tables: { live: string; saved: string; written: string }): Promise<number> {
  const { live, saved, written } = tables;
  const late = await tx.query(
    `INSERT INTO ${saved} (${store.columns.join(', ')})
     SELECT ${store.columns.map((column) => `t.${column}`).join(', ')} FROM ${tableSource(store, live)}
       AND NOT EXISTS (SELECT 1 FROM ${written} w WHERE ${keysEqual(store, 'w', 't')})
       AND NOT EXISTS (SELECT 1 FROM ${saved} p WHERE ${keysEqual(store, 'p', 't')})`, run);
  return late.rowCount ?? 0;
}

export async function countRows(db: Queryable, table: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return rows[0]?.n ?? 0;
}

/**
 * Tables of this backfill's runs still in the store and not attached: what retention drops with its rows of
 * that kind (scratch: the staged live keys; undo: a swap's staged, saved and swapped-out tables and written
 * keys, and a rewrite's staged and saved tables of their own).
 */
export async function detachedTablesOf(db: Queryable, pipeline: string, backfillId: number, kind: 'scratch' | 'undo'): Promise<string[]> {
  const suffix = kind === 'scratch' ? 'g[0-9]+_baseline' : '(g[0-9]+(_staged|_saved)?|saved|rolledback|written)';
  const { rows } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = $1::text AND c.relkind = 'r' AND NOT c.relispartition AND c.relname ~ ('^p[0-9]{10}_b' || $2::bigint || '_' || $3::text || '$')
     ORDER BY c.relname`, [`bf_${pipeline}`, backfillId, suffix]);
  return rows.map((row) => row.name);
}

/**
 * Live rows of the partition whose key a publish by swap wrote (the keys it recorded, `written`) or replaced
 * (the saved partition's): what a rollback compares against the published checksum and swaps out. Run
 * parameters as usual.
 */
export function writtenBySwap(store: RowStore, swapped: { savedTable: string; writtenTable: string }): RowSource {
  return `${liveSource(store)}
    AND (EXISTS (SELECT 1 FROM ${swapped.writtenTable} w WHERE ${keysEqual(store, 'w', 't')})
      OR EXISTS (SELECT 1 FROM ${swapped.savedTable} p WHERE ${keysEqual(store, 'p', 't')}))`;
}

/**
 * What another writer did to the rows a publish by swap wrote: rows whose version is not the one the publish
 * wrote (changed: keepKeysIn's bf_xmin), written keys no longer live (removed), and keys it replaced written
 * again (added), a few of each. Only read when the checksum says something differs.
 */
export async function keysChangedSinceSwap(db: Queryable, store: RowStore, run: [number, number, Date], swapped: { savedTable: string; writtenTable: string }): Promise<{ changed: number; removed: number; added: number; sample: { key: string; how: 'changed' | 'removed' | 'added' }[] }> {
  // A written table kept before row versions were (no bf_xmin): the checksum alone says something changed.
  if (!(await hasColumn(db, swapped.writtenTable, 'bf_xmin'))) return { changed: 0, removed: 0, added: 0, sample: [] };
  const byDifference = await hasColumn(db, swapped.writtenTable, 'bf_change');
  // The few keys named sort byte by byte: under a collation that ignores case, 'Us' and 'us' would tie, and which
  // of them a refusal names would depend on the order the rows were read in.
  const { rows } = await db.query<{ how: 'changed' | 'removed' | 'added'; n: number; sample: string[] }>(
    `WITH compared AS (${byDifference ? changedAgainstDifference(store, swapped) : changedAgainstKeys(store, swapped)})
     SELECT how, count(*)::int AS n, (array_agg(key ORDER BY key COLLATE "C"))[1:5] AS sample FROM compared GROUP BY how`, run);
  const of = (how: string) => rows.find((row) => row.how === how);
  return { changed: of('changed')?.n ?? 0, removed: of('removed')?.n ?? 0, added: of('added')?.n ?? 0, sample: rows.flatMap((row) => row.sample.map((key) => ({ key, how: row.how }))).slice(0, 5) };
}

const keyText = (store: RowStore, alias: string) => store.keys.map((key) => `${alias}.${key}::text`).join(` || ', ' || `);

/** keysChangedSinceSwap's rows (how, key) against a written table of every key with its row version. */
function changedAgainstKeys(store: RowStore, swapped: { savedTable: string; writtenTable: string }): string {
  return `SELECT 'changed' AS how, ${keyText(store, 't')} AS key FROM ${store.target} t JOIN ${swapped.writtenTable} w ON ${keysEqual(store, 'w', 't')}
       WHERE t.${store.partition} = $3::timestamptz AND NOT (t.xmin = w.bf_xmin)
       UNION ALL
       SELECT 'removed' AS how, ${keyText(store, 'w')} AS key FROM ${swapped.writtenTable} w
       WHERE NOT EXISTS (SELECT 1 FROM ${store.target} t WHERE t.${store.partition} = $3::timestamptz AND ${keysEqual(store, 'w', 't')})
       UNION ALL
       SELECT 'added', ${keyText(store, 't')} FROM ${liveSource(store)}
         AND EXISTS (SELECT 1 FROM ${swapped.savedTable} p WHERE ${keysEqual(store, 'p', 't')})
         AND NOT EXISTS (SELECT 1 FROM ${swapped.writtenTable} w WHERE ${keysEqual(store, 'w', 't')})`;
}

/**
 * The same rows against a written table by difference (createWrittenByDifference): a key was written when the saved
 * table has it and it was not dropped, or when it was added; every row written carries the version row's xmin. A
 * key saved and not written is a dropped one, so a live key "written again" is a live dropped key. Read, as a rollback
 * reads it, before any late row is carried into the saved table (lockForRestore checks, then carries).
 */
function changedAgainstDifference(store: RowStore, swapped: { savedTable: string; writtenTable: string }): string {
  const w = swapped.writtenTable;
  const keyIn = (alias: string, change: 'added' | 'dropped') => `EXISTS (SELECT 1 FROM ${w} d WHERE d.bf_change = '${change}' AND ${keysEqual(store, 'd', alias)})`;
  const live = (alias: string) => `EXISTS (SELECT 1 FROM ${store.target} t WHERE t.${store.partition} = $3::timestamptz AND ${keysEqual(store, alias, 't')})`;
  const saved = (alias: string) => `EXISTS (SELECT 1 FROM ${swapped.savedTable} p WHERE p.${store.partition} = $3::timestamptz AND ${keysEqual(store, 'p', alias)})`;
  return `SELECT 'changed' AS how, ${keyText(store, 'l')} AS key FROM ${liveSource(store, 'l')}
         AND NOT (l.xmin = (SELECT v.bf_xmin FROM ${w} v WHERE v.bf_change = 'version'))
         AND ((${saved('l')} AND NOT ${keyIn('l', 'dropped')}) OR ${keyIn('l', 'added')})
       UNION ALL
       SELECT 'removed', ${keyText(store, 's')} FROM ${tableSource(store, swapped.savedTable, 's')} AND NOT ${keyIn('s', 'dropped')} AND NOT ${live('s')}
       UNION ALL
       SELECT 'removed', ${keyText(store, 'a')} FROM ${w} a WHERE a.bf_change = 'added' AND NOT ${live('a')}
       UNION ALL
       SELECT 'added', ${keyText(store, 'l')} FROM ${liveSource(store, 'l')} AND ${keyIn('l', 'dropped')}`;
}

async function hasColumn(db: Queryable, table: string, column: string): Promise<boolean> {
  const { rows } = await db.query<{ present: boolean }>(
    'SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1::text) AND attname = $2::name AND NOT attisdropped) AS present', [table, column]);
  return rows[0]?.present ?? false;
}

/** The step's rows for the hour into a table of its own: the pipeline's step query, through the one door for catalog SQL. */
export async function insertStepRowsInto(tx: Queryable, store: RowStore, table: string, hour: Date): Promise<void> {
  await runPipelineSql(tx, `INSERT INTO ${table} (${store.stepColumns.join(', ')}) SELECT q.* FROM ${stepRows(store)}`, [hour]);
}
