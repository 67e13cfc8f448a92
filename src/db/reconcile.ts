import type { Queryable } from './pool.js';
import { checksumOver, snapshotRows, type PartitionSnapshot } from './partitions.js';
import { rowText, versionsKept, versionsSeenAt, type RowSource, type RowStore } from './rowStore.js';

// The reconciliation statements of the write path: two sets of rows of one partition compared by the pipeline's
// stable key (staged against live, published against saved), and staged rows against the plan's envelope.

/** Two sets of rows of one partition compared by the pipeline's stable key. */
export interface Reconciliation {
  keysMissing: number;
  keysAdded: number;
  keysDuplicated: number;
  keysChanged: number;
  totalBefore: string;
  totalAfter: string;
}

/**
 * Keys missing from `after`, added in it, duplicated in it, and present in both with different rows; and the
 * measure's total on each side.
 *
 * PERF: one hash full join of the rows themselves on the typed key columns (linear whatever the statistics
 * say), comparing typed columns: grouping each side by key and comparing `ROW(…)::text` took 12.6× one
 * count-and-sum scan of both sides at 50,000 rows, this about 3×. The same statement proves that no key
 * repeats; only when one does (duplicates block a publish anyway) are both sides grouped by key as before.
 */
export async function reconcileByKey(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource): Promise<Reconciliation> {
  const joined = await joinBothSides(db, store, run, before, after, { snapshot: false, plan: false });
  return joined.unique ? joined.reconciliation : groupBothSides(db, store, run, before, after);
}

/** A reconciliation with what a snapshot of both sides would also have read: the rows before, and `after`'s rows, total and checksum. */
export interface ReconciledSnapshot {
  reconciliation: Reconciliation;
  beforeRows: number;
  after: PartitionSnapshot;
}

/**
 * reconcileByKey, and in the same statement the count of `before` and the snapshot of `after` (its rows, total
 * and rowsChecksum): what a publish measures of the rows it replaces and the rows it publishes.
 *
 * PERF: a publish compared the two sides, then counted the prior rows and took the snapshot of the new ones,
 * three reads of the partition; one join reads each side once. Where the join cannot be exact (a key twice or
 * NULL) the three statements run as before. test/core/onePass.test.ts holds the results equal to theirs.
 */
export async function reconcileWithSnapshot(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource): Promise<ReconciledSnapshot> {
  const joined = await joinBothSides(db, store, run, before, after, { snapshot: true, plan: false });
  if (joined.unique) return { reconciliation: joined.reconciliation, beforeRows: joined.beforeRows, after: joined.after };
  return measuredApart(db, store, run, before, after);
}

/**
 * reconcileWithSnapshot for a publish by rewrite, whose `after` (the live partition) holds every row it wrote
 * (`written`: its own INSERT's, which no other session sees, let alone changes, before it commits) and what other
 * writers committed after its DELETE's snapshot, nothing else. So exactly as many live rows as written are exactly the
 * written rows, whose checksum its INSERT took (writeRunRows); only when other writers' rows are there beside them
 * is the checksum taken again.
 *
 * PERF: the checksum sorts every row's text (about 75 ms at 50,000 rows); a publish took it twice, once over what
 * it wrote and once over the live partition, which are nearly always the same rows.
 */
export async function reconcileWritten(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource,
  written: { rows: number; checksum: string }): Promise<ReconciledSnapshot> {
  const joined = await joinBothSides(db, store, run, before, after, { snapshot: false, plan: false });
  if (!joined.unique) return measuredApart(db, store, run, before, after);
  const onlyWritten = Number(joined.after.rows) === written.rows;
  return {
    reconciliation: joined.reconciliation,
    beforeRows: joined.beforeRows,
    after: onlyWritten ? { ...joined.after, checksum: written.checksum } : await snapshotRows(db, store, after, run),
  };
}

/** Where the join cannot be exact (a key twice or NULL): the reconciliation grouped by key, the count and the snapshot, each a statement. */
async function measuredApart(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource): Promise<ReconciledSnapshot> {
  const counted = await db.query<{ n: number }>(`SELECT count(*)::bigint AS n FROM ${before}`, run);
  return {
    reconciliation: await groupBothSides(db, store, run, before, after),
    beforeRows: counted.rows[0]?.n ?? 0,
    after: await snapshotRows(db, store, after, run),
  };
}

/** What staging measures of a partition: its staged rows against the live ones, and against the plan's envelope. */
export interface StagedMeasure {
  reconciliation: Reconciliation;
  plan: AgainstPlan;
  /**
   * Where the join was exact: the live rows counted, the xmin of the snapshot they were read in and the versions it
   * read at or above it (versionsSeenAt; null past MAX_VERSIONS_SEEN), and with `snapshot` the staged rows' (with their checksum).
   */
  exact?: { liveRows: number; liveSnapshotXmin: string; liveVersionsSeen: string[] | null; staged?: PartitionSnapshot };
}

/**
 * reconcileByKey of the live rows against the staged ones, and againstPlan of the staged rows, in one statement:
 * every check staging makes of a partition (duplicate and missing keys, changed rows, both totals, the envelope),
 * and the live rows counted. `snapshot`: the same statement takes the staged rows' snapshot too, which a publish
 * by swap reads instead of measuring both sides again when nothing live changed since (swap.ts, measureSwap).
 *
 * `baseline`: the run's baseline table (made empty by the caller, keys only) and how to keep it whole. Where the
 * join is exact, the same statement puts into it the live keys the staged rows lack, read in the snapshot the
 * figures were: what a publish tells late rows by (live rows whose key is neither in the baseline nor staged, so
 * the live keys the staged rows have need no copy). Where it is not, `keepWhole` copies every live key with its row
 * version (as it did before any measure), and the two statements of the fallback measure after it.
 *
 * PERF: one join of the three sides (live, staged, the plan's keys) by key reads each once; the envelope was a
 * second read of the staged rows, at publish. Where the plan holds each key once (`keysOnce`, or `planKeysOnce`:
 * start kept it under expected_keys_once), it is no side of it: its fingerprint is compared with the staged rows'
 * (planByFingerprint), and joined apart only where they differ. Without NULL keys in the plan, the join of the two
 * other sides is exact exactly where the three-way one was. The baseline was a copy of every live key before the measure
 * (85 ms at 50,000 keys with four stages at once, 250-400 ms at 200,000); its missing keys are nearly always
 * none. Where the join cannot be exact (a key twice on a side, or NULL) the two statements run instead, and
 * nothing more is measured. test/core/onePass.test.ts holds the results equal to theirs.
 */
export async function measureStaged(db: Queryable, store: RowStore, run: [number, number, Date], live: RowSource, staged: RowSource,
  options: { snapshot?: boolean; baseline?: { table: string; keepWhole(): Promise<void> }; written?: string; keysOnce?: boolean; planKeysOnce?: boolean } = {}): Promise<StagedMeasure> {
  // Where the plan holds each key once, it is compared with the staged rows by fingerprint, not joined.
  const fingerprint = options.keysOnce || options.planKeysOnce ? await planFingerprint(db, store, run) : undefined;
  // A plan with a NULL key is joined as ever: the join of the other two sides would then be exact where the three-way one was not.
  const byFingerprint = fingerprint?.nullKeys === 0 ? fingerprint : undefined;
  const joined = await joinBothSides(db, store, run, live, staged, {
    snapshot: options.snapshot === true, plan: !byFingerprint, fingerprint: byFingerprint !== undefined, versionsSeen: true, missingKeysInto: options.baseline?.table,
    written: options.written === undefined ? undefined : { table: options.written, staged }, keysOnce: options.keysOnce === true,
  });
  // Not joined (byFingerprint): the fingerprints' figures, or where they differ the plan joined apart.
  const plan = joined.unique ? joined.plan ?? (byFingerprint && planByFingerprint(byFingerprint, joined)) ?? await againstPlan(db, store, run, staged) : undefined;
  if (plan) {
    return {
      reconciliation: joined.reconciliation, plan,
      exact: { liveRows: Number(joined.beforeRows), liveSnapshotXmin: joined.snapshotXmin, liveVersionsSeen: versionsKept(joined.versionsSeen ?? []), ...(options.snapshot ? { staged: joined.after } : {}) },
    };
  }
  await options.baseline?.keepWhole();
  return { reconciliation: await groupBothSides(db, store, run, live, staged), plan: await againstPlan(db, store, run, staged) };
}

interface JoinOptions {
  /** The snapshot of `after` (its checksum). */
  snapshot: boolean;
  /** The plan's rows of the partition joined as a third side, for againstPlan's figures. */
  plan: boolean;
  /** The fingerprint of `after`'s keys and measure, as planFingerprint takes the plan's (planRowHash). */
  fingerprint?: boolean;
  /** The versions of `before`'s rows at or above the snapshot's xmin (versionsSeenAt), as staging keeps them for its publish. */
  versionsSeen?: boolean;
  /** A table of the partition and key columns: where the join is exact, the keys of `before` that `after` lacks go into it (measureStaged). */
  missingKeysInto?: string | undefined;
  /**
   * With missingKeysInto, a written table by difference (createWrittenByDifference, src/db/swap.ts) and the staged
   * rows' source: where the join is exact, the keys `after` adds, those it drops and the staged rows' version go into it.
   */
  written?: { table: string; staged: RowSource } | undefined;
  /**
   * No key repeats on any side, as the caller proved (unique indexes: keysUniqueByIndexes, and the plan's
   * expected_keys_once): the join's rows are then one a key wherever no key column is NULL, and `unique` counts no
   * distinct keys. PERF: the count of distinct keys hashes every key once more, about 15% of the join at
   * 1,000,000 rows (docs/benchmark.md).
   */
  keysOnce?: boolean;
}

interface JoinedSides extends ReconciledSnapshot {
  unique: boolean;
  plan?: AgainstPlan;
  /** With `fingerprint`: the sum of planRowHash over `after`'s rows. */
  fingerprint?: string;
  /** pg_snapshot_xmin of the statement's snapshot: every transaction below it had finished when the sides were read. */
  snapshotXmin: string;
  /** With `versionsSeen`: the writers of `before`'s rows at or above that xmin (versionsSeenAt: at most MAX_VERSIONS_SEEN + 1). */
  versionsSeen?: string[];
}

type JoinedRow = Reconciliation & AgainstPlan & { unique: boolean; beforeRows: number; afterRows: number; checksum: string | null; snapshotXmin: string; versionsSeen: string[]; fingerprint: string };

/** The one join of the sides (joinedRows): exact when `unique`; the snapshot's checksum and the plan's figures only when asked for. */
async function joinBothSides(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource, options: JoinOptions): Promise<JoinedSides> {
  const { rows } = await db.query<JoinedRow>(joinedRows(store, before, after, options), run);
  const joined = rows[0];
  if (!joined) throw new Error('reconciliation returned no row');
  const { unique, beforeRows, afterRows, checksum, snapshotXmin, versionsSeen, fingerprint, lost, stagedKnown, expected, added, planned, stagedRows, stagedTotal, ...reconciliation } = joined;
  return {
    unique, snapshotXmin, reconciliation, ...(options.versionsSeen ? { versionsSeen } : {}), ...(options.fingerprint ? { fingerprint } : {}),
    beforeRows, after: { rows: afterRows, total: reconciliation.totalAfter, checksum: checksum ?? '' },
    ...(options.plan ? { plan: { lost, stagedKnown, expected, added, planned, stagedRows, stagedTotal } } : {}),
  };
}

async function groupBothSides(db: Queryable, store: RowStore, run: [number, number, Date], before: RowSource, after: RowSource): Promise<Reconciliation> {
  const grouped = await db.query<Reconciliation>(groupedByKey(store, before, after), run);
  const row = grouped.rows[0];
  if (!row) throw new Error('reconciliation returned no row');
  return row;
}

/**
 * The rows joined directly, and with `plan` the plan's rows of the partition as a third side (`e`, joined to
 * whichever of the two has the key). `unique` holds when no key column is NULL on any side and there are as many
 * join rows as distinct keys (or, with `keysOnce`, no side can hold a key twice): then each join row is one key,
 * and every count and total below is exact; a side is present in a join row where its first key column is not NULL.
 */
function joinedRows(store: RowStore, before: RowSource, after: RowSource, options: JoinOptions): string {
  const { exact } = store;
  const [first] = store.keys;
  if (!first) throw new Error('a reconciliation needs key columns');
  const either = store.keys.map((key) => `coalesce(a.${key}, b.${key}${options.plan ? `, e.${key}` : ''})`);
  const distinctKeys = store.keys.length === 1 ? `count(DISTINCT ${either[0]})` : `count(DISTINCT ROW(${either.join(', ')}))`;
  const noNullKey = `count(*) FILTER (WHERE ${either.map((key) => `${key} IS NULL`).join(' OR ')}) = 0`;
  const unique = options.keysOnce ? noNullKey : `count(*) = ${distinctKeys} AND ${noNullKey}`;
  // Keys and the partition are equal on both sides of a join row by `=`, which is exact for these types.
  const compared = store.columns.filter((column) => !(exact.has(column) && (column === store.partition || store.keys.includes(column))));
  const imaged = compared.filter((column) => !exact.has(column));
  const differs = [
    ...compared.filter((column) => exact.has(column)).map((column) => `a.${column} IS DISTINCT FROM b.${column}`),
    ...(imaged.length > 0 ? [`ROW(${imaged.map((c) => `a.${c}`).join(', ')})::record *<> ROW(${imaged.map((c) => `b.${c}`).join(', ')})::record`] : []),
  ];
  const [inA, inB, inE] = ['a', 'b', 'e'].map((side) => `${side}.${first} IS NOT NULL`);
  const [notA, notB, notE] = ['a', 'b', 'e'].map((side) => `${side}.${first} IS NULL`);
  const measure = `b.${store.measure}`;
  const planned = options.plan
    ? `count(*) FILTER (WHERE ${inE} AND ${notB})::int AS lost,
            coalesce(sum(${measure}) FILTER (WHERE ${inE} AND ${inB}), 0)::numeric(18,2)::text AS "stagedKnown",
            coalesce(sum(e.bf_measure), 0)::numeric(18,2)::text AS expected,
            count(*) FILTER (WHERE ${inB} AND ${notE})::int AS added,
            count(e.${first})::int AS planned,
            count(b.${first})::int AS "stagedRows",
            coalesce(sum(${measure}), 0)::numeric(18,2)::text AS "stagedTotal",`
    : '';
  const planSide = options.plan
    ? `FULL JOIN (SELECT ${store.keys.map((key) => `t.${key}`).join(', ')}, t.bf_measure
                  FROM ${store.expected} t WHERE t.bf_backfill = $1::bigint AND t.${store.partition} = $3::timestamptz) e
       ON ${store.keys.map((key) => `e.${key} = coalesce(a.${key}, b.${key})`).join(' AND ')}`
    : '';
  const figures = `count(*) FILTER (WHERE ${inA} AND ${notB})::int AS "keysMissing",
            count(*) FILTER (WHERE ${inB} AND ${notA})::int AS "keysAdded",
            0 AS "keysDuplicated",
            count(*) FILTER (WHERE ${inA} AND ${inB} AND (${differs.join(' OR ') || 'false'}))::int AS "keysChanged",
            coalesce(sum(a.${store.measure}), 0)::numeric(18,2)::text AS "totalBefore",
            coalesce(sum(b.${store.measure}), 0)::numeric(18,2)::text AS "totalAfter",
            ${planned}
            ${unique} AS "unique",
            count(a.${first})::bigint AS "beforeRows",
            count(b.${first})::bigint AS "afterRows",
            ${options.snapshot ? checksumOver('b', store, inB) : 'NULL::text'} AS checksum,
            pg_snapshot_xmin(pg_current_snapshot())::text AS "snapshotXmin"${options.versionsSeen ? `,
            ${versionsSeenAt('a.bf_xmin')} AS "versionsSeen"` : ''}${options.fingerprint ? `,
            coalesce(sum(${planRowHash(store, 'b', `b.${store.measure}`)}) FILTER (WHERE ${inB}), 0)::text AS fingerprint` : ''}`;
  const from = `FROM (SELECT t.*${options.versionsSeen ? ', t.xmin AS bf_xmin' : ''} FROM ${before}) a FULL JOIN (SELECT t.* FROM ${after}) b ON ${store.keys.map((key) => `a.${key} = b.${key}`).join(' AND ')}
     ${planSide}`;
  if (!options.missingKeysInto) return `SELECT ${figures}\n     ${from}`;
  return keepingMissingKeys(store, figures, from, { table: options.missingKeysInto, plan: options.plan, fingerprint: options.fingerprint === true, versionsSeen: options.versionsSeen === true, missing: `${inA} AND ${notB}`, added: `${inB} AND ${notA}`, written: options.written });
}

/**
 * joinedRows' figures, and the keys of `a` (the live side) that `b` lacks into `into.table` where the join is exact,
 * in the same statement and so the same snapshot. They ride along as one array a column (none: NULL), unnested
 * into the table only where `unique` holds; the figures alone come back. An array holds at most 1 GB: some 130
 * million bigint keys missing from one partition's staged rows.
 *
 * With `into.written`, the same statement fills the written table by difference: the keys `b` adds (a second set of
 * arrays), the keys it drops (those same missing keys) and the row version every staged row carries (one INSERT of
 * one statement writes them all, so one xmin; read from any one row). What a swap writes is the live keys less the
 * dropped ones and with the added ones, which are nearly always none: a copy of every staged key was some 10% of a
 * stage's time on the server.
 */
function keepingMissingKeys(store: RowStore, figures: string, from: string,
  into: { table: string; plan: boolean; fingerprint: boolean; versionsSeen: boolean; missing: string; added: string; written?: { table: string; staged: RowSource } | undefined }): string {
  const kept = [store.partition, ...store.keys];
  // `missing`: the join rows of a key in `a` and not in `b`, as keysMissing counts them; `added`, as keysAdded.
  const arrays = kept.map((column, n) => `array_agg(a.${column}) FILTER (WHERE ${into.missing}) AS bf_missing_${n}`);
  const addedArrays = into.written ? kept.map((column, n) => `array_agg(b.${column}) FILTER (WHERE ${into.added}) AS bf_added_${n}`) : [];
  const columns = kept.map((_column, n) => `k.c${n}`).join(', ');
  const unnested = (prefix: string) => `unnest(${kept.map((_column, n) => `m.${prefix}_${n}`).join(', ')}) AS k(${kept.map((_column, n) => `c${n}`).join(', ')})`;
  const written = into.written
    ? `, written AS (
       INSERT INTO ${into.written.table} (${kept.join(', ')}, bf_xmin, bf_change)
       SELECT ${columns}, NULL::xid, 'added' FROM measured m, ${unnested('bf_added')} WHERE m."unique"
       UNION ALL
       SELECT ${columns}, NULL::xid, 'dropped' FROM measured m, ${unnested('bf_missing')} WHERE m."unique"
       UNION ALL
       SELECT ${kept.map(() => 'NULL').join(', ')}, (SELECT t.xmin FROM ${into.written.staged} LIMIT 1), 'version' FROM measured m WHERE m."unique"
     )`
    : '';
  return `WITH measured AS (
       SELECT ${figures}, ${[...arrays, ...addedArrays].join(', ')}
       ${from}
     ), kept AS (
       INSERT INTO ${into.table} (${kept.join(', ')})
       SELECT ${columns}
       FROM measured m, ${unnested('bf_missing')}
       WHERE m."unique"
     )${written}
     SELECT ${Object.entries(FIGURES).filter(([, from]) => from === 'join' || (from === 'plan' && into.plan) || (from === 'fingerprint' && into.fingerprint) || (from === 'versions' && into.versionsSeen)).map(([name]) => `m."${name}"`).join(', ')} FROM measured m`;
}

/**
 * Where each figure joinedRows selects comes from: every join, the plan's side (with `plan`), or the versions of
 * the live rows (with `versionsSeen`). A Record of JoinedRow's keys, so a figure added to JoinedRow and not here
 * fails the typecheck.
 */
const FIGURES: Record<keyof JoinedRow, 'join' | 'plan' | 'fingerprint' | 'versions'> = {
  keysMissing: 'join', keysAdded: 'join', keysDuplicated: 'join', keysChanged: 'join', totalBefore: 'join', totalAfter: 'join',
  unique: 'join', beforeRows: 'join', afterRows: 'join', checksum: 'join', snapshotXmin: 'join', versionsSeen: 'versions', fingerprint: 'fingerprint',
  lost: 'plan', stagedKnown: 'plan', expected: 'plan', added: 'plan', planned: 'plan', stagedRows: 'plan', stagedTotal: 'plan',
};

/** Each side grouped by its typed key columns, then one full join on them: duplicate keys count once per key. */
function groupedByKey(store: RowStore, before: RowSource, after: RowSource): string {
  const keys = store.keys.map((key) => `t.${key}`).join(', ');
  const side = (source: RowSource) =>
    `SELECT ${keys}, count(*) AS n, sum(t.${store.measure}) AS total, min(${rowText(store, 't')}) AS r FROM ${source} GROUP BY ${keys}`;
  return `SELECT count(*) FILTER (WHERE b.n IS NULL)::int AS "keysMissing",
            count(*) FILTER (WHERE a.n IS NULL)::int AS "keysAdded",
            count(*) FILTER (WHERE b.n > 1)::int AS "keysDuplicated",
            count(*) FILTER (WHERE a.n IS NOT NULL AND b.n IS NOT NULL AND a.r IS DISTINCT FROM b.r)::int AS "keysChanged",
            coalesce(sum(a.total), 0)::numeric(18,2)::text AS "totalBefore",
            coalesce(sum(b.total), 0)::numeric(18,2)::text AS "totalAfter"
     FROM (${side(before)}) a FULL JOIN (${side(after)}) b USING (${store.keys.join(', ')})`;
}

export interface AgainstPlan {
  /** Rows the plan showed whose key the staged data no longer has. */
  lost: number;
  /** The staged measure over the keys the plan showed, and what the plan said for them. */
  stagedKnown: string;
  expected: string;
  /** Keys the staged data has that the plan did not: source rows that landed since (allowed, reported). */
  added: number;
  planned: number;
  stagedRows: number;
  stagedTotal: string;
}

/**
 * The plan's rows of the partition as one figure, besides their count and total: the sum of a 64-bit hash of each
 * row's key and measure (planRowHash), which the one join takes of the staged rows too. `nullKeys`: plan rows with a
 * NULL key column, which the join would not match.
 */
interface PlanFingerprint {
  planned: number;
  expected: string;
  fingerprint: string;
  nullKeys: number;
}

async function planFingerprint(db: Queryable, store: RowStore, run: [number, number, Date]): Promise<PlanFingerprint> {
  const { rows } = await db.query<PlanFingerprint>(
    `SELECT count(*)::int AS planned, coalesce(sum(e.bf_measure), 0)::numeric(18,2)::text AS expected,
            coalesce(sum(${planRowHash(store, 'e', 'e.bf_measure')}), 0)::text AS fingerprint,
            count(*) FILTER (WHERE ${store.keys.map((key) => `e.${key} IS NULL`).join(' OR ')})::int AS "nullKeys"
     FROM ${store.expected} e WHERE e.bf_backfill = $1::bigint AND e.${store.partition} = $2::timestamptz`, [run[0], run[2]]);
  const row = rows[0];
  if (!row) throw new Error('the plan\'s fingerprint returned no row');
  return row;
}

/**
 * A row's key and measure, hashed by their types' own hash functions (which agree with their \`=\`: equal values, as
 * 1.5 and 1.50, hash alike) and mixed as rowsChecksum mixes its rows' hashes (src/db/partitions.ts).
 */
function planRowHash(store: RowStore, alias: string, measure: string): string {
  return `hashint8extended(hash_record_extended(ROW(${store.keys.map((key) => `${alias}.${key}`).join(', ')}, (${measure})::numeric), 0), 0)`;
}

/**
 * againstPlan's figures without joining the plan, where each side holds each key once (the plan as proven, the
 * staged rows as the join found them): a plan of no rows, or as
 * many rows as staged with the same fingerprint (the same keys with the same measures, but with a chance of 2⁻⁶⁴,
 * as rowsChecksum). Undefined otherwise: the plan and the staged rows differ, and againstPlan tells how.
 *
 * PERF: the plan's rows were a third side of staging's one join, which then needed twice the time of the join of
 * the live and staged rows alone: at 1,000,000 rows in psql 2.25–2.59 s, against 1.45–1.54 s for those two with
 * the staged rows' fingerprint and 0.21–0.23 s for the plan's (docs/benchmark.md).
 */
function planByFingerprint(plan: PlanFingerprint, joined: JoinedSides): AgainstPlan | undefined {
  const staged = { stagedRows: Number(joined.after.rows), stagedTotal: joined.reconciliation.totalAfter };
  if (plan.planned === 0) return { lost: 0, stagedKnown: '0.00', expected: '0.00', added: staged.stagedRows, planned: 0, ...staged };
  if (plan.planned !== staged.stagedRows || plan.fingerprint !== joined.fingerprint) return undefined;
  return { lost: 0, stagedKnown: staged.stagedTotal, expected: plan.expected, added: 0, planned: plan.planned, ...staged };
}

/** Staged data against the rows the plan's preview showed (the announced envelope), by key. */
export async function againstPlan(db: Queryable, store: RowStore, run: [number, number, Date], staged: RowSource): Promise<AgainstPlan> {
  // PERF: one full join on the typed keys (hash or merge), not correlated EXISTS per row: at 50,000 rows a
  // partition the correlated form took over half a minute with no statistics on the new rows.
  const keys = store.keys.map((key) => `t.${key}`).join(', ');
  const { rows } = await db.query<AgainstPlan>(
    `SELECT count(*) FILTER (WHERE e.planned AND s.staged IS NULL)::int AS lost,
            coalesce(sum(s.measure) FILTER (WHERE e.planned AND s.staged), 0)::numeric(18,2)::text AS "stagedKnown",
            coalesce(sum(e.measure), 0)::numeric(18,2)::text AS expected,
            count(*) FILTER (WHERE s.staged AND e.planned IS NULL)::int AS added,
            count(e.planned)::int AS planned,
            count(s.staged)::int AS "stagedRows",
            coalesce(sum(s.measure), 0)::numeric(18,2)::text AS "stagedTotal"
     FROM (SELECT ${keys}, t.bf_measure AS measure, true AS planned
           FROM ${store.expected} t WHERE t.bf_backfill = $1::bigint AND t.${store.partition} = $3::timestamptz) e
     FULL JOIN (SELECT ${keys}, t.${store.measure} AS measure, true AS staged FROM ${staged}) s USING (${store.keys.join(', ')})`, run);
  const row = rows[0];
  if (!row) throw new Error('envelope query returned no row');
  return row;
}
