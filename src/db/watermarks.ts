import type { Queryable } from './pool.js';

// How far each pipeline's normal run has processed (backfill.watermarks): every hour at or before it is correct.

export async function findWatermark(db: Queryable, pipeline: string): Promise<Date | null> {
  const { rows } = await db.query<{ processedThrough: Date }>(
    'SELECT processed_through AS "processedThrough" FROM backfill.watermarks WHERE pipeline = $1::text', [pipeline]);
  return rows[0]?.processedThrough ?? null;
}

/** The watermark under its row lock (undefined when the pipeline has none yet). */
export async function lockWatermark(tx: Queryable, pipeline: string): Promise<Date | undefined> {
  const { rows } = await tx.query<{ processedThrough: Date }>(
    'SELECT processed_through AS "processedThrough" FROM backfill.watermarks WHERE pipeline = $1::text FOR UPDATE', [pipeline]);
  return rows[0]?.processedThrough;
}

/** Sets the watermark, creating it if the pipeline has none. */
export async function upsertWatermark(tx: Queryable, pipeline: string, processedThrough: Date, updatedBy: string): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.watermarks (pipeline, processed_through, updated_at, updated_by) VALUES ($1::text, $2::timestamptz, now(), $3::text)
     ON CONFLICT (pipeline) DO UPDATE SET processed_through = EXCLUDED.processed_through, updated_at = now(), updated_by = EXCLUDED.updated_by`,
    [pipeline, processedThrough, updatedBy]);
}

/** Moves an existing watermark. */
export async function updateWatermark(tx: Queryable, pipeline: string, processedThrough: Date, updatedBy: string): Promise<void> {
  await tx.query(
    `UPDATE backfill.watermarks SET processed_through = $2::timestamptz, updated_at = now(), updated_by = $3::text WHERE pipeline = $1::text`,
    [pipeline, processedThrough, updatedBy]);
}

/** A pipeline's first watermark; one it already has is kept (the normal run or a backfill owns it from then on). */
export async function insertWatermarkIfNone(tx: Queryable, pipeline: string, processedThrough: string, updatedBy: string): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.watermarks (pipeline, processed_through, updated_at, updated_by) VALUES ($1::text, $2::timestamptz, now(), $3::text)
     ON CONFLICT (pipeline) DO NOTHING`,
    [pipeline, processedThrough, updatedBy]);
}
