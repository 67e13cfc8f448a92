// A publish by rewrite takes the checksum of the rows it writes from staging (the staged rows'), with a plain
// INSERT, only where the target stores exactly the rows inserted: no row trigger before or instead of an insert,
// no rule on insert, on the target or any of its partitions. With one that changes rows, the rows written are
// checksummed as they were stored, so a rollback still finds them as the publish recorded them. Real PostgreSQL
// and queues.

import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { rowStoreOf } from '../../src/core/recompute/rowStore.js';
import { snapshotPartition } from '../../src/core/recompute/partitionStep.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { storesRowsAsInserted } from '../../src/db/rewrite.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';
const HOURS = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00Z`);

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function publishedChecksums(e: TestEngine, id: number): Promise<(string | null)[]> {
  const { rows } = await e.ctx.pool.query<{ checksum: string | null }>(
    'SELECT published_checksum AS checksum FROM backfill.backfill_targets WHERE backfill_id = $1 ORDER BY partition_hour', [id]);
  return rows.map((row) => row.checksum);
}

describe('the checksum of the rows a publish by rewrite writes', () => {
  it('is staging\'s where the target stores rows as inserted, and a rollback restores the night', async () => {
    engine = await createTestEngine();
    const e = engine;
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    expect(await storesRowsAsInserted(e.ctx.pool, await rowStoreOf(e.ctx.pool, pipeline))).toBe(true);
    const id = await approvedNight15(e.ctx, 'checksum test');
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    // What each publish recorded is the checksum of the hour's live rows, which are the staged ones.
    const { rows: staged } = await e.ctx.pool.query<{ checksum: string }>(
      `SELECT staged_checksum AS checksum FROM backfill.reconciliations WHERE backfill_id = $1 AND phase = 'staged' ORDER BY partition_hour`, [id]);
    const live = await Promise.all(HOURS.map(async (h) => (await snapshotPartition(e.ctx.pool, pipeline, new Date(h))).checksum));
    expect(await publishedChecksums(e, id)).toEqual(live);
    expect(staged.map((row) => row.checksum)).toEqual(live);
    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR });
    expect(restored).toHaveLength(6);
  });

  it('is taken of the rows as stored where a trigger changes them, and a rollback is not refused for it', async () => {
    engine = await createTestEngine();
    const e = engine;
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    // Stores every currency in lower case: the rows written are not the staged ones.
    await e.ctx.pool.query(`CREATE FUNCTION warehouse.lower_currency() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN NEW.currency := lower(NEW.currency); RETURN NEW; END $$;
      CREATE TRIGGER lower_currency BEFORE INSERT ON warehouse.orders FOR EACH ROW EXECUTE FUNCTION warehouse.lower_currency()`);
    expect(await storesRowsAsInserted(e.ctx.pool, await rowStoreOf(e.ctx.pool, pipeline))).toBe(false);
    const id = await approvedNight15(e.ctx, 'checksum test');
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    const { rows: lowered } = await e.ctx.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM warehouse.orders WHERE partition_hour = ANY ($1::timestamptz[]) AND currency <> lower(currency)`, [HOURS]);
    expect(lowered[0]?.n).toBe(0);
    const live = await Promise.all(HOURS.map(async (h) => (await snapshotPartition(e.ctx.pool, pipeline, new Date(h))).checksum));
    expect(await publishedChecksums(e, id)).toEqual(live);
    // Had the publish recorded the staged rows' checksum, this rollback would be refused: "another writer changed rows".
    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR });
    expect(restored).toHaveLength(6);
  });

  it('holds only where no trigger or rule on insert can change a row, on the target or a partition of it', async () => {
    engine = await createTestEngine();
    const e = engine;
    const store = await rowStoreOf(e.ctx.pool, await requirePipeline(e.ctx.pool, 'orders'));
    const asInserted = () => storesRowsAsInserted(e.ctx.pool, store);
    await e.ctx.pool.query(`CREATE FUNCTION warehouse.pass() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`);
    const cases: [string, string, boolean][] = [
      ['an AFTER row trigger', 'CREATE TRIGGER t AFTER INSERT ON warehouse.orders FOR EACH ROW EXECUTE FUNCTION warehouse.pass()', true],
      ['a BEFORE statement trigger', 'CREATE TRIGGER t BEFORE INSERT ON warehouse.orders FOR EACH STATEMENT EXECUTE FUNCTION warehouse.pass()', true],
      ['a BEFORE UPDATE row trigger', 'CREATE TRIGGER t BEFORE UPDATE ON warehouse.orders FOR EACH ROW EXECUTE FUNCTION warehouse.pass()', true],
      ['a BEFORE INSERT row trigger', 'CREATE TRIGGER t BEFORE INSERT ON warehouse.orders FOR EACH ROW EXECUTE FUNCTION warehouse.pass()', false],
      ['a BEFORE INSERT OR UPDATE row trigger, disabled', 'CREATE TRIGGER t BEFORE INSERT OR UPDATE ON warehouse.orders FOR EACH ROW EXECUTE FUNCTION warehouse.pass(); ALTER TABLE warehouse.orders DISABLE TRIGGER t', true],
      ['a BEFORE INSERT row trigger enabled for replicas only', 'CREATE TRIGGER t BEFORE INSERT ON warehouse.orders FOR EACH ROW EXECUTE FUNCTION warehouse.pass(); ALTER TABLE warehouse.orders ENABLE REPLICA TRIGGER t', false],
      ['a rule on insert', 'CREATE RULE t AS ON INSERT TO warehouse.orders DO ALSO NOTIFY orders_written', false],
    ];
    for (const [what, ddl, expected] of cases) {
      await e.ctx.pool.query('BEGIN');
      try {
        await e.ctx.pool.query(ddl);
        expect({ what, asInserted: await asInserted() }).toEqual({ what, asInserted: expected });
      } finally {
        await e.ctx.pool.query('ROLLBACK');
      }
    }
  });

  it('looks at the partitions of a partitioned target too', async () => {
    engine = await createTestEngine('month-end-partitioned');
    const e = engine;
    const store = await rowStoreOf(e.ctx.pool, await requirePipeline(e.ctx.pool, 'orders'));
    expect(await storesRowsAsInserted(e.ctx.pool, store)).toBe(true);
    await e.ctx.pool.query(`CREATE FUNCTION warehouse.pass() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
      CREATE TRIGGER t BEFORE INSERT ON warehouse.orders_p2026111507 FOR EACH ROW EXECUTE FUNCTION warehouse.pass()`);
    expect(await storesRowsAsInserted(e.ctx.pool, store)).toBe(false);
  });
});
