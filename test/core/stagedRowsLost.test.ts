// Rows staged for a publish by rewrite, in tables of the run's own, are not written to the WAL (an UNLOGGED table:
// the step can make them again), and PostgreSQL empties every such table when it recovers from a crash. The rows a
// publish saves are the prior state, and are written like the target's. A publish that finds its staged rows gone
// stages the hour again in its own transaction; a rollback that finds them gone after the publish tells the rows
// the publish wrote by the partition's checksum, and refuses when another writer has written beside them.
// Here the crash's emptying is TRUNCATE of the staged tables (the shared PostgreSQL is not ours to crash);
// test/faults.test.ts crashes a PostgreSQL of its own mid-backfill. Night 15 on the demo's plain target, every
// hour staged apart (SWAP_MIN_ROWS 0). Real PostgreSQL and queues.

import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { executeStep } from '../../src/core/procedure.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { listEvents } from '../../src/db/events.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const HOURS = ['05', '06', '07', '08', '09', '10'];
const hourKey = (hh: string) => `2026-11-15T${hh}:00Z`;
const OPERATOR = 'U07ONCALL';

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function dayTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(
    `SELECT sum(amount_base)::numeric(18,2)::text AS total FROM warehouse.orders WHERE partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`);
  return rows[0]?.total ?? '';
}

/** Each hour's rows of warehouse.orders in key order, as text. */
async function hourRows(e: TestEngine): Promise<string[]> {
  return Promise.all(HOURS.map(async (hh) => {
    const { rows } = await e.ctx.pool.query<{ rows: string }>(
      `SELECT string_agg(o::text, '|' ORDER BY o.order_id) AS rows FROM warehouse.orders o WHERE o.partition_hour = $1`, [hourKey(hh)]);
    return rows[0]?.rows ?? '';
  }));
}

/** The run's tables of its own for a rewrite, with their persistence ('u' unlogged, 'p' written to the WAL) and rows. */
async function rewriteTables(e: TestEngine, id: number): Promise<{ name: string; persistence: string; rows: number }[]> {
  const { rows } = await e.ctx.pool.query<{ name: string; persistence: string }>(
    `SELECT c.relname AS name, c.relpersistence AS persistence FROM pg_class c
     WHERE c.relnamespace = 'bf_orders'::regnamespace AND c.relkind = 'r' AND c.relname ~ ('_b' || $1::text || '_g1_(staged|saved)$') ORDER BY c.relname`, [id]);
  return Promise.all(rows.map(async (row) => {
    const { rows: [counted] } = await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM bf_orders.${row.name}`);
    return { ...row, rows: counted?.n ?? -1 };
  }));
}

/** What PostgreSQL's crash recovery does to an unlogged table: it is left empty. */
async function loseStagedRows(e: TestEngine, id: number): Promise<number> {
  const staged = (await rewriteTables(e, id)).filter((table) => table.name.endsWith('_staged'));
  await e.ctx.pool.query(`TRUNCATE ${staged.map((table) => `bf_orders.${table.name}`).join(', ')}`);
  return staged.length;
}

/**
 * An order of `hh` that landed in the source after the hour was signed: the backfill's rows of that hour have a key
 * the partition did not, so the rows its publish wrote are not all among the keys it saved.
 */
async function landNewOrder(e: TestEngine, hh: string, orderId: number): Promise<void> {
  await e.ctx.pool.query(
    `INSERT INTO warehouse.orders_raw (order_id, shard, event_hour, merchant_id, currency_raw, amount_local, landed_at)
     VALUES ($1, 1, $2, 7, 'SEK', 250.00, $2::timestamptz + interval '10 minutes')`, [orderId, hourKey(hh)]);
}

async function stageEveryHour(e: TestEngine, id: number): Promise<void> {
  for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
}

describe('rows staged for a rewrite, unlogged', () => {
  it('stages into an unlogged table and saves into a logged one; a publish that finds its staged rows gone stages the hour again first, and night 15 ends exactly', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'staged rows lost test');
    await stageEveryHour(e, id);

    const tables = await rewriteTables(e, id);
    expect(tables).toHaveLength(HOURS.length * 2);
    for (const table of tables) {
      expect({ name: table.name, persistence: table.persistence }).toEqual({ name: table.name, persistence: table.name.endsWith('_staged') ? 'u' : 'p' });
      // Staged, not yet published: the staged tables hold the hour's rows, the saved ones nothing yet.
      if (table.name.endsWith('_staged')) expect(table.rows).toBeGreaterThan(0);
      else expect(table.rows).toBe(0);
    }

    expect(await loseStagedRows(e, id)).toBe(HOURS.length);
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe(NIGHT_15.diff);
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);

    // Each hour was staged twice: by its stage, then by its publish, which said why.
    const staged = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'staged');
    expect(staged).toHaveLength(HOURS.length * 2);
    const again = staged.filter((ev) => ev.detail.again !== undefined);
    expect(again.map((ev) => ev.detail.partition).sort()).toEqual(HOURS.map((hh) => `2026-11-15 ${hh}:00`));
    expect(again[0]?.detail.again).toMatch(/unlogged table/);
    // The published hours hold the staged rows again (written anew by the publish's own staging).
    for (const table of await rewriteTables(e, id)) expect(table.rows).toBeGreaterThan(0);
  });

  it('a rollback after the staged rows are gone puts the prior rows back when the partitions hold exactly what the publish wrote', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const before = await hourRows(e);
    await landNewOrder(e, '06', 990_601);
    const id = await approvedNight15(e.ctx, 'staged rows lost test');
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    expect((await e.ctx.pool.query('SELECT 1 FROM warehouse.orders WHERE order_id = 990601')).rowCount).toBe(1);
    // Ingestion writes a row of a new key into 08 after its publish: it is not the publish's, and stays.
    await e.ctx.pool.query(
      `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
       VALUES ($1, 990801, 1, 7, 'SEK', 100.00, 0.1, 10.00)`, [hourKey('08')]);

    expect(await loseStagedRows(e, id)).toBe(HOURS.length);
    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'staged rows lost test' });
    expect(restored).toHaveLength(HOURS.length);
    // 06 by all its live rows (its publish wrote a key it had not saved), 08 by its saved keys (the late row has
    // another): each put back exactly, the late row kept.
    const { rows: late } = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE order_id IN (990601, 990801)');
    expect(late[0]?.n).toBe(1);
    await e.ctx.pool.query('DELETE FROM warehouse.orders WHERE order_id = 990801');
    expect(await dayTotal(e)).toBe(NIGHT_15.signedTotal);
    expect(await hourRows(e)).toEqual(before);
  });

  it('a rollback after the staged rows are gone is refused, changing nothing, when another writer wrote into a published partition since', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    await landNewOrder(e, '07', 990_701);
    const id = await approvedNight15(e.ctx, 'staged rows lost test');
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    // Normal ingestion writes a row into 07 after its publish, which wrote a key it had not saved: neither the
    // saved keys nor the whole partition are what the publish wrote.
    await e.ctx.pool.query(
      `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
       VALUES ($1, 990555, 1, 7, 'SEK', 100.00, 0.1, 10.00)`, [hourKey('07')]);
    const after = await hourRows(e);
    expect(await loseStagedRows(e, id)).toBe(HOURS.length);

    const refusal = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'staged rows lost test' }).then(() => undefined, (error: unknown) => error);
    expect(isBackfillError(refusal) && refusal.code).toBe(ErrorCode.WrongState);
    const message = (refusal as Error).message;
    expect(message).toContain('2026-11-15 07:00');
    expect(message).toMatch(/staged are gone .*unlogged tables/);
    // Only 07 is named: every other hour holds exactly what its publish wrote, by its saved keys.
    expect(message.match(/2026-11-15 \d\d:00/g)).toEqual(['2026-11-15 07:00']);
    expect(await hourRows(e)).toEqual(after);
  });
});
