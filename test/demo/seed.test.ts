import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replacePartition, snapshotPartition, sourceShards, totalOverDays } from '../../src/core/recompute/partitionStep.js';
import { findPipeline, type Pipeline } from '../../src/db/pipelines.js';
import type { Queryable } from '../../src/db/pool.js';
import { CONSUMER_NAMES, DEMO_PIPELINE, FLAGGED_NIGHTS, flaggedNightHours, NIGHT_15, NIGHT_9, OWNERS, SCENARIO_WATERMARK } from '../../dev/demo/constants.js';
import { generateDemoData, monthHours } from '../../dev/demo/generate.js';
import { deliverNight9Source, seedDemo } from '../../dev/demo/seed.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

async function one<T>(db: Queryable, sql: string, params: unknown[] = []): Promise<T> {
  const { rows } = await db.query(sql, params);
  const row: unknown = rows[0];
  if (row === undefined) throw new Error(`no row from: ${sql}`);
  return row as T;
}

async function requireDemoPipeline(db: Queryable): Promise<Pipeline> {
  const pipeline = await findPipeline(db, DEMO_PIPELINE);
  if (!pipeline) throw new Error('the demo pipeline is not registered');
  return pipeline;
}

/** Everything a re-seed must reproduce, as text. */
async function seededFigures(db: Queryable): Promise<unknown> {
  return one(db, `
    SELECT (SELECT string_agg(report_date || '=' || total || '/' || order_count, ',' ORDER BY report_date) FROM warehouse.settlement_report) AS reports,
           (SELECT string_agg(report_date || '=' || total, ',' ORDER BY report_date) FROM warehouse.payout_export) AS payouts,
           (SELECT string_agg(period || '=' || total || '@' || signed_at, ',' ORDER BY id) FROM backfill.signoffs) AS signoffs,
           (SELECT md5(string_agg(l::text, '|' ORDER BY partition_hour)) FROM backfill.partition_log l) AS partition_log,
           (SELECT md5(string_agg(o::text, '|' ORDER BY partition_hour, order_id)) FROM warehouse.orders o) AS orders,
           (SELECT count(*) FROM backfill.read_log) AS reads,
           (SELECT processed_through FROM backfill.watermarks) AS watermark`);
}

describe('the month-end demo seed', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('month-end');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('builds all 720 hourly partitions and leaves the watermark at the last hour of November', async () => {
    const row = await one<{ partitions: number; watermark: Date }>(db.pool, `
      SELECT (SELECT count(DISTINCT partition_hour) FROM warehouse.orders)::bigint AS partitions,
             (SELECT processed_through FROM backfill.watermarks WHERE pipeline = $1) AS watermark`, [DEMO_PIPELINE]);
    expect(row.partitions).toBe(720);
    expect(row.watermark.toISOString()).toBe(SCENARIO_WATERMARK['month-end']);
  });

  it('flags 35 unreconciled partitions, night by night', async () => {
    const { rows } = await db.pool.query<{ flag_reason: string; partitions: number; first: Date; last: Date }>(`
      SELECT flag_reason, count(*)::bigint AS partitions, min(partition_hour) AS first, max(partition_hour) AS last
      FROM backfill.partition_log WHERE pipeline = $1 AND NOT reconciled GROUP BY flag_reason ORDER BY first`, [DEMO_PIPELINE]);
    expect(rows.map((row) => [row.flag_reason, row.partitions, row.first.toISOString(), row.last.toISOString()]))
      .toEqual(FLAGGED_NIGHTS.map((night) => [night.reason, night.partitions, night.firstHour, night.lastHour]));
    expect(rows.reduce((sum, row) => sum + row.partitions, 0)).toBe(35);
  });

  it('records the settlement total of 2026-11-15 as signed by the duty lead from the v1 build', async () => {
    const { rows } = await db.pool.query<{ total: string; signed_by: string; signed_at: Date }>(
      `SELECT total::text, signed_by, signed_at FROM backfill.signoffs WHERE report = $1 AND period = $2::date`,
      [CONSUMER_NAMES.settlementReport, NIGHT_15.reportDate]);
    expect(rows).toHaveLength(1);
    expect(rows[0]?.total).toBe(NIGHT_15.signedTotal);
    expect(rows[0]?.signed_by).toBe(OWNERS.settlementLead);
    expect(rows[0]?.signed_at.toISOString()).toBe('2026-11-16T07:00:00.000Z');
  });

  it('recomputes night 15 with the fixed step to 1,271,902.10 for the day', async () => {
    const pipeline = await requireDemoPipeline(db.pool);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      for (const hour of flaggedNightHours(15)) await replacePartition(client, pipeline, hour);
      expect(await totalOverDays(client, pipeline, [NIGHT_15.reportDate])).toBe(NIGHT_15.correctedTotal);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    expect(await totalOverDays(db.pool, pipeline, [NIGHT_15.reportDate])).toBe(NIGHT_15.signedTotal);
  });

  it('changes only night 15 and night 27 when every hour is recomputed with the fixed step', async () => {
    const pipeline = await requireDemoPipeline(db.pool);
    const client = await db.pool.connect();
    const changed: string[] = [];
    try {
      await client.query('BEGIN');
      for (const hour of monthHours().map((at) => new Date(at))) {
        const before = await snapshotPartition(client, pipeline, hour);
        const after = await replacePartition(client, pipeline, hour);
        if (after.checksum !== before.checksum) changed.push(hour.toISOString());
      }
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
    expect(changed).toEqual([...flaggedNightHours(15), ...flaggedNightHours(27)].map((hour) => hour.toISOString()));
  });

  it('leaves night 27 built from shards 1 and 2 while the landing table now holds all three', async () => {
    const hours = flaggedNightHours(27).map((hour) => hour.toISOString());
    const row = await one<{ built: number[]; raw: number[]; logged: number[] }>(db.pool, `
      SELECT (SELECT array_agg(DISTINCT shard::int ORDER BY shard::int) FROM warehouse.orders WHERE partition_hour = ANY ($1::timestamptz[])) AS built,
             (SELECT array_agg(DISTINCT shard::int ORDER BY shard::int) FROM warehouse.orders_raw WHERE event_hour = ANY ($1::timestamptz[])) AS raw,
             (SELECT array_agg(DISTINCT shards_landed) FROM backfill.partition_log WHERE partition_hour = ANY ($1::timestamptz[])) AS logged`,
    [hours]);
    expect(row).toEqual({ built: [1, 2], raw: [1, 2, 3], logged: [2] });
  });

  it('caught night 9 up after the source came back and signed its report at 12:00 on 11-10', async () => {
    const row = await one<{ rows: number; partitions: number; signed_at: Date[]; stale_reads: number }>(db.pool, `
      SELECT (SELECT count(*) FROM warehouse.orders WHERE partition_hour >= '2026-11-09T00:00Z' AND partition_hour < '2026-11-09T14:00Z')::bigint AS rows,
             (SELECT count(DISTINCT partition_hour) FROM warehouse.orders WHERE partition_hour >= '2026-11-09T00:00Z' AND partition_hour < '2026-11-09T14:00Z')::bigint AS partitions,
             (SELECT array_agg(signed_at) FROM backfill.signoffs WHERE report = $1 AND period = $2::date) AS signed_at,
             (SELECT count(*) FROM backfill.read_log WHERE consumer = $1 AND read_at = $3::timestamptz)::bigint AS stale_reads`,
    [CONSUMER_NAMES.settlementReport, NIGHT_9.reportDate, NIGHT_9.staleBuildAt]);
    expect(row.rows).toBeGreaterThan(0);
    expect(row.partitions).toBe(14);
    expect(row.signed_at.map((at) => at.toISOString())).toEqual([NIGHT_9.signedAt]);
    expect(row.stale_reads).toBe(24);
  });

  it('has marketing_weekly reading the first week only, never 2026-11-15', async () => {
    const row = await one<{ night15: number; outside: number; first_week: number }>(db.pool, `
      SELECT count(*) FILTER (WHERE (partition_hour AT TIME ZONE 'UTC')::date = '2026-11-15')::bigint AS night15,
             count(*) FILTER (WHERE partition_hour >= '2026-11-08T00:00Z')::bigint AS outside,
             count(*)::bigint AS first_week
      FROM backfill.read_log WHERE consumer = $1`, [CONSUMER_NAMES.marketingWeekly]);
    expect(row).toEqual({ night15: 0, outside: 0, first_week: 168 });
  });

  it('gives the same figures when seeded again over itself', async () => {
    const before = await seededFigures(db.pool);
    await seedDemo(db.pool);
    expect(await seededFigures(db.pool)).toEqual(before);
  });
});

describe('the night-9-outage demo seed', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('night-9-outage');
  });
  afterAll(async () => {
    await db?.drop();
  });

  it('stops at 2026-11-08 23:00 with nothing built after it and night 9 still upstream', async () => {
    const row = await one<{ watermark: Date; built_after: number; pending: number; pending_hours: number }>(db.pool, `
      SELECT (SELECT processed_through FROM backfill.watermarks WHERE pipeline = $1) AS watermark,
             (SELECT count(*) FROM warehouse.orders WHERE partition_hour >= '2026-11-09T00:00Z')::bigint AS built_after,
             (SELECT count(*) FROM warehouse.orders_raw_pending)::bigint AS pending,
             (SELECT count(DISTINCT event_hour) FROM warehouse.orders_raw_pending)::bigint AS pending_hours`, [DEMO_PIPELINE]);
    expect(row.watermark.toISOString()).toBe(SCENARIO_WATERMARK['night-9-outage']);
    expect(row.built_after).toBe(0);
    expect(row.pending).toBeGreaterThan(0);
    expect(row.pending_hours).toBe(14);
  });

  it('delivers the night-9 source: three shards land for 2026-11-09 00:00', async () => {
    const pipeline = await requireDemoPipeline(db.pool);
    const firstHour = new Date('2026-11-09T00:00:00Z');
    expect(await sourceShards(db.pool, pipeline, firstHour)).toBe(0);
    expect(await deliverNight9Source(db.pool)).toBeGreaterThan(0);
    expect(await sourceShards(db.pool, pipeline, firstHour)).toBe(3);
    expect(await deliverNight9Source(db.pool)).toBe(0);
    const landed = await one<{ landed_at: Date }>(db.pool,
      'SELECT landed_at FROM backfill.partition_log WHERE pipeline = $1 AND partition_hour = $2', [DEMO_PIPELINE, firstHour]);
    expect(landed.landed_at.toISOString()).toBe('2026-11-10T10:00:00.000Z');
  });
});

describe('seeding a freshly migrated database', () => {
  it('seeds the night-9-outage scenario from nothing', async () => {
    const db = await createTestDatabase('empty');
    try {
      const summary = await seedDemo(db.pool, { scenario: 'night-9-outage' });
      expect(summary).toMatchObject({ partitions: 192, unreconciled: 19, watermark: SCENARIO_WATERMARK['night-9-outage'], signedTotalNight15: null });
    } finally {
      await db.drop();
    }
  });
});

describe('the demo generator', () => {
  it('gives the same month on every call', () => {
    const first = generateDemoData();
    const second = generateDemoData();
    expect(second.orders).toEqual(first.orders);
    expect(second.fxRates).toEqual(first.fxRates);
    expect(first.balancing.usdOrder.amountLocalCents).toBeGreaterThan(0);
    expect(first.balancing.corruptOrder.amountLocalCents).toBeGreaterThan(0);
  });
});
