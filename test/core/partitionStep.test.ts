import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replacePartition, snapshotPartition } from '../../src/core/recompute/partitionStep.js';
import { requirePipeline, type Pipeline } from '../../src/db/pipelines.js';
import { createPool, withTransaction } from '../../src/db/pool.js';
import { isBackfillError } from '../../src/errors.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';

const HOUR = new Date('2026-11-15T07:00:00Z');

describe('the partition step (replace, never append)', () => {
  let engine: TestEngine;
  let pipeline: Pipeline;

  beforeAll(async () => {
    engine = await createTestEngine();
    pipeline = await requirePipeline(engine.ctx.pool, 'orders');
  });
  afterAll(async () => engine.close());

  it('leaves the partition identical when run twice: same rows, same total, same checksum', async () => {
    const first = await withTransaction(engine.ctx.pool, (tx) => replacePartition(tx, pipeline, HOUR));
    const second = await withTransaction(engine.ctx.pool, (tx) => replacePartition(tx, pipeline, HOUR));
    expect(first.rows).toBeGreaterThan(0);
    expect(second).toEqual(first);
    expect(await snapshotPartition(engine.ctx.pool, pipeline, HOUR)).toEqual(first);
  });

  it('does not double when several runs of the same hour race each other', async () => {
    const single = await snapshotPartition(engine.ctx.pool, pipeline, HOUR);
    // Separate pools: separate connections, so the runs really are concurrent transactions.
    const pools = Array.from({ length: 4 }, () => createPool(engine.ctx.config.DATABASE_URL));
    try {
      const results = await Promise.all(pools.map((pool) => withTransaction(pool, (tx) => replacePartition(tx, pipeline, HOUR))));
      for (const result of results) expect(result.rows).toBe(single.rows);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
    expect(await snapshotPartition(engine.ctx.pool, pipeline, HOUR)).toEqual(single);
  });

  it('refuses a step that writes outside its hour, so a filtered append cannot slip through', async () => {
    const neighbour = new Date('2026-11-15T08:00:00Z');
    const before = await snapshotPartition(engine.ctx.pool, pipeline, neighbour);
    // The classic mistake: a step whose filter selects more than its own hour appends to partitions nobody deleted.
    const appending: Pipeline = { ...pipeline, stepSql: pipeline.stepSql.replace('r.event_hour = $1::timestamptz', 'r.event_hour BETWEEN $1::timestamptz AND $1::timestamptz + interval \'1 hour\'') };
    expect(appending.stepSql).not.toBe(pipeline.stepSql);
    // Without a primary key to trip over (here: the neighbour emptied in the same transaction), only the
    // engine's own check stands between this step and a doubled hour.
    const attempt = withTransaction(engine.ctx.pool, async (tx) => {
      await tx.query('DELETE FROM warehouse.orders WHERE partition_hour = $1', [neighbour]);
      return replacePartition(tx, appending, HOUR);
    });
    await expect(attempt).rejects.toSatisfy((error: unknown) => isBackfillError(error) && /wrote \d+ rows but 2026-11-15 07:00 holds \d+: it must insert only rows/.test(error.message));
    expect(await snapshotPartition(engine.ctx.pool, pipeline, neighbour)).toEqual(before);
  });
});
