import type { Pipeline } from './pipelines.js';
import { runPipelineSql } from './pipelineSql.js';
import type { Queryable } from './pool.js';
import { stepRows, type RowStore } from './rowStore.js';

// The preview of a backfill (src/core/identify/plan.ts): what the step would produce for each target, from the
// pipeline's estimate query when it declares one, otherwise from the step's own query aggregated in PostgreSQL
// (and, at start, kept by key in the store as the announced envelope, in the same statement). Both are the
// catalog's SQL, so they run through the one door for it. Nothing is written to the target.

/** The rows and total the step would give the hour; with `keepFor` (and no estimate), its keys kept as the backfill's envelope. */
export async function previewPartition(db: Queryable, store: RowStore, pipeline: Pipeline, hour: Date, keepFor?: { backfillId: number }): Promise<{ rows: number; total: string } | undefined> {
  const { rows } = await runPipelineSql<{ rows: number; total: string }>(db, previewSql(store, pipeline, keepFor !== undefined),
    keepFor && !pipeline.estimateSql ? [hour, keepFor.backfillId] : [hour]);
  return rows[0];
}

function previewSql(store: RowStore, pipeline: Pipeline, keep: boolean): string {
  if (pipeline.estimateSql) {
    return `SELECT e.rows::bigint AS rows, coalesce(e.total, 0)::numeric(18,2)::text AS total FROM (${pipeline.estimateSql}\n) AS e`;
  }
  if (!keep) return `SELECT count(*)::int AS rows, coalesce(sum(q.${store.measure}), 0)::numeric(18,2)::text AS total FROM ${stepRows(store)}`;
  const columns = [store.partition, ...store.keys];
  return `WITH kept AS (
      INSERT INTO ${store.expected} (bf_backfill, ${columns.join(', ')}, bf_measure)
      SELECT $2::bigint, ${columns.map((column) => `q.${column}`).join(', ')}, q.${store.measure} FROM ${stepRows(store)}
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
