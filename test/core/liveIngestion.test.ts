// Rollback under live ingestion: normal ingestion keeps writing new orders into the night's hours while the
// backfill publishes and while it is rolled back. Another writer commits a row after every single statement of
// every publish and of the rollback (the statement seam: src/db/pool.ts, withStatementSeam), on both target
// shapes. What must hold: the backfill publishes and is rolled back without a refusal; after the publish the
// night's own rows carry the corrected figure; after the rollback they are exactly the rows they were before
// (the saved generation), and every row the other writer committed is live, whenever it was committed.

import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { checksumShapeOf, rowsChecksum } from '../../src/db/partitions.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const HOURS = ['05', '06', '07', '08', '09', '10'].map((hh) => `2026-11-15T${hh}:00:00.000Z`);
/** Far above the demo's order ids: the other writer's rows have keys of their own. */
const LATE_BASE = 9_100_000_000;
const NIGHT = `partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`;

let engine: TestEngine | undefined;
let writers: pg.Pool | undefined;

afterEach(async () => {
  await writers?.end().catch(() => undefined);
  writers = undefined;
  await engine?.close();
  engine = undefined;
});

/**
 * Another writer: one new order into `hour` from a connection of its own, committed at once. Returns when it
 * committed, or once it waits for a lock (a publish or rollback by swap holds writers out until it commits;
 * the row lands right after). While one write waits so, the next statements add none (they would wait the
 * same way, and hold a connection each): `heldOut` counts them. Every write is kept in `landing`.
 */
function otherWriter(e: TestEngine) {
  const pool = new pg.Pool({ connectionString: e.ctx.config.DATABASE_URL, max: 16, application_name: 'live-ingestion' });
  writers = pool;
  const landing: Promise<void>[] = [];
  const keys: string[] = [];
  const waiting = new Set<Promise<void>>();
  const counts = { written: 0, heldOut: 0 };
  let next = LATE_BASE;
  return {
    landing,
    keys,
    counts,
    async write(hour: string): Promise<void> {
      if (waiting.size > 0) {
        counts.heldOut += 1;
        return;
      }
      counts.written += 1;
      next += 1;
      const key = String(next);
      const client = await pool.connect();
      const pid = (client as unknown as { processID: number }).processID;
      const done = client.query(
        `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
         VALUES ($1::timestamptz, $2::bigint, 1, 4242, 'EUR', 100.00, 1.000000, 100.00)`, [hour, key])
        .then(() => { keys.push(key); }).finally(() => client.release());
      landing.push(done);
      let settled = false;
      void done.then(() => { settled = true; }, () => { settled = true; });
      await waitUntil(async () => settled || await waitingOnLock(e, pid), `the other writer's insert into ${hour} to commit or wait`);
      if (!settled) {
        waiting.add(done);
        void done.finally(() => waiting.delete(done)).catch(() => undefined);
      }
    },
  };
}

async function waitingOnLock(e: TestEngine, pid: number): Promise<boolean> {
  const { rows } = await e.ctx.pool.query<{ waiting: boolean }>(`SELECT wait_event_type = 'Lock' AS waiting FROM pg_stat_activity WHERE pid = $1::int`, [pid]);
  return rows[0]?.waiting ?? false;
}

/** The night's own rows (not the other writer's), by key, as JSON text. */
async function nightRows(e: TestEngine): Promise<Map<string, string>> {
  const { rows } = await e.ctx.pool.query<{ k: string; v: string }>(
    `SELECT o.order_id::text AS k, to_jsonb(o)::text AS v FROM warehouse.orders o WHERE ${NIGHT} AND o.order_id < $1::bigint`, [LATE_BASE]);
  return new Map(rows.map((row) => [row.k, row.v]));
}

async function nightTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(
    `SELECT sum(amount_base)::numeric(18,2)::text AS total FROM warehouse.orders WHERE ${NIGHT} AND order_id < $1::bigint`, [LATE_BASE]);
  return rows[0]?.total ?? '';
}

async function liveLateKeys(e: TestEngine): Promise<string[]> {
  const { rows } = await e.ctx.pool.query<{ k: string }>(`SELECT order_id::text AS k FROM warehouse.orders WHERE order_id > $1::bigint ORDER BY 1`, [LATE_BASE]);
  return rows.map((row) => row.k);
}

describe.each([
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
] as const)('rollback under live ingestion, $shape target (publish by $by)', ({ scenario, by }) => {
  it('another writer commits after every statement of every publish and of the rollback: the rollback goes through, every such row stays live, the rest is the night as it was', async () => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const before = await nightRows(e);
    const writer = otherWriter(e);
    const statements = { publish: 0, rollback: 0 };
    e.ctx.hooks = {
      afterStatement: async (_backfillId, hour) => {
        statements.publish += 1;
        await writer.write(hour.toISOString());
      },
    };
    const id = await approvedNight15(e.ctx, 'live ingestion test');
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    await Promise.all(writer.landing);
    // The night's own rows carry the correction; the other writer's are all there beside them.
    expect(await nightTotal(e)).toBe(NIGHT_15.correctedTotal);
    expect(await liveLateKeys(e)).toEqual([...writer.keys].sort());
    const { rows: published } = await e.ctx.pool.query<{ by: string }>(
      `SELECT DISTINCT detail ->> 'publishedBy' AS by FROM backfill.events WHERE backfill_id = $1 AND kind = 'recomputed'`, [id]);
    expect(published).toEqual([{ by }]);

    e.ctx.hooks = undefined;
    let hourOfRollback = 0;
    const rolledBack = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'live ingestion test' }, {
      afterStatement: async () => {
        statements.rollback += 1;
        await writer.write(HOURS[hourOfRollback++ % HOURS.length] as string);
      },
    });
    expect(rolledBack.restored).toHaveLength(HOURS.length);
    await Promise.all(writer.landing);

    expect(await nightRows(e)).toEqual(before);
    expect(await nightTotal(e)).toBe(NIGHT_15.signedTotal);
    expect(await liveLateKeys(e)).toEqual([...writer.keys].sort());
    // A row after every statement: every window of the six publishes and of the rollback was tried.
    expect(statements.publish).toBeGreaterThan(HOURS.length * 10);
    expect(statements.rollback).toBeGreaterThan(HOURS.length * 3);
    expect(writer.counts.written + writer.counts.heldOut).toBe(statements.publish + statements.rollback);
    expect(writer.keys).toHaveLength(writer.counts.written);
  }, 180_000);
});

describe('the published snapshot under live ingestion', () => {
  it('counts and checksums a row another writer commits between the publish\'s INSERT and its measure, beside the rows it wrote', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const writer = otherWriter(e);
    const canary = HOURS[0] as string;
    e.ctx.hooks = {
      afterStatement: async (_backfillId, hour, statement) => {
        // Right after the one write of the canary's publish by rewrite, once: writeRunRows's, or the plain INSERT of
        // the staged rows where staging's checksum is theirs (writeStagedRows).
        const write = /^(WITH staged_rows AS|INSERT INTO "warehouse"\."orders")/.test(statement.trimStart());
        if (hour.toISOString() === canary && write && writer.counts.written === 0) await writer.write(canary);
      },
    };
    const id = await approvedNight15(e.ctx, 'live ingestion test');
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    await Promise.all(writer.landing);
    expect(writer.keys).toHaveLength(1);
    const { rows } = await e.ctx.pool.query<{ rowsAfter: number; rowsWritten: number; recorded: string; live: string; liveRows: number }>(
      `SELECT t.rows_after::int AS "rowsAfter", t.published_rows::int AS "rowsWritten", t.checksum_after AS recorded,
              (SELECT ${rowsChecksum(await checksumShapeOf(e.ctx.pool, 'warehouse.orders'))} FROM warehouse.orders t WHERE t.partition_hour = $2::timestamptz) AS live,
              (SELECT count(*)::int FROM warehouse.orders o WHERE o.partition_hour = $2::timestamptz) AS "liveRows"
       FROM backfill.backfill_targets t WHERE t.backfill_id = $1 AND t.partition_hour = $2::timestamptz`, [id, canary]);
    // The snapshot is the live partition's, the other writer's row in it; what the publish wrote is one row fewer.
    expect(rows[0]).toMatchObject({ rowsAfter: rows[0]?.liveRows, rowsWritten: (rows[0]?.liveRows ?? 0) - 1, recorded: rows[0]?.live });
  }, 120_000);
});
