import { requireBackfill } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction, type Queryable } from '../../db/pool.js';
import { findUndoPruning, insertRowRetention, listRetentionCandidates } from '../../db/retention.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import {
  deleteStoredRows, dropStoreTable, measureStoredRows, measureTable, storeTableExists, type StoreTable,
} from '../../db/rowStore.js';
import { detachedTablesOf } from '../../db/swap.js';
import { ACTIVE_STATES, type BackfillState } from '../states.js';
import { formatTime } from '../time.js';

/*
 * Retention of the rows a backfill keeps in its pipeline's store (bf_<pipeline>), in two kinds by what needs them:
 *
 *   scratch  baseline and expected keys: read only by its publishes (late rows, the envelope).
 *   undo     staged and saved rows: what a rollback deletes and restores.
 *
 * The rule, for a backfill finished (not in flight) more than RETENTION_DAYS ago:
 *   - scratch rows are dropped, by the retention job;
 *   - undo rows are dropped by the job only when no rollback can ever need them: the backfill was rolled back,
 *     was cancelled, or has no partition published (none left to restore);
 *   - undo rows of a backfill that could still be rolled back (done, failed or stopped with partitions
 *     published, whether its rollback is allowed now or only once a later backfill over them is rolled back)
 *     are dropped only when an operator says so (`backfill retention --prune`), after which it can no longer
 *     be rolled back.
 * Nothing of a backfill in flight (paused included) or finished less than RETENTION_DAYS ago is dropped. Each
 * drop is one transaction that locks the backfill row (as a rollback does) and checks the rule again, records
 * what went in backfill.row_retention and in the backfill's timeline; a second run finds nothing more to do.
 */

export const RETENTION_ACTOR = 'retention';

type RowsKind = 'scratch' | 'undo';
const STORE_TABLES: Record<RowsKind, readonly StoreTable[]> = { scratch: ['baseline', 'expected'], undo: ['staged', 'saved'] };

export interface RetentionCandidate {
  backfillId: number;
  pipeline: string;
  state: BackfillState;
  /** When it finished (or, never having run, was announced): the age is counted from here. */
  finishedAt: Date;
  /** Partitions it published that are still its (not restored by its rollback). */
  publishedPartitions: number;
  /** Later backfills whose generations stand over its partitions: its rollback is refused while they do. */
  supersededBy: number[];
  /** The kinds already dropped. */
  pruned: RowsKind[];
}

/** drop: the retention job drops them; confirm: only an operator's `retention --prune` does; keep: nothing does yet. */
export interface Verdict {
  kind: RowsKind;
  action: 'drop' | 'confirm' | 'keep';
  why: string;
}

const DAY_MS = 24 * 3600 * 1000;

/** The rule above, for each kind of rows the backfill still has. Pure. */
export function retentionVerdicts(candidate: RetentionCandidate, asOf: Date, retentionDays: number): Verdict[] {
  const days = Math.floor((asOf.getTime() - candidate.finishedAt.getTime()) / DAY_MS);
  return (Object.keys(STORE_TABLES) as RowsKind[]).filter((kind) => !candidate.pruned.includes(kind)).map((kind): Verdict => {
    if (ACTIVE_STATES.includes(candidate.state)) return { kind, action: 'keep', why: `in flight (${candidate.state})` };
    if (days < retentionDays) return { kind, action: 'keep', why: `finished ${days} day(s) ago, within RETENTION_DAYS (${retentionDays})` };
    if (kind === 'scratch') return { kind, action: 'drop', why: `finished ${days} day(s) ago; only a publish reads them, and none is left to run` };
    const never = undoNeverNeeded(candidate);
    if (never) return { kind, action: 'drop', why: `finished ${days} day(s) ago; ${never}` };
    const now = candidate.supersededBy.length
      ? `its rollback is refused while ${candidate.supersededBy.map((id) => `#${id}`).join(', ')} stand(s) over its partitions, and allowed again if that is rolled back`
      : 'its rollback is still allowed';
    return { kind, action: 'confirm', why: `finished ${days} day(s) ago, but ${now}: only \`retention --prune\` drops them, and then it can no longer be rolled back` };
  });
}

function undoNeverNeeded(candidate: RetentionCandidate): string | undefined {
  if (candidate.state === 'rolled_back') return 'it was rolled back, so nothing is left to restore';
  if (candidate.state === 'cancelled') return 'it was cancelled before it ran';
  if (candidate.publishedPartitions === 0) return 'none of its partitions is published, so there is nothing to roll back';
  return undefined;
}

/** The backfills that still have rows of some kind, with what the rule needs to know about them. */
async function listCandidates(db: Queryable, backfillId?: number): Promise<RetentionCandidate[]> {
  const rows = await listRetentionCandidates(db, backfillId);
  return rows.map((row) => ({ ...row, supersededBy: row.supersededBy.map(Number) }));
}

export interface StoredRows {
  /**
   * A shared table of the store, or a table of a swap of its own (staged, saved or swapped back out). The
   * baseline tables of each hour (storeTables.ts) are counted under 'baseline', with the shared one's rows.
   */
  table: StoreTable | string;
  rows: number;
  bytes: number;
}

/**
 * The tables of one hour's run that hold what the store's shared tables hold for other runs (its baseline keys;
 * for a rewrite staged apart, its staged and saved rows): counted as that shared table, not listed one by one.
 */
const RUN_TABLE = /_g[0-9]+_(baseline|staged|saved)"?$/;

/** `table`'s rows and bytes added to `found`, under the shared table's name for a table of an hour's run (RUN_TABLE). */
function counted(found: StoredRows[], table: string, measured: { rows: number; bytes: number }): void {
  const name = RUN_TABLE.exec(table)?.[1] ?? table;
  const entry = found.find((item) => item.table === name);
  if (!entry) {
    found.push({ table: name, ...measured });
    return;
  }
  entry.rows += measured.rows;
  entry.bytes += measured.bytes;
}

/**
 * For each shared store table of that kind: what `rowsOf` says of the backfill's rows in it, or nothing when
 * the table was never made (the pipeline has not published that kind of row yet).
 */
async function eachStoreTable(db: Queryable, pipeline: string, kind: RowsKind, rowsOf: (table: StoreTable) => Promise<{ rows: number; bytes: number }>): Promise<StoredRows[]> {
  const found: StoredRows[] = [];
  for (const table of STORE_TABLES[kind]) {
    found.push({ table, ...((await storeTableExists(db, pipeline, table)) ? await rowsOf(table) : { rows: 0, bytes: 0 }) });
  }
  return found;
}

/** The rows of that kind the backfill has in its store, and their bytes (the rows' own size, without index). */
async function measureRows(db: Queryable, pipeline: string, backfillId: number, kind: RowsKind): Promise<StoredRows[]> {
  const measured = await eachStoreTable(db, pipeline, kind, (table) => measureStoredRows(db, pipeline, table, backfillId));
  for (const table of await detachedTablesOf(db, pipeline, backfillId, kind)) counted(measured, table, await measureTable(db, table));
  return measured;
}

async function dropRows(db: Queryable, pipeline: string, backfillId: number, kind: RowsKind): Promise<StoredRows[]> {
  // One statement deletes the rows and says how many bytes they were.
  const dropped = await eachStoreTable(db, pipeline, kind, (table) => deleteStoredRows(db, pipeline, table, backfillId));
  // The tables of its swaps that are not attached (detachedTablesOf never lists a live partition).
  for (const table of await detachedTablesOf(db, pipeline, backfillId, kind)) {
    counted(dropped, table, await measureTable(db, table));
    await dropStoreTable(db, table);
  }
  return dropped;
}

interface RetentionItem extends Verdict {
  backfillId: number;
  pipeline: string;
  state: BackfillState;
  finishedAt: Date;
  tables: StoredRows[];
}

export interface RetentionReport {
  asOf: Date;
  retentionDays: number;
  /** What the job drops (drop) and what only `retention --prune` does (confirm), measured. */
  items: RetentionItem[];
  /** Backfills keeping all their rows for now: in flight, or finished within RETENTION_DAYS. */
  kept: number;
}

/** What retention would drop now, and what it would take an operator's --prune to drop; nothing is changed. */
export async function listRetention(ctx: EngineContext, options: { asOf?: Date; backfillId?: number } = {}): Promise<RetentionReport> {
  const asOf = options.asOf ?? new Date();
  const items: RetentionItem[] = [];
  let kept = 0;
  for (const candidate of await listCandidates(ctx.pool, options.backfillId)) {
    const verdicts = retentionVerdicts(candidate, asOf, ctx.config.RETENTION_DAYS).filter((v) => v.action !== 'keep');
    if (verdicts.length === 0) kept += 1;
    for (const verdict of verdicts) {
      const { backfillId, pipeline, state, finishedAt } = candidate;
      items.push({ ...verdict, backfillId, pipeline, state, finishedAt, tables: await measureRows(ctx.pool, pipeline, backfillId, verdict.kind) });
    }
  }
  return { asOf, retentionDays: ctx.config.RETENTION_DAYS, items, kept };
}

export interface PruneOptions {
  actor: string;
  /** Also the undo rows of backfills that could still be rolled back (an operator's --prune); never the job. */
  includeRollbackRows: boolean;
  asOf?: Date;
  backfillId?: number;
}

export interface PrunedBackfill {
  backfillId: number;
  pipeline: string;
  kinds: RowsKind[];
  tables: StoredRows[];
  why: string[];
}

/** Drops what the rule allows (see above), one backfill per transaction. Idempotent: returns what it dropped now. */
export async function pruneStoredRows(ctx: EngineContext, options: PruneOptions): Promise<PrunedBackfill[]> {
  const asOf = options.asOf ?? new Date();
  const pruned: PrunedBackfill[] = [];
  for (const candidate of await listCandidates(ctx.pool, options.backfillId)) {
    if (!retentionVerdicts(candidate, asOf, ctx.config.RETENTION_DAYS).some((v) => allowed(v, options))) continue;
    const done = await pruneBackfill(ctx, candidate.backfillId, { ...options, asOf });
    if (done) pruned.push(done);
  }
  return pruned;
}

const allowed = (verdict: Verdict, options: Pick<PruneOptions, 'includeRollbackRows'>) =>
  verdict.action === 'drop' || (verdict.action === 'confirm' && options.includeRollbackRows);

/**
 * Under the backfill's row lock (a rollback takes the same lock first, so the two never interleave) the rule is
 * checked again, the rows go, and the drop is recorded with its reason, in the same transaction.
 */
async function pruneBackfill(ctx: EngineContext, backfillId: number, options: PruneOptions & { asOf: Date }): Promise<PrunedBackfill | undefined> {
  return withTransaction(ctx.pool, async (tx) => {
    await requireBackfill(tx, backfillId, { forUpdate: true });
    const [candidate] = await listCandidates(tx, backfillId);
    if (!candidate) return undefined;
    const verdicts = retentionVerdicts(candidate, options.asOf, ctx.config.RETENTION_DAYS).filter((v) => allowed(v, options));
    if (verdicts.length === 0) return undefined;
    const tables: StoredRows[] = [];
    for (const verdict of verdicts) {
      const dropped = await dropRows(tx, candidate.pipeline, backfillId, verdict.kind);
      tables.push(...dropped);
      await insertRowRetention(tx, { backfillId, kind: verdict.kind, prunedBy: options.actor, rows: sum(dropped, 'rows'), bytes: sum(dropped, 'bytes'), rule: verdict.why });
    }
    const kinds = verdicts.map((v) => v.kind);
    await recordEvent(tx, {
      backfillId, actor: options.actor, kind: 'pruned',
      detail: { kinds, tables, rows: sum(tables, 'rows'), bytes: sum(tables, 'bytes'), why: verdicts.map((v) => `${v.kind}: ${v.why}`), retentionDays: ctx.config.RETENTION_DAYS },
    });
    return { backfillId, pipeline: candidate.pipeline, kinds, tables, why: verdicts.map((v) => v.why) };
  });
}

export function sum(tables: StoredRows[], field: 'rows' | 'bytes'): number {
  return tables.reduce((total, table) => total + table[field], 0);
}

/** A rollback of a backfill whose saved rows an operator pruned is refused by name: there is nothing to restore. */
export async function refuseIfUndoPruned(db: Queryable, backfillId: number): Promise<void> {
  const pruned = await findUndoPruning(db, backfillId);
  if (!pruned) return;
  throw new BackfillError(ErrorCode.WrongState,
    `Backfill #${backfillId} cannot be rolled back: its saved prior rows were dropped by retention (${pruned.prunedBy}, ${formatTime(pruned.prunedAt)}), ` +
    'so there is nothing to restore. Repair the data with a new backfill instead; nothing was changed.');
}
