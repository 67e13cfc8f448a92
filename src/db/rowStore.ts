import { quoteIdent, type Queryable } from './pool.js';
import { prepared } from './prepared.js';

/*
 * A backfill's rows, kept in tables shaped like the pipeline's target, in a schema of the bot's own per
 * pipeline (bf_<pipeline>): rows are staged, saved, compared and restored by statements inside PostgreSQL on
 * typed key columns, never as JSON and never through Node.
 *
 *   staged    the step's output per partition, before it is published (bf_backfill, bf_generation, <target>),
 *             for small hours: a larger one's run keeps its own of the same shape (src/core/recompute/storeTables.ts)
 *   saved     exactly the rows a publish by rewrite deleted: what a rollback restores (same shape, likewise)
 *   baseline  the live keys when the partition was staged, for hours staged before each run's hour kept them
 *             in a table of its own (src/core/recompute/storeTables.ts); read for those only
 *   expected  the keys and measure the preview showed: the announced envelope
 *
 * A publish by swap keeps its staged rows and keys in tables of their own instead (src/core/recompute/swap.ts),
 * a rewrite of an hour that is not small its staged and saved rows, and every run keeps its baseline in one (src/core/recompute/storeTables.ts). The store's names and columns are
 * built once (rowStoreOf, src/core/recompute/rowStore.ts), quoted, from the pipeline's catalog row.
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
  /** Those of them whose `=` holds exactly when their text is the same (describeTableColumns), quoted. */
  exact: ReadonlySet<string>;
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

/** A table's columns (unquoted), in table order, and those of them that compare exactly (see `exact` of RowStore). */
export interface TableColumns {
  columns: string[];
  exact: string[];
}

/**
 * The table's columns, and which of them compare exactly: their `=` holds exactly when their text is the same, as
 * comparing rows as text meant: integers, booleans, dates and times, uuid, bytea, numeric of a fixed scale, text
 * under a deterministic collation. The others (json has no `=`; 1.0 = 1.00 in an unconstrained numeric, -0 = 0,
 * '1 day' = '24 hours', 'A' = 'a' under a case-insensitive collation) are compared and checksummed by their text.
 */
export async function describeTableColumns(db: Queryable, table: string): Promise<TableColumns> {
  const { rows } = await db.query<{ name: string; exact: boolean }>(
    prepared(`SELECT a.attname AS name,
            (a.atttypid = ANY ('{int2,int4,int8,bool,date,time,timestamp,timestamptz,uuid,bytea}'::regtype[])
             OR (a.atttypid = 'numeric'::regtype AND a.atttypmod <> -1)
             OR (a.atttypid = ANY ('{text,varchar}'::regtype[]) AND coalesce(c.collisdeterministic, true))) AS exact
     FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation
     WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`),
    [table]);
  return { columns: rows.map((row) => row.name), exact: rows.filter((row) => row.exact).map((row) => row.name) };
}

/** Serializes the store's DDL for the pipeline until the end of the caller's transaction. */
export async function lockRowStoreDdl(tx: Queryable, pipeline: string): Promise<void> {
  await tx.query(`SELECT pg_advisory_xact_lock(hashtextextended('row-store:' || $1::text, 0))`, [pipeline]);
}

/**
 * The store's schema and tables, where missing. Its tables are built from the target's own definition (LIKE),
 * with the columns the bot needs in front, and indexed on (backfill, generation, partition, key) for the joins
 * of reconciliation, publish and rollback.
 */
export async function createRowStoreTables(tx: Queryable, store: RowStore): Promise<void> {
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
  await keepKeysOnceInExpected(tx, store, index);
}

/**
 * The plan's rows of a backfill's hour carry bf_keys_once = true where no key of them repeats, which the unique
 * index below enforces (NULLs are distinct in it: the rows of an hour whose keys repeat carry NULL and are left
 * unconstrained). So `expected_keys_once` proves, for an hour previewed with true (previewPartition), that its plan
 * has each key once, and a measure need not count distinct keys to know it (reconcile.ts, measureStaged).
 *
 * Stores made before it have expected_by_key instead and rows of no flag (NULL: not proven); the column is added
 * only where missing, so that a store that has it takes no lock that would wait for another backfill's measure.
 */
async function keepKeysOnceInExpected(tx: Queryable, store: RowStore, index: string): Promise<void> {
  const { rows } = await tx.query(`SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'bf_keys_once' AND NOT attisdropped`, [store.expected]);
  if (rows.length > 0) return;
  await tx.query(`ALTER TABLE ${store.expected} ADD COLUMN bf_keys_once boolean CONSTRAINT expected_keys_once_true CHECK (bf_keys_once)`);
  await tx.query(`CREATE UNIQUE INDEX expected_keys_once ON ${store.expected} (bf_backfill, ${index}, bf_keys_once)`);
  await tx.query(`DROP INDEX IF EXISTS ${store.schema}.expected_by_key`);
}

/**
 * Whether two keys are equal exactly when their text is the same: every key column is one of `exact`. Otherwise
 * keys equal by `=` may be spelled apart ('EU' and 'eu' under a case-insensitive collation, 1.0 and 1.00 in an
 * unconstrained numeric), and a key must be read from the rows that carry the spelling meant.
 */
export function keysCompareExactly(store: RowStore): boolean {
  return store.keys.every((key) => store.exact.has(key));
}

/** `a.k1 = b.k1 AND a.k2 = b.k2 …` over the key columns (the partition is filtered on both sides already). */
export function keysEqual(store: RowStore, a: string, b: string): string {
  return store.keys.map((key) => `${a}.${key} = ${b}.${key}`).join(' AND ');
}

/**
 * The run a backfill stages under, in the store's bf_generation and in reconciliations.generation: a backfill has
 * one run (a re-stage replaces its rows), so it is always 1; the columns keep their names (migrations/0023).
 */
export const STAGED_RUN = 1;

/** The rows of one table of the store for a backfill's run and partition: $1 backfill, $2 run (STAGED_RUN), $3 hour. */
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

/**
 * Rows of the target's shape, as `FROM … WHERE …` over an alias (t unless given), with the parameters of a run:
 * $1 backfill, $2 run (STAGED_RUN), $3 partition hour. Each source types all three, whether it reads them or not,
 * so a statement may read any one source alone.
 */
export type RowSource = string;

// The live partition reads only the hour, and types the other two as every source does: a statement that reads
// it alone (a snapshot of the live rows) is otherwise refused ("could not determine data type of parameter $1").
export const liveSource = (store: RowStore, alias = 't'): RowSource =>
  `${store.target} ${alias} WHERE $1::bigint IS NOT NULL AND $2::int IS NOT NULL AND ${alias}.${store.partition} = $3::timestamptz`;
export const runSource = (store: RowStore, table: string, alias = 't'): RowSource =>
  `${table} ${alias} WHERE ${alias}.bf_backfill = $1::bigint AND ${alias}.bf_generation = $2::int AND ${alias}.${store.partition} = $3::timestamptz`;

/** The rows of a standalone table of the target's shape as a RowSource (the run's parameters kept typed). */
export function tableSource(store: RowStore, table: string, alias = 't'): RowSource {
  return `${table} ${alias} WHERE $1::bigint IS NOT NULL AND $2::int IS NOT NULL AND ${alias}.${store.partition} = $3::timestamptz`;
}

/** What other writers did to a partition's rows since it was staged, by key against the baseline's row versions. */
export interface VersionChanges {
  /** Keys the baseline does not have: rows written since (late rows). */
  added: number;
  /** Keys of the baseline in another row version: updated (or deleted and written again) since. */
  changed: number;
  /** Keys of the baseline no longer there. */
  gone: number;
}

/**
 * One row of VersionChanges: `versioned` (a query yielding the key columns and each row's version as bf_xmin)
 * against the baseline kept with row versions when the partition was staged (`baseline`, a table of keepKeysIn's
 * rowVersions), in one read of each, with the run's parameters. All three zero (nothingChanged) means the rows are
 * exactly those staging read: a row version's xmin is the transaction that wrote it, which committed before
 * staging read it and writes nothing more, and nothing but a new version changes a row. A key NULL or twice on a
 * side counts as added and gone, or as changed, never as unchanged.
 */
export function versionsAgainstBaseline(store: RowStore, versioned: string, baseline: string): string {
  const [first] = store.keys;
  if (!first) throw new Error('comparing row versions needs key columns');
  return `SELECT count(*) FILTER (WHERE b.${first} IS NULL)::int AS added,
            count(*) FILTER (WHERE v.${first} IS NOT NULL AND b.${first} IS NOT NULL AND NOT (v.bf_xmin = b.bf_xmin))::int AS changed,
            count(*) FILTER (WHERE v.${first} IS NULL)::int AS gone
     FROM (${versioned}) v
     FULL JOIN (SELECT ${store.keys.map((key) => `t.${key}`).join(', ')}, t.bf_xmin FROM ${tableSource(store, baseline)}) b ON ${keysEqual(store, 'v', 'b')}`;
}

export const nothingChanged = (changes: VersionChanges): boolean => changes.added === 0 && changes.changed === 0 && changes.gone === 0;

/**
 * What staging counted of the live rows (`rows`), the xmin of the snapshot it read them in (pg_snapshot_xmin, as
 * text) and the versions it read at or above that xmin (`versionsSeen`: the writers' transaction ids as bigint text,
 * versionsSeenAt; null where none were kept).
 */
export interface CountedAtStaging {
  snapshotXmin: string;
  rows: number;
  versionsSeen: readonly string[] | null;
}

/** versionsSinceSnapshot's figures: the rows, those whose version is at or above the snapshot's xmin and not seen by staging, and that xmin's age. */
export interface VersionsSince {
  rows: string;
  recent: string;
  horizon: number;
}

/**
 * The select list of VersionsSince over rows whose version (xmin) is `version`, the snapshot's xmin given as the
 * parameter `xminParam` and the versions staging saw above it as `seenParam` (bigint[], or NULL): whether they are
 * exactly the rows a statement of staging counted in that snapshot (sameRowsSince). A row version written below the
 * xmin was committed before the count and, being there still, was counted; so was one written by a transaction
 * whose versions staging read (versionsSeenAt), which had committed before the count and writes nothing more. When
 * every row is one of those, and there are as many as were counted, they are the same rows. Any other writer's
 * insert, update (a new version, even of the same values) or delete since shows as a version written at or above
 * the xmin by a transaction staging did not see, or as fewer rows. A version written below the xmin by a
 * transaction that was still running then cannot be: the snapshot's xmin is the oldest transaction running when it
 * was taken, and a subtransaction's id comes after its parent's (so a snapshot's list of running transactions, which
 * holds no subtransaction, would not do; the versions seen are read off rows the snapshot showed, so they hold only
 * committed writers, subtransactions included).
 *
 * xmin is 32 bits: age() places each version against the xmin from the transaction's own position, exactly while
 * the xmin is within 2³¹ transactions of it (past 2³⁰, sameRowsSince does not rely on it; below that no 32-bit id of
 * the versions seen can have come round again). A frozen version keeps its xmin (or reads FrozenTransactionId, age
 * 2³¹ - 1): at worst an old row reads as recent and the publish measures again.
 */
export function versionsSinceSnapshot(version: string, xminParam: string, seenParam: string): string {
  const xmin = `xid(${xminParam}::xid8)`;
  const seen = `coalesce(${version}::text::bigint = ANY(${seenParam}::bigint[]), false)`;
  return `count(*)::bigint AS rows, count(*) FILTER (WHERE age(${version}) <= age(${xmin}) AND NOT ${seen})::bigint AS recent, age(${xmin}) AS horizon`;
}

/**
 * The most versions above the snapshot's xmin staging keeps (versionsSeenAt). PERF: nearly always none: only rows
 * written after the server's oldest running transaction began. Past this many (a partition being written row by row
 * beside a long transaction), none are kept and a publish measures again as it did before they were.
 */
export const MAX_VERSIONS_SEEN = 256;

/**
 * An aggregate over rows whose version (xmin) is `version` (NULL where a join row has none): the distinct writers
 * of those at or above the statement's snapshot xmin, as bigint[] (xid has no ordering for DISTINCT), at most one
 * more than MAX_VERSIONS_SEEN of them (versionsKept tells). Read in the statement's snapshot, so each is a
 * committed writer.
 *
 * PERF: the snapshot's xmin is taken once, in a subquery (pg_current_snapshot() for each row cost 140 ms at
 * 1,000,000 rows; this adds about 50 ms there when no row is recent).
 */
export function versionsSeenAt(version: string): string {
  const recent = `age(${version}) <= (SELECT age(xid(pg_snapshot_xmin(pg_current_snapshot()))))`;
  return `coalesce((array_agg(DISTINCT ${version}::text::bigint) FILTER (WHERE ${recent}))[1:${MAX_VERSIONS_SEEN + 1}], '{}')`;
}

/** The versions versionsSeenAt read, as staging keeps them: null past MAX_VERSIONS_SEEN. */
export const versionsKept = (seen: string[]): string[] | null => (seen.length <= MAX_VERSIONS_SEEN ? seen : null);

export const sameRowsSince = (found: VersionsSince, counted: CountedAtStaging): boolean =>
  found.horizon >= 0 && found.horizon < 2 ** 30 && Number(found.recent) === 0 && Number(found.rows) === counted.rows;

/**
 * PERF: the store's tables are filled and joined inside one transaction, before any statistics exist for the
 * new rows (autovacuum may be off, and ANALYZE per partition would serialize the workers). With a nested loop
 * the planner's guess of one row turns a key join quadratic; a hash join is linear whatever the guess. Local to
 * the step's transaction: the dispatcher's queries keep the planner's full choice.
 */
export async function preferHashJoins(tx: Queryable): Promise<void> {
  await tx.query('SET LOCAL enable_nestloop = off');
}

/** One of the store's shared tables, by kind (retention measures and drops a backfill's rows in them). */
export type StoreTable = 'staged' | 'saved' | 'baseline' | 'expected';

function storeTable(pipeline: string, table: StoreTable): string {
  return `${quoteIdent(storeSchemaName(pipeline))}.${table}`;
}

/** A pipeline whose store was never created (no backfill of it since the typed store) has nothing stored. */
export async function storeTableExists(db: Queryable, pipeline: string, table: StoreTable): Promise<boolean> {
  const { rows } = await db.query<{ present: boolean }>('SELECT to_regclass($1::text) IS NOT NULL AS present', [storeTable(pipeline, table)]);
  return rows[0]?.present ?? false;
}

/** The backfill's rows in a shared table of the store, and their bytes (the rows' own size, without index). */
export async function measureStoredRows(db: Queryable, pipeline: string, table: StoreTable, backfillId: number): Promise<{ rows: number; bytes: number }> {
  const { rows } = await db.query<{ rows: number; bytes: number }>(
    `SELECT count(*)::bigint AS rows, coalesce(sum(pg_column_size(t.*)), 0)::bigint AS bytes FROM ${storeTable(pipeline, table)} t WHERE t.bf_backfill = $1::bigint`, [backfillId]);
  return { rows: rows[0]?.rows ?? 0, bytes: rows[0]?.bytes ?? 0 };
}

/** Deletes the backfill's rows of a shared table of the store; one statement deletes them and says how many bytes they were. */
export async function deleteStoredRows(db: Queryable, pipeline: string, table: StoreTable, backfillId: number): Promise<{ rows: number; bytes: number }> {
  const { rows } = await db.query<{ rows: number; bytes: number }>(
    `WITH gone AS (DELETE FROM ${storeTable(pipeline, table)} t WHERE t.bf_backfill = $1::bigint RETURNING pg_column_size(t.*) AS size)
     SELECT count(*)::bigint AS rows, coalesce(sum(size), 0)::bigint AS bytes FROM gone`, [backfillId]);
  return { rows: rows[0]?.rows ?? 0, bytes: rows[0]?.bytes ?? 0 };
}

/** The rows of a table of its own (qualified, quoted) and their bytes, counted as for the shared tables. */
export async function measureTable(db: Queryable, table: string): Promise<{ rows: number; bytes: number }> {
  const { rows } = await db.query<{ rows: number; bytes: number }>(`SELECT count(*)::bigint AS rows, coalesce(sum(pg_column_size(t.*)), 0)::bigint AS bytes FROM ${table} t`);
  return { rows: Number(rows[0]?.rows ?? 0), bytes: Number(rows[0]?.bytes ?? 0) };
}

/** Drops a table of the store (qualified, quoted). */
export async function dropStoreTable(db: Queryable, table: string): Promise<void> {
  await db.query(`DROP TABLE ${table}`);
}
