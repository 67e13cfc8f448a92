import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { approveCapacity, overrideGate } from '../../src/core/announce/gate.js';
import { lockPartition, replacePartition, snapshotPartition } from '../../src/core/recompute/partitionStep.js';
import { planBackfill } from '../../src/core/identify/plan.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { executeStep } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { withTransaction } from '../../src/db/pool.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { approvedNight15, countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { storedRows } from '../support/storedRows.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const HOURS = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00Z`);
const dayTotal = `SELECT sum(amount_base)::text AS t, count(*)::int AS n FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`;
const canaryRows = 'SELECT order_id::text AS id, amount_base::text AS amount FROM warehouse.orders WHERE partition_hour = $1 ORDER BY order_id';

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function kinds(e: TestEngine, id: number): Promise<string[]> {
  return (await listEvents(e.ctx.pool, id)).map((event) => event.kind);
}

describe('stop and the fence', () => {
  // The fence here is the state check of checkClaim: the stop moved the backfill to stopped under its row lock,
  // and the publish's commit check, reading the state under the same lock, refuses (WrongState, write_fenced).
  it('refuses the commit of a worker that was already publishing when the backfill was stopped; live data untouched', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    for (const key of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key })).toBe('done');
    const before = (await e.ctx.pool.query(dayTotal)).rows[0];
    const canaryBefore = (await e.ctx.pool.query(canaryRows, [HOURS[0]])).rows;
    // The worker publishing the canary has done its writes when the stop lands; it then reaches its commit.
    const outcome = await executeStep({
      ...e.ctx,
      hooks: { beforeFenceCheck: async () => { await stopBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'wrong step version deployed' }); } },
    }, { backfillId: id, kind: 'publish', key: HOURS[0] as string });
    expect(outcome).toBe('not_runnable');
    expect((await e.ctx.pool.query(dayTotal)).rows[0]).toEqual(before);
    expect(before?.t).toBe(NIGHT_15.signedTotal);
    // The partition it was publishing holds exactly the rows it held, none of them saved as replaced, no generation recorded.
    expect((await e.ctx.pool.query(canaryRows, [HOURS[0]])).rows).toEqual(canaryBefore);
    expect(await countRows(e.ctx, `SELECT 1 FROM ${await storedRows(e.ctx.pool, 'saved')} WHERE bf_backfill = $1`, [id])).toBe(0);
    expect(await countRows(e.ctx, 'SELECT 1 FROM backfill.partition_generations WHERE backfill_id = $1', [id])).toBe(0);
    const { rows: step } = await e.ctx.pool.query(`SELECT status FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind = 'publish' AND step_key = $2`, [id, HOURS[0]]);
    expect(step[0]).toEqual({ status: 'skipped' });
    const { rows } = await e.ctx.pool.query('SELECT state, stopped_by, stop_reason FROM backfill.backfills WHERE id = $1', [id]);
    expect(rows[0]).toEqual({ state: 'stopped', stopped_by: OPERATOR, stop_reason: 'wrong step version deployed' });
    // Nothing else of it runs: its remaining steps are skipped, and a late delivery of one does nothing.
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: HOURS[1] as string })).toBe('already_done');
    const timeline = await kinds(e, id);
    expect(timeline).toContain('stopped');
    const fenced = (await listEvents(e.ctx.pool, id)).find((event) => event.kind === 'write_fenced');
    expect(fenced?.detail.message).toBe(`backfill #${id} is stopped: publish ${HOURS[0]} does not commit, and its writes are rolled back`);
    expect(timeline.filter((k) => k === 'staged')).toHaveLength(6);
    expect(timeline).not.toContain('recomputed');
  });
});

describe('canary, waves, and what stops them', () => {
  it('publishes the canary alone, then waves of the configured size, each after the one before', async () => {
    engine = await createTestEngine('month-end', { WAVE_SIZE: '2' });
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe(NIGHT_15.diff);
    expect(report.targets.map((t) => t.wave)).toEqual([0, 1, 1, 2, 2, 3]);
    const published = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'recomputed').map((ev) => String(ev.detail.partition).slice(11, 13));
    const position = (hour: string) => published.indexOf(hour);
    expect(position('05')).toBe(0);
    expect(Math.max(position('06'), position('07'))).toBeLessThan(Math.min(position('08'), position('09')));
    expect(Math.max(position('08'), position('09'))).toBeLessThan(position('10'));
    const recon = await e.ctx.pool.query(`SELECT phase, sum(keys_missing)::int AS missing, sum(keys_added)::int AS added, sum(keys_duplicated)::int AS dup FROM backfill.reconciliations WHERE backfill_id = $1 GROUP BY phase ORDER BY phase`, [id]);
    expect(recon.rows).toEqual([{ phase: 'published', missing: 0, added: 0, dup: 0 }, { phase: 'staged', missing: 0, added: 0, dup: 0 }]);
    expect(e.notifier.reconciliations).toEqual([id]);
  });

  it('stops the expansion at the canary on a difference the plan did not predict, keeping both generations', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    // After the announcement, three orders of the canary hour vanish from the source: keys would be lost.
    await e.ctx.pool.query(`DELETE FROM warehouse.orders_raw WHERE order_id IN (SELECT order_id FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z' ORDER BY order_id LIMIT 3)`);
    const paused = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(paused.backfill.state).toBe('paused');
    expect(paused.backfill.pausedReason).toBe('2026-11-15 05:00: 3 key(s) would be lost, which the plan did not predict');
    expect(paused.steps.filter((s) => s.kind === 'publish' && s.status === 'done')).toHaveLength(0);
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.signedTotal);
    // The canary's staged rows are kept for the operator's decision; later hours may or may not have been staged
    // when it paused (they stage while it publishes), and a continue stages the rest.
    const staged = await e.ctx.pool.query(`SELECT count(*)::int AS n FROM ${await storedRows(e.ctx.pool, 'staged')} WHERE bf_backfill = $1 AND partition_hour = '2026-11-15T05:00Z'`, [id]);
    expect(staged.rows[0].n).toBeGreaterThan(0);
    expect(e.notifier.reconciliations).toEqual([id]);
    await expect(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: ' ' })).rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.BadInput));
    await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the three orders were cancelled upstream; finance agrees' });
    const done = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(done.backfill.state).toBe('done');
    expect(await kinds(e, id)).toEqual(expect.arrayContaining(['paused', 'continued', 'finished']));
  });

  it('blocks the publish when the staged data has duplicate keys, and will not accept it', async () => {
    engine = await createTestEngine();
    const e = engine;
    // A stable key that is not unique: the staged rows of every hour share merchant ids.
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET key_columns = '{merchant_id}' WHERE name = 'orders'`);
    const id = await approvedNight15(e.ctx, 'recovery test');
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('paused');
    expect(report.backfill.pausedReason).toMatch(/^2026-11-15 05:00: \d+ duplicate key\(s\) in the staged data: the publish is blocked$/);
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.signedTotal);
    await expect(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'ship it' }))
      .rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.WrongState) && /duplicate keys .* cannot be accepted/.test(err.message));
  });
});

describe.each([
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
] as const)('the mechanical failure, $shape target (publish by $by)', ({ scenario, by }) => {
  it('replaces a partition whose rows an appending step doubled, on a target without a unique key, and a rollback puts the doubled rows back', async () => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const canary = `partition_hour = '2026-11-15T05:00Z'`;
    // A target with no unique key, and a step that appended: every row of the canary hour is there twice.
    await e.ctx.pool.query(`DO $$ BEGIN
      EXECUTE (SELECT format('ALTER TABLE warehouse.orders DROP CONSTRAINT %I', conname) FROM pg_constraint WHERE conrelid = 'warehouse.orders'::regclass AND contype = 'p');
    END $$`);
    await e.ctx.pool.query(`INSERT INTO warehouse.orders SELECT * FROM warehouse.orders WHERE ${canary}`);
    const doubled = await e.ctx.pool.query<{ n: number; keys: number }>(`SELECT count(*)::int AS n, count(DISTINCT order_id)::int AS keys FROM warehouse.orders WHERE ${canary}`);
    expect(doubled.rows[0]?.n).toBe(2 * (doubled.rows[0]?.keys ?? 0));

    const id = await approvedNight15(e.ctx, 'recovery test');
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    const after = await e.ctx.pool.query<{ n: number; keys: number }>(`SELECT count(*)::int AS n, count(DISTINCT order_id)::int AS keys FROM warehouse.orders WHERE ${canary}`);
    expect(after.rows[0]?.n).toBe(after.rows[0]?.keys);
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.correctedTotal);
    // The published snapshot is the partition's, the replaced rows counted twice as they were.
    const target = await e.ctx.pool.query<{ rowsBefore: number; rowsAfter: number }>(
      `SELECT rows_before::int AS "rowsBefore", rows_after::int AS "rowsAfter" FROM backfill.backfill_targets WHERE backfill_id = $1 AND partition_hour = '2026-11-15T05:00Z'`, [id]);
    expect(target.rows[0]).toEqual({ rowsBefore: doubled.rows[0]?.n, rowsAfter: after.rows[0]?.n });
    const published = (await listEvents(e.ctx.pool, id)).filter((ev) => ev.kind === 'recomputed').map((ev) => ev.detail.publishedBy);
    expect(new Set(published)).toEqual(new Set([by]));

    await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'recovery test' });
    const restored = await e.ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM warehouse.orders WHERE ${canary}`);
    expect(restored.rows[0]?.n).toBe(doubled.rows[0]?.n);
  });
});

describe('rollback', () => {
  it('restores exactly the prior rows and totals, and replays the consumers on them', async () => {
    engine = await createTestEngine();
    const e = engine;
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    const prior = await Promise.all(HOURS.map((h) => snapshotPartition(e.ctx.pool, pipeline, new Date(h))));
    const id = await approvedNight15(e.ctx, 'recovery test');
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.correctedTotal);
    const { restored } = await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR });
    expect(restored).toHaveLength(6);
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('rolled_back');
    expect(await Promise.all(HOURS.map((h) => snapshotPartition(e.ctx.pool, pipeline, new Date(h))))).toEqual(prior);
    expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.signedTotal);
    const payout = await e.ctx.pool.query(`SELECT total::text FROM warehouse.payout_export WHERE report_date = '2026-11-15'`);
    expect(payout.rows[0].total).toBe(NIGHT_15.signedTotal);
    const replays = report.steps.filter((s) => s.kind === 'replay' && s.key.endsWith('@rollback'));
    expect(replays.map((s) => s.status)).toEqual(['done', 'done', 'done']);
    const settle = replays.find((s) => s.key === 'settlement_report@rollback');
    const payoutStep = replays.find((s) => s.key === 'payout_export@rollback');
    expect(payoutStep?.startedAt?.getTime()).toBeGreaterThanOrEqual(settle?.finishedAt?.getTime() ?? Infinity);
    expect(e.notifier.sent.filter((m) => m.text.includes('was rolled back')).map((m) => m.owner).sort()).toEqual(['U07FORECAST', 'U07PAYOUTS', 'U07SETTLE']);
    const timeline = await kinds(e, id);
    expect(timeline.indexOf('finished')).toBeLessThan(timeline.indexOf('rolled_back'));
    expect(timeline.slice(timeline.indexOf('rolled_back'))).toEqual(expect.arrayContaining(['replayed', 'notified', 'diff_posted']));
  });

  it('refuses when another writer changed a row the publish wrote, naming the partition, and changes nothing', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    // A correction by hand to one published order: restoring the prior rows would silently undo it.
    await e.ctx.pool.query(`UPDATE warehouse.orders SET amount_base = amount_base + 1 WHERE order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = '2026-11-15T07:00Z')`);
    const before = (await e.ctx.pool.query(dayTotal)).rows[0];
    await expect(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }))
      .rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.WrongState) && /2026-11-15 07:00: another writer changed rows this backfill's publish wrote \(of its 60 rows: 1 changed; order_id \d+ \(changed\)\), and restoring would lose those writes/.test(err.message));
    expect((await e.ctx.pool.query(dayTotal)).rows[0]).toEqual(before);
    expect((await e.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = $1', [id])).rows[0].state).toBe('done');
  });
});

// A publish before rowsChecksum (src/db/partitions.ts) recorded the md5 of its rows' text in key order: a rollback
// after the upgrade checks the partition in that form, or it would take every such partition for one changed since.
const LEGACY_CHECKSUM = `md5(coalesce(string_agg(t::text, '|' ORDER BY t.order_id), ''))`;

describe.each([['plain', 'month-end', 'rewrite'], ['partitioned by hour', 'month-end-partitioned', 'swap']] as const)(
  'rollback of a publish that recorded its checksum in the earlier form, target %s (publish by %s)', (_shape, scenario, _by) => {
    async function publishedInEarlierForm(e: TestEngine): Promise<number> {
      const id = await approvedNight15(e.ctx, 'recovery test');
      expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
      const { rowCount } = await e.ctx.pool.query(
      `UPDATE backfill.backfill_targets bt SET published_checksum = (SELECT ${LEGACY_CHECKSUM} FROM warehouse.orders t WHERE t.partition_hour = bt.partition_hour)
       WHERE backfill_id = $1 AND published_checksum LIKE 'h1:%'`, [id]);
      expect(rowCount).toBe(HOURS.length);
      return id;
    }

    it('restores the prior rows', async () => {
      engine = await createTestEngine(scenario);
      const e = engine;
      const id = await publishedInEarlierForm(e);
      expect((await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR })).restored).toHaveLength(HOURS.length);
      expect((await e.ctx.pool.query(dayTotal)).rows[0]?.t).toBe(NIGHT_15.signedTotal);
    });

    it('refuses when another writer changed a row the publish wrote', async () => {
      engine = await createTestEngine(scenario);
      const e = engine;
      const id = await publishedInEarlierForm(e);
      await e.ctx.pool.query(`UPDATE warehouse.orders SET amount_base = amount_base + 1 WHERE order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = '2026-11-15T07:00Z')`);
      await expect(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }))
        .rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.WrongState) && /2026-11-15 07:00: another writer changed rows this backfill's publish wrote/.test(err.message));
      expect((await e.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = $1', [id])).rows[0].state).toBe('done');
    });
  });

/** A late raw order for the hour, then the normal step for that hour under the shared partition lock. */
async function addLateOrder(e: TestEngine, hour: string, orderId: number): Promise<void> {
  const pipeline = await requirePipeline(e.ctx.pool, 'orders');
  await withTransaction(e.ctx.pool, async (tx) => {
    await lockPartition(tx, 'orders', new Date(hour));
    await tx.query(
      `INSERT INTO warehouse.orders_raw (order_id, shard, event_hour, merchant_id, currency_raw, amount_local, landed_at)
       VALUES ($1, 1, $2, 4242, 'USD', 100.00, now())`, [orderId, hour]);
    await replacePartition(tx, pipeline, new Date(hour));
  });
}

describe('writes that race the backfill', () => {
  it('keeps late rows that normal ingestion wrote between staging and publish', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    for (const key of HOURS) await executeStep(e.ctx, { backfillId: id, kind: 'stage', key });
    await addLateOrder(e, '2026-11-15T06:00Z', 999000002);
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    const late = await e.ctx.pool.query(`SELECT amount_base::text FROM warehouse.orders WHERE order_id = 999000002`);
    expect(late.rows).toEqual([{ amount_base: '100.00' }]);
    const recon = await e.ctx.pool.query(`SELECT late_rows FROM backfill.reconciliations WHERE backfill_id = $1 AND phase = 'published' AND partition_hour = '2026-11-15T06:00Z'`, [id]);
    expect(recon.rows[0].late_rows).toBe(1);
    expect(await kinds(e, id)).toContain('late_rows_kept');
  });

  it('names a late row it carried, deleted since by another writer, when it refuses a rollback', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    for (const key of HOURS) await executeStep(e.ctx, { backfillId: id, kind: 'stage', key });
    await addLateOrder(e, '2026-11-15T06:00Z', 999000002);
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    // The step kept every live key, so staging's baseline holds none; it was kept all the same (a table of its own).
    const baseline = await e.ctx.pool.query(`SELECT count(*)::int AS n FROM bf_orders."p2026111506_b${id}_g1_baseline"`);
    expect(baseline.rows).toEqual([{ n: 0 }]);
    await e.ctx.pool.query('DELETE FROM warehouse.orders WHERE order_id = 999000002');
    await expect(rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR }))
      .rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.WrongState) && /2026-11-15 06:00: another writer changed rows this backfill's publish wrote \(of its 60 rows: 1 removed; order_id 999000002 \(removed\)\)/.test(err.message));
  });

  it('loses none of the rows a writer keeps adding while the backfill runs', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'recovery test');
    const written: number[] = [];
    let running = true;
    const writer = (async () => {
      for (let n = 0; running && n < 40; n += 1) {
        const orderId = 999100000 + n;
        await addLateOrder(e, HOURS[n % HOURS.length] as string, orderId);
        written.push(orderId);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    })();
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    running = false;
    await writer;
    expect(['done', 'paused']).toContain(report.backfill.state);
    const found = await e.ctx.pool.query('SELECT count(*)::int AS n FROM warehouse.orders WHERE order_id = ANY($1::bigint[])', [written]);
    expect(written.length).toBeGreaterThan(0);
    expect(found.rows[0].n).toBe(written.length);
  });
});

describe('source unavailable', () => {
  it('marks the partition unavailable, leaves it as it was, and the diff says so', async () => {
    engine = await createTestEngine();
    const e = engine;
    const pipeline = await requirePipeline(e.ctx.pool, 'orders');
    const id = await approvedNight15(e.ctx, 'recovery test');
    await e.ctx.pool.query(`DELETE FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T10:00Z'`);
    const prior = await snapshotPartition(e.ctx.pool, pipeline, new Date('2026-11-15T10:00Z'));
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.targets.map((t) => t.status)).toEqual(['published', 'published', 'published', 'published', 'published', 'unavailable']);
    expect(await snapshotPartition(e.ctx.pool, pipeline, new Date('2026-11-15T10:00Z'))).toEqual(prior);
    const { renderDiff } = await import('../../src/views/text.js');
    expect(renderDiff(report)).toContain('unavailable  2026-11-15 10:00 (source missing; left as it was, nothing invented)');
    expect(await kinds(e, id)).toContain('unavailable');
  });
});

describe('frozen plans and the capacity gate', () => {
  it('starts exactly what a plan previewed, and refuses a plan whose inputs changed, naming them', async () => {
    engine = await createTestEngine();
    const e = engine;
    const request = { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR };
    const stale = await planBackfill(e.ctx, request);
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET step_sql = step_sql || ' -- hotfix 2' WHERE name = 'orders'`);
    await e.ctx.pool.query(`INSERT INTO backfill.read_log (consumer, pipeline, partition_hour, read_at) VALUES ('marketing_weekly', 'orders', '2026-11-15T06:00Z', now())`);
    await expect(startBackfill(e.ctx, { ...request, planId: stale.planId }))
      .rejects.toSatisfy((err: unknown) => isBackfillError(err) && /Plan #\d+ is out of date: its consumers, step changed/.test(err.message));
    expect((await e.ctx.pool.query('SELECT count(*)::int AS n FROM backfill.backfills')).rows[0].n).toBe(0);
    const fresh = await planBackfill(e.ctx, request);
    const { backfill } = await startBackfill(e.ctx, { ...request, planId: fresh.planId });
    expect(backfill.partitionCount).toBe(6);
    expect((await e.ctx.pool.query('SELECT plan_id FROM backfill.backfills WHERE id = $1', [backfill.id])).rows[0].plan_id).toBe(fresh.planId);
  });

  it('needs a second operator to approve a backfill above the capacity limit; an override does not stand in', async () => {
    engine = await createTestEngine('month-end', { CAPACITY_LIMIT: '4' });
    const e = engine;
    const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    const overridden = await overrideGate(e.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'owners agreed' });
    expect(overridden.approved).toBe(false);
    expect(overridden.waitingFor).toEqual([{ consumer: 'capacity approval', owner: 'a second operator' }]);
    await expect(approveCapacity(e.ctx, { backfillId: backfill.id, actor: OPERATOR }))
      .rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.NotAllowed) && /cannot also be its second approval/.test(err.message));
    const approved = await approveCapacity(e.ctx, { backfillId: backfill.id, actor: 'U07LEAD' });
    expect(approved.approved).toBe(true);
    expect(await kinds(e, backfill.id)).toEqual(expect.arrayContaining(['overridden', 'capacity_approved', 'approved']));
  });
});
