// Publish by swap: night 15 again, with warehouse.orders declaratively partitioned by hour (the demo's
// partitioned target). Every publish detaches the live partition into the store and attaches the staged table
// under its name; a rollback swaps them back. Real PostgreSQL and queues; the interleavings are forced with locks
// held from a connection of the test, and with the publish's seam.

import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { pruneStoredRows } from '../../src/core/recovery/retention.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { executeStep } from '../../src/core/procedure.js';
import { hourPartitionOf } from '../../src/core/recompute/swap.js';
import { listEvents } from '../../src/db/events.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { startWorkers } from '../../src/worker.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const NIGHT = '2026-11-15';
const HOURS = ['05', '06', '07', '08', '09', '10'];
const hourKey = (hh: string) => `${NIGHT}T${hh}:00Z`;
const partitionName = (hh: string) => `orders_p20261115${hh}`;
const DAY = `partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`;

let engine: TestEngine | undefined;
let clients: pg.Client[] = [];

afterEach(async () => {
  for (const client of clients) await client.end().catch(() => undefined);
  clients = [];
  await engine?.close();
  engine = undefined;
});

/** The backfill's end state; a step's error is shown when it is not done. */
async function settle(e: TestEngine, id: number): Promise<string> {
  const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
  if (report.backfill.state === 'done') return 'done';
  const { rows } = await e.ctx.pool.query<{ step: string }>(
    `SELECT kind || ' ' || step_key || ': ' || status || ' ' || coalesce(error, '') AS step FROM backfill.backfill_steps WHERE backfill_id = $1 AND status <> 'done'`, [id]);
  return `${report.backfill.state} (${rows.map((row) => row.step).join('; ')})`;
}

async function connect(e: TestEngine): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL });
  await client.connect();
  clients.push(client);
  return client;
}

/** The hour's partition of warehouse.orders: its table's oid, where it lives, how many rows. */
async function livePartition(e: TestEngine, hh: string): Promise<{ oid: number; name: string; rows: number }> {
  const { rows } = await e.ctx.pool.query<{ oid: number; name: string; rows: number }>(
    `SELECT c.oid::int AS oid, format('%I.%I', n.nspname, c.relname) AS name,
            (SELECT count(*)::int FROM warehouse.orders WHERE partition_hour = $1) AS rows
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE i.inhparent = 'warehouse.orders'::regclass AND c.relname = $2`, [hourKey(hh), partitionName(hh)]);
  const row = rows[0];
  if (!row) throw new Error(`no live partition ${partitionName(hh)}`);
  return row;
}

async function dayTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(`SELECT sum(amount_base)::numeric(18,2)::text AS total FROM warehouse.orders WHERE ${DAY}`);
  return rows[0]?.total ?? '';
}

async function storeTables(e: TestEngine): Promise<string[]> {
  const { rows } = await e.ctx.pool.query<{ name: string }>(
    `SELECT c.relname AS name FROM pg_class c WHERE c.relnamespace = 'bf_orders'::regnamespace AND c.relkind = 'r' AND c.relname ~ '^p[0-9]{10}_' ORDER BY 1`);
  return rows.map((row) => row.name);
}

describe('publish by swap, on a target partitioned by hour', () => {
  it('night 15: each hour is staged into a table of its own and swapped in under the live name; the prior partition is kept in the store', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const before = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    const id = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, id)).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);

    const after = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    for (const [index, hh] of HOURS.entries()) {
      expect(after[index]?.name).toBe(`warehouse.${partitionName(hh)}`);
      expect(after[index]?.oid).not.toBe(before[index]?.oid);
    }
    // The prior partitions: detached, in the store, same tables (oids) and rows as before the backfill.
    const { rows: saved } = await e.ctx.pool.query<{ oid: number; rows: number; attached: boolean }>(
      `SELECT c.oid::int AS oid, c.relispartition AS attached, (xpath('/row/n/text()', query_to_xml(format('SELECT count(*) AS n FROM %s', c.oid::regclass), false, true, '')))[1]::text::int AS rows
       FROM backfill.preserved_partitions p JOIN pg_class c ON c.oid = to_regclass(p.saved_table) WHERE p.backfill_id = $1 ORDER BY p.partition_hour`, [id]);
    expect(saved.map((s) => s.oid)).toEqual(before.map((b) => b.oid));
    expect(saved.map((s) => s.rows)).toEqual(before.map((b) => b.rows));
    expect(saved.every((s) => !s.attached)).toBe(true);
    // Nothing went through the shared tables; the live keys at staging and the keys written (for a rollback) were
    // kept in tables of their own per hour.
    const { rows: shared } = await e.ctx.pool.query<{ staged: number; saved: number; baseline: number }>(
      `SELECT (SELECT count(*)::int FROM bf_orders.staged) AS staged, (SELECT count(*)::int FROM bf_orders.saved) AS saved, (SELECT count(*)::int FROM bf_orders.baseline) AS baseline`);
    expect(shared[0]).toEqual({ staged: 0, saved: 0, baseline: 0 });
    expect(await storeTables(e)).toEqual(HOURS.flatMap((hh) => [`p20261115${hh}_b${id}_g1_baseline`, `p20261115${hh}_b${id}_saved`, `p20261115${hh}_b${id}_written`]));
    // The keys each publish wrote, kept by difference with the partition it swapped out: the step kept every key,
    // so none was added or dropped, and one row holds the version every published row carries.
    const { rows: written } = await e.ctx.pool.query<{ change: string; n: number }>(
      `SELECT bf_change AS change, count(*)::int AS n FROM bf_orders.p2026111505_b${id}_written GROUP BY 1`);
    expect(written).toEqual([{ change: 'version', n: 1 }]);
    const { rows: versioned } = await e.ctx.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM warehouse.orders t WHERE t.partition_hour = $1 AND t.xmin = (SELECT w.bf_xmin FROM bf_orders.p2026111505_b${id}_written w)`, [hourKey('05')]);
    expect(versioned[0]?.n).toBe(after[0]?.rows);
    // The attached partitions carry the target's primary key and statistics from their first query.
    const { rows: facts } = await e.ctx.pool.query<{ pk: boolean; analyzed: boolean }>(
      `SELECT bool_and(EXISTS (SELECT 1 FROM pg_index x WHERE x.indrelid = c.oid AND x.indisprimary)) AS pk,
              bool_and(c.reltuples > 0) AS analyzed
       FROM pg_class c WHERE c.oid = ANY ($1::oid[])`, [after.map((a) => a.oid)]);
    expect(facts[0]).toEqual({ pk: true, analyzed: true });
    // ATTACH adopted the indexes built at stage time and built none of its own.
    const { rows: indexes } = await e.ctx.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_index WHERE indrelid = ANY ($1::oid[]) GROUP BY indrelid UNION ALL SELECT count(*)::int FROM pg_index WHERE indrelid = 'warehouse.orders'::regclass`,
      [after.map((a) => a.oid)]);
    expect(new Set(indexes.map((i) => i.n)).size).toBe(1);
    const events = await listEvents(e.ctx.pool, id);
    expect(events.filter((ev) => ev.kind === 'recomputed').map((ev) => (ev.detail as { publishedBy?: string }).publishedBy)).toEqual(HOURS.map(() => 'swap'));
  });

  it('four publishes at once through the real workers swap one after another, with no deadlock and no retry', async () => {
    engine = await createTestEngine('month-end-partitioned', { WORKER_CONCURRENCY: '4', WAVE_SIZE: '4' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    const workers = await startWorkers(e.ctx, { sweepMs: 200 });
    try {
      await waitUntil(async () => ['done', 'failed', 'paused'].includes((await loadBackfillReport(e.ctx.pool, id)).backfill.state), 'the backfill to settle', 60_000);
    } finally {
      await workers.close();
    }
    expect((await loadBackfillReport(e.ctx.pool, id)).backfill.state).toBe('done');
    const events = await listEvents(e.ctx.pool, id);
    // Swaps that queued for the target while holding a reader's lock on it deadlocked here, in three runs of three.
    expect(events.filter((ev) => ev.kind === 'step_retried').map((ev) => ev.detail)).toEqual([]);
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);
  });

  it('rollback swaps the prior partitions back in, and moves the published ones into the store', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const before = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    const id = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, id)).toBe('done');
    const published = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));

    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'swap test' });
    expect(restored).toHaveLength(HOURS.length);
    expect((await Promise.all(HOURS.map((hh) => livePartition(e, hh)))).map((p) => p.oid)).toEqual(before.map((b) => b.oid));
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
    expect((await storeTables(e)).filter((name) => /_(saved|rolledback)$/.test(name))).toEqual(HOURS.map((hh) => `p20261115${hh}_b${id}_rolledback`));
    const { rows } = await e.ctx.pool.query<{ oid: number }>(`SELECT to_regclass(format('bf_orders.%I', $1::text))::oid::int AS oid`, [`p2026111505_b${id}_rolledback`]);
    expect(rows[0]?.oid).toBe(published[0]?.oid);
  });

  it('a late row written between stage and publish is carried into the published partition; one written after the publish stays live through a rollback', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    const late = (orderId: number) => e.ctx.pool.query(
      `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
       VALUES ($1, $2, 1, 7, 'SEK', 100.00, 0.1, 10.00)`, [hourKey('05'), orderId]);
    await late(990_001);
    expect(await settle(e, id)).toBe('done');
    const has = async (orderId: number) => (await e.ctx.pool.query('SELECT 1 FROM warehouse.orders WHERE order_id = $1', [orderId])).rowCount === 1;
    expect(await has(990_001)).toBe(true);
    const events = await listEvents(e.ctx.pool, id);
    expect(events.find((ev) => ev.kind === 'late_rows_kept')?.detail).toMatchObject({ partition: `${NIGHT} 05:00`, rows: 1 });

    await late(990_002);
    await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR });
    // The row written before the publish was in the partition the publish replaced: it is there again; the one
    // written after it was carried into the restored partition.
    expect(await has(990_001)).toBe(true);
    expect(await has(990_002)).toBe(true);
    expect(await dayTotal(e)).toBe((Number(NIGHT_15.signedTotal) + 20).toFixed(2));
  });

  it('two backfills of the night: #1 cannot be rolled back while #2 stands; #2 then #1 roll back, and the original partitions are live again', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const original = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    const first = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, first)).toBe('done');
    const firstPublished = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    // A small source change, then a second backfill of the same night: its swaps move #1's tables into the store.
    await e.ctx.pool.query(`UPDATE warehouse.orders_raw SET amount_local = amount_local + 40.00
      WHERE ctid = (SELECT ctid FROM warehouse.orders_raw WHERE event_hour = $1 ORDER BY order_id LIMIT 1)`, [hourKey('06')]);
    const second = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, second)).toBe('done');

    const refusal = await rollbackBackfill(e.ctx, { backfillId: first, actor: OPERATOR }).catch((error: unknown) => error);
    expect((refusal as Error).message).toMatch(new RegExp(`a later generation of its partitions stands, written by backfill #${second}`));
    await rollbackBackfill(e.ctx, { backfillId: second, actor: OPERATOR });
    expect((await Promise.all(HOURS.map((hh) => livePartition(e, hh)))).map((p) => p.oid)).toEqual(firstPublished.map((p) => p.oid));
    // Its consumers replay on the restored rows; then it holds the hours no more.
    expect(await settle(e, second)).toMatch(/^rolled_back/);
    await rollbackBackfill(e.ctx, { backfillId: first, actor: OPERATOR });
    expect((await Promise.all(HOURS.map((hh) => livePartition(e, hh)))).map((p) => p.oid)).toEqual(original.map((p) => p.oid));
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
  });

  it('a rollback is refused, and nothing is swapped, when another writer changed a row the publish wrote', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, id)).toBe('done');
    const published = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    await e.ctx.pool.query(`UPDATE warehouse.orders SET amount_base = amount_base + 1 WHERE partition_hour = $1 AND order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = $1)`, [hourKey('07')]);
    const refusal = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }).catch((error: unknown) => error);
    expect(isBackfillError(refusal, ErrorCode.WrongState)).toBe(true);
    expect((refusal as Error).message).toMatch(/2026-11-15 07:00: another writer changed rows this backfill's publish wrote \(of its 60 rows: 1 changed; order_id \d+ \(changed\)\)/);
    expect((await Promise.all(HOURS.map((hh) => livePartition(e, hh)))).map((p) => p.oid)).toEqual(published.map((p) => p.oid));
  });

  it('a publish waits for a reader holding the target, then swaps; the reader saw the prior partition whole', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    const prior = await livePartition(e, '05');
    const reader = await connect(e);
    await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const first = await reader.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = $1', [hourKey('05')]);
    let window: number | undefined;
    const publish = executeStep({ ...e.ctx, hooks: { onSwapWindow: (ms) => { window = ms; } } }, { backfillId: id, kind: 'publish', key: hourKey('05') });
    // The publish is queued behind the reader's lock on warehouse.orders, not failed and not done.
    await waitUntil(async () => (await e.ctx.pool.query(
      `SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'warehouse.orders'::regclass`)).rowCount === 1, 'the publish to wait for the reader');
    const again = await reader.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = $1', [hourKey('05')]);
    expect(again.rows[0]?.n).toBe(first.rows[0]?.n);
    await reader.query('COMMIT');
    expect(await publish).toBe('done');
    expect(window).toBeGreaterThanOrEqual(0);
    expect((await livePartition(e, '05')).oid).not.toBe(prior.oid);
  });

  it('a publish waits for the target\'s turn while another swap of it holds the turn, then takes its locks without a failed try', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    // Another swap's turn of warehouse.orders, held as that swap's transaction holds it (takeSwapTurn).
    const other = await connect(e);
    await other.query('BEGIN');
    await other.query(`SELECT pg_advisory_xact_lock(hashtextextended('swap:' || $1::text, 0))`, ['"warehouse"."orders"']);
    const failedTries: number[] = [];
    let settled = false;
    const publish = executeStep({ ...e.ctx, hooks: { onLockWait: (wait) => { failedTries.push(wait.tries); } } }, { backfillId: id, kind: 'publish', key: hourKey('05') })
      .finally(() => { settled = true; });
    await waitUntil(async () => (await e.ctx.pool.query(
      `SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name LIKE 'backfill-bot bf%publish%'`)).rowCount === 1,
    'the publish to wait for its turn');
    // Waiting for its turn, it holds nothing of the target: a writer of another hour goes on.
    await e.ctx.pool.query(`UPDATE warehouse.orders SET amount_base = amount_base WHERE order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = $1)`, [hourKey('06')]);
    expect(settled).toBe(false);
    await other.query('COMMIT');
    expect(await publish).toBe('done');
    expect(failedTries).toEqual([]);
    const recomputed = (await listEvents(e.ctx.pool, id)).find((ev) => ev.kind === 'recomputed');
    expect(recomputed?.detail).toMatchObject({ publishedBy: 'swap' });
    expect(Number(recomputed?.detail.lockWaitMs)).toBeGreaterThan(0);
  });

  it('a rollback by swap waits for the target\'s turn too, then swaps every partition back', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, id)).toBe('done');
    const other = await connect(e);
    await other.query('BEGIN');
    await other.query(`SELECT pg_advisory_xact_lock(hashtextextended('swap:' || $1::text, 0))`, ['"warehouse"."orders"']);
    let settled = false;
    const rollback = rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'swap test' }).finally(() => { settled = true; });
    await waitUntil(async () => (await e.ctx.pool.query(`SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`)).rowCount === 1, 'the rollback to wait for its turn');
    expect(settled).toBe(false);
    await other.query('COMMIT');
    expect((await rollback).restored).toHaveLength(HOURS.length);
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
  });

  it('a stop that lands between the swap and its commit fences it: the live partition and the staged table stay as they were', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    const prior = await livePartition(e, '05');
    // Forced with the publish's seam: the swap is done (uncommitted) when the stop commits.
    const ctx = { ...e.ctx, hooks: { beforeFenceCheck: async () => { await stopBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'wrong step deployed' }); } } };
    const outcome = await executeStep(ctx, { backfillId: id, kind: 'publish', key: hourKey('05') }).catch((error: unknown) => error);
    expect(outcome).not.toBe('done');
    expect((await livePartition(e, '05')).oid).toBe(prior.oid);
    expect((await storeTables(e)).filter((name) => /_g1$/.test(name))).toEqual(HOURS.map((hh) => `p20261115${hh}_b${id}_g1`));
    expect((await storeTables(e)).filter((name) => /_saved$/.test(name))).toEqual([]);
    // The written keys are staging's (recorded when each hour was staged), none of the fenced publish's.
    expect((await storeTables(e)).filter((name) => /_written$/.test(name))).toEqual(HOURS.map((hh) => `p20261115${hh}_b${id}_written`));
    const { rows } = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM backfill.preserved_partitions WHERE backfill_id = $1', [id]);
    expect(rows[0]?.n).toBe(0);
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
  });

  it('retention drops the detached tables of a pruned backfill and never a live partition; its rollback is then refused', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'swap test');
    expect(await settle(e, id)).toBe('done');
    const live = await Promise.all(HOURS.map((hh) => livePartition(e, hh)));
    const pruned = await pruneStoredRows(e.ctx, { actor: OPERATOR, includeRollbackRows: true, asOf: new Date(Date.now() + 31 * 24 * 3600 * 1000) });
    const tables = pruned.flatMap((p) => p.tables.map((t) => t.table));
    expect(tables).toEqual(expect.arrayContaining(HOURS.map((hh) => `bf_orders.p20261115${hh}_b${id}_saved`)));
    expect(await storeTables(e)).toEqual([]);
    expect((await Promise.all(HOURS.map((hh) => livePartition(e, hh)))).map((p) => [p.oid, p.rows])).toEqual(live.map((p) => [p.oid, p.rows]));
    const refusal = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }).catch((error: unknown) => error);
    expect((refusal as Error).message).toMatch(/its saved prior rows were dropped by retention/);
  });

  it('partitions wider than an hour, or a plain table, are published by rewrite', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    expect(await hourPartitionOf(e.ctx.pool, pipeline, new Date(hourKey('05')))).toMatchObject({ schema: 'warehouse', name: partitionName('05') });
    // The template partitions the other days of the month by day.
    expect(await hourPartitionOf(e.ctx.pool, pipeline, new Date('2026-11-14T05:00Z'))).toBeUndefined();
    await e.ctx.pool.query(`CREATE TABLE warehouse.plain (LIKE warehouse.orders)`);
    expect(await hourPartitionOf(e.ctx.pool, { ...pipeline, targetTable: 'warehouse.plain' }, new Date(hourKey('05')))).toBeUndefined();
  });
});
