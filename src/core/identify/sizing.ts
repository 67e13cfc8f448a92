import type { Config } from '../../config.js';
import { findPlannedSize, recordPlannedSize } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import type { Pipeline } from '../../db/pipelines.js';
import type { Queryable } from '../../db/pool.js';
import { countLiveRows, sampleWidths } from '../../db/sizing.js';

/*
 * How big a backfill is, before it runs: the rows it writes (the preview's count per partition) and replaces
 * (the live rows of its partitions now), and the bytes they take in the pipeline's store (bf_<pipeline>):
 *
 *   staging  staged rows (one per row written) + expected keys (one per row written), each table with its
 *            (backfill, generation, partition, key) index, + baseline keys (at most one per live row: those the
 *            staged rows lack, every one where a key repeats or is NULL; in a table of their own per hour,
 *            unindexed: src/core/recompute/storeTables.ts), counted at most. Dropped by retention
 *            once the backfill is finished and older than RETENTION_DAYS (the staged rows are kept with the
 *            saved ones while a rollback may still need them).
 *   keep     the saved prior rows (one per live row replaced) with their index: what a rollback restores.
 *
 * Widths come from the target's own rows (pg_column_size over a sample of at most SAMPLE_ROWS, of the targeted
 * hours when they hold rows, else of the whole table): a stored row is that width plus the store's two columns
 * and its line pointer; a key row or index entry is the width of (partition, keys) plus the same. Dead rows,
 * fill factor and TOAST compression are not counted: read it as the order of magnitude, not to the byte.
 */
export interface PlanSize {
  /** Rows the backfill writes: the preview's count over its partitions. */
  rows: number;
  /** Live rows of its partitions now: what the publish replaces and saves. */
  replacedRows: number;
  /** Average width of a target row and of its (partition, keys), in bytes; 0 when the target has no rows to sample. */
  rowWidth: number;
  keyWidth: number;
  /** Bytes in the store while it is staged (until retention), and kept for a rollback. */
  stageBytes: number;
  keepBytes: number;
}

const SAMPLE_ROWS = 1000;
/** bf_backfill (bigint) and bf_generation (integer) in front of each stored row, plus its 4-byte line pointer. */
const STORE_OVERHEAD = 8 + 4 + 4;

async function estimateSize(db: Queryable, pipeline: Pipeline, hours: Date[], expected: { rows: number }[]): Promise<PlanSize> {
  const replacedRows = await countLiveRows(db, pipeline, hours);
  const widths = await sampleWidths(db, pipeline, replacedRows > 0 ? hours : undefined, SAMPLE_ROWS);
  const rows = expected.reduce((sum, e) => sum + e.rows, 0);
  const row = widths.row + STORE_OVERHEAD;
  const key = widths.key + STORE_OVERHEAD;
  // Each stored row has its index entry (about a key's width); expected rows are keys, indexed too; baseline
  // rows are keys without an index, at most one per live row.
  const stageBytes = rows * (row + key) + rows * 2 * key + replacedRows * key;
  const keepBytes = replacedRows * (row + key);
  return { rows, replacedRows, rowWidth: widths.row, keyWidth: widths.key, stageBytes: Math.round(stageBytes), keepBytes: Math.round(keepBytes) };
}

/** Why a backfill of this size needs a second operator's approval (empty: it does not). */
function capacityBreaches(partitions: number, size: Pick<PlanSize, 'rows' | 'replacedRows'>, config: Pick<Config, 'CAPACITY_LIMIT' | 'CAPACITY_ROWS_LIMIT'>): string[] {
  const rows = Math.max(size.rows, size.replacedRows);
  return [
    partitions > config.CAPACITY_LIMIT ? `${partitions} partitions, more than CAPACITY_LIMIT (${config.CAPACITY_LIMIT})` : undefined,
    rows > config.CAPACITY_ROWS_LIMIT ? `${formatCount(rows)} rows, more than CAPACITY_ROWS_LIMIT (${formatCount(config.CAPACITY_ROWS_LIMIT)})` : undefined,
  ].filter((reason): reason is string => reason !== undefined);
}

/** A plan's size, with the capacity limits it is over (a second operator must approve it when any). */
export interface SizeVerdict extends PlanSize {
  needsSecondApproval: string[];
}

interface SizedInputs {
  pipeline: Pipeline;
  identified: { hours: Date[] };
  expected: { rows: number }[];
}

export async function sizePlan(db: Queryable, plan: SizedInputs, config: Pick<Config, 'CAPACITY_LIMIT' | 'CAPACITY_ROWS_LIMIT'>): Promise<SizeVerdict> {
  const size = await estimateSize(db, plan.pipeline, plan.identified.hours, plan.expected);
  return { ...size, needsSecondApproval: capacityBreaches(plan.identified.hours.length, size, config) };
}

/**
 * At start, in its transaction, once the preview is known: the size goes on the backfill row and its timeline,
 * and a backfill over either capacity limit (partitions or rows) waits for a second operator's approval.
 */
export async function recordSize(tx: Queryable, backfillId: number, plan: SizedInputs, config: Pick<Config, 'CAPACITY_LIMIT' | 'CAPACITY_ROWS_LIMIT'>): Promise<SizeVerdict> {
  const size = await sizePlan(tx, plan, config);
  await recordPlannedSize(tx, backfillId, size, size.needsSecondApproval.length > 0);
  await recordEvent(tx, { backfillId, actor: 'backfill-bot', kind: 'sized', detail: { ...size, limits: { partitions: config.CAPACITY_LIMIT, rows: config.CAPACITY_ROWS_LIMIT } } });
  return size;
}

/** The size recorded at start (null for a backfill started before sizes were kept). */
export async function recordedSize(db: Queryable, backfillId: number): Promise<Pick<PlanSize, 'rows' | 'replacedRows'> | null> {
  const row = await findPlannedSize(db, backfillId);
  return !row || row.rows === null || row.replacedRows === null ? null : { rows: row.rows, replacedRows: row.replacedRows };
}

export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

/** 1536 → "1.5 kB": powers of 1024, one decimal below 10 units. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** One line for the plan: rows, width, and the bytes staged and kept in the pipeline's store. */
export function describeSize(size: PlanSize, pipeline: string): string {
  const width = size.rowWidth > 0 ? `about ${size.rowWidth} bytes a row` : 'row width unknown: the target has no rows to sample';
  return `${formatCount(size.rows)} rows written, ${formatCount(size.replacedRows)} replaced (${width}); ` +
    `stages ${formatBytes(size.stageBytes)} and keeps ${formatBytes(size.keepBytes)} for a rollback in bf_${pipeline}`;
}

/** Why a plan needs a second operator's approval, or that it does not. */
export function describeSecondApproval(size: SizeVerdict): string {
  return size.needsSecondApproval.length ? `needed (${size.needsSecondApproval.join('; ')})` : 'not needed (within CAPACITY_LIMIT and CAPACITY_ROWS_LIMIT)';
}
