import type { Pipeline } from './pipelines.js';
import { runPipelineSql } from './pipelineSql.js';
import { undoneIfRefused, type Queryable } from './pool.js';
import { stepRows, type RowStore } from './rowStore.js';
import { hasSqlState, SqlState } from './sqlState.js';

// The preview of a backfill (src/core/identify/plan.ts): what the step would produce for each target, from the
// pipeline's estimate query when it declares one, otherwise from the step's own query aggregated in PostgreSQL
// (and, at start, kept by key in the store as the announced envelope, in the same statement). Both are the
// catalog's SQL, so they run through the one door for it. Nothing is written to the target.

/** What the step would give an hour: its rows and total, and with `keepFor`, whether no key of them repeats (keysOnce). */
export interface PreviewedHour {
  rows: number;
  total: string;
  /** The rows kept as the envelope hold each key once, as the store's unique index proves (keepKeysOnceInExpected); true where none were kept. */
  keysOnce: boolean;
}

/** The rows and total the step would give the hour; with `keepFor` (and no estimate), its keys kept as the backfill's envelope. */
export async function previewPartition(db: Queryable, store: RowStore, pipeline: Pipeline, hour: Date, keepFor?: { backfillId: number }): Promise<PreviewedHour | undefined> {
  if (!keepFor || pipeline.estimateSql) {
    const { rows } = await runPipelineSql<{ rows: number; total: string }>(db, previewSql(store, pipeline, false), [hour]);
    return rows[0] && { ...rows[0], keysOnce: true };
  }
  // Kept once-keyed (bf_keys_once = true) unless the unique index refuses the rows: then kept again unproven, in
  // the same transaction, and the measure counts distinct keys as it always did.
  const tried = await undoneIfRefused(db, 'preview_keep', () => keepPreviewed(db, store, pipeline, hour, keepFor.backfillId, true), (error) => {
    return hasSqlState(error, SqlState.UniqueViolation) && (error as { constraint?: unknown }).constraint === KEYS_ONCE;
  });
  return tried.done ? tried.value : keepPreviewed(db, store, pipeline, hour, keepFor.backfillId, false);
}

const KEYS_ONCE = 'expected_keys_once';

async function keepPreviewed(db: Queryable, store: RowStore, pipeline: Pipeline, hour: Date, backfillId: number, keysOnce: boolean): Promise<PreviewedHour | undefined> {
  const { rows } = await runPipelineSql<{ rows: number; total: string }>(db, previewSql(store, pipeline, true), [hour, backfillId, keysOnce ? true : null]);
  return rows[0] && { ...rows[0], keysOnce };
}

function previewSql(store: RowStore, pipeline: Pipeline, keep: boolean): string {
  if (pipeline.estimateSql) {
    return `SELECT e.rows::bigint AS rows, coalesce(e.total, 0)::numeric(18,2)::text AS total FROM (${pipeline.estimateSql}\n) AS e`;
  }
  if (!keep) return `SELECT count(*)::int AS rows, coalesce(sum(q.${store.measure}), 0)::numeric(18,2)::text AS total FROM ${stepRows(store)}`;
  const columns = [store.partition, ...store.keys];
  return `WITH kept AS (
      INSERT INTO ${store.expected} (bf_backfill, ${columns.join(', ')}, bf_measure, bf_keys_once)
      SELECT $2::bigint, ${columns.map((column) => `q.${column}`).join(', ')}, q.${store.measure}, $3::boolean FROM ${stepRows(store)}
      RETURNING bf_measure)
    SELECT count(*)::int AS rows, coalesce(sum(bf_measure), 0)::numeric(18,2)::text AS total FROM kept`;
}

/** The days' total `before`, with the hours' live rows replaced by the previewed totals. */
export async function totalAfterReplacing(db: Queryable, store: RowStore, before: string, hours: Date[], totals: string[]): Promise<string | undefined> {
  const { rows } = await db.query<{ after: string }>(
    `SELECT ($1::numeric - coalesce(sum(t.${store.measure}), 0) + (SELECT coalesce(sum(x), 0) FROM unnest($3::numeric[]) x))::numeric(18,2)::text AS after
     FROM ${store.target} t WHERE t.${store.partition} = ANY ($2::timestamptz[])`, [before, hours, totals]);
  return rows[0]?.after;
}
