import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acknowledge, cancelBackfill } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { executeStep } from '../../src/core/procedure.js';
import { loadBackfillCost, summarizeCosts, type BackfillCost } from '../../src/core/file/costs.js';
import { upsertBackfillCost } from '../../src/db/costs.js';
import { buildIncidentPackage } from '../../src/core/file/incidentPackage.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { toCents } from '../../src/core/money.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { listOverrideTimes } from '../../src/db/acknowledgements.js';
import { listEvents } from '../../src/db/events.js';
import { withTransaction, type Queryable } from '../../src/db/pool.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { incidentPackageJson, incidentPackageMarkdown } from '../../src/views/incidentPackage.js';
import { formatDuration } from '../../src/views/costs.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';

/**
 * The cost as the backfill's timeline says it, worked out here from the rows the run left (targets, partition
 * generations, steps, events, acknowledgements and overrides, signed figures) without the module's SQL.
 * Times come to JavaScript to the millisecond, so the durations are compared within that rounding.
 */
async function costFromTimeline(db: Queryable, backfillId: number): Promise<Omit<BackfillCost, 'filedAt'> & { steps: number }> {
  const report = await loadBackfillReport(db, backfillId);
  const events = await listEvents(db, backfillId);
  const { rows: [lineage] } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM backfill.partition_generations WHERE backfill_id = $1', [backfillId]);
  const generations = lineage?.n ?? -1;
  const published = report.targets.filter((t) => t.publishedGeneration !== null);
  expect(published).toHaveLength(generations);
  const replays = report.steps.filter((s) => s.kind === 'replay' && s.status === 'done');
  expect(replays).toHaveLength(events.filter((e) => e.kind === 'replayed').length);
  const told = events.filter((e) => e.kind === 'announcement_sent' || e.kind === 'notified').map((e) => (e.detail as { owner?: string }).owner);
  const overrides = new Map((await listOverrideTimes(db, backfillId)).map((o) => [o.consumer, o.at.getTime()]));
  const opened = report.consumers.filter((c) => c.notifyRule === 'before').map((c) => {
    const times = [c.ackedAt?.getTime(), overrides.get(c.consumer)].filter((t): t is number => t !== undefined);
    return times.length ? Math.min(...times) : undefined;
  });
  const announced = report.backfill.announcedAt.getTime();
  const gateOpened = opened.every((t) => t !== undefined) ? Math.max(announced, ...(opened as number[])) : undefined;
  const ran = report.steps.filter((s) => s.startedAt && s.finishedAt);
  return {
    rowsRewritten: published.reduce((sum, t) => sum + (t.rowsAfter ?? 0), 0),
    partitions: generations,
    replays: replays.length,
    peopleTold: new Set(told).size,
    ackWaitMs: (gateOpened ?? report.backfill.finishedAt?.getTime() ?? announced) - announced,
    computeMs: ran.reduce((sum, s) => sum + ((s.finishedAt?.getTime() ?? 0) - (s.startedAt?.getTime() ?? 0)), 0),
    signedFiguresMoved: report.signed.filter((f) => f.reportAfter !== null && toCents(f.reportAfter) !== toCents(f.signedTotal)).length,
    steps: ran.length,
  };
}

async function expectCostMatchesTimeline(db: Queryable, backfillId: number): Promise<BackfillCost> {
  const cost = await loadBackfillCost(db, backfillId);
  expect(cost, `backfill #${backfillId} has a cost filed`).toBeDefined();
  const { steps, ackWaitMs, computeMs, ...counts } = await costFromTimeline(db, backfillId);
  const filed = cost as BackfillCost;
  expect({ rowsRewritten: filed.rowsRewritten, partitions: filed.partitions, replays: filed.replays, peopleTold: filed.peopleTold, signedFiguresMoved: filed.signedFiguresMoved }).toEqual(counts);
  // Each timestamp reaches JavaScript truncated to the millisecond: one millisecond per timestamp pair, at most.
  expect(Math.abs(filed.ackWaitMs - ackWaitMs)).toBeLessThanOrEqual(2);
  expect(Math.abs(filed.computeMs - computeMs)).toBeLessThanOrEqual(steps + 1);
  return filed;
}

/** The steps of a finished backfill are all final: nothing will file its cost again. */
async function openSteps(db: Queryable, backfillId: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM backfill.backfill_steps WHERE backfill_id = $1 AND status IN ('pending', 'running', 'blocked')`, [backfillId]);
  return rows[0]?.n ?? -1;
}

describe('what a backfill cost, filed with its log row', () => {
  let engine: TestEngine;
  let night15: number;
  let cancelled: number;
  let night27: number;
  let afterRun: BackfillCost;

  beforeAll(async () => {
    engine = await createTestEngine();
    const started = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    night15 = started.backfill.id;
    await acknowledge(engine.ctx, { backfillId: night15, actor: OWNERS.settlementLead });
    expect((await acknowledge(engine.ctx, { backfillId: night15, actor: OWNERS.payouts })).approved).toBe(true);
    expect((await runUntilSettled(engine.ctx, night15, () => undefined, engine.notifier)).backfill.state).toBe('done');
  });
  afterAll(async () => engine.close());

  it('files no cost while the backfill is in flight', async () => {
    const started = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-27', reason: 'shard 3 landed late', actor: OPERATOR });
    cancelled = started.backfill.id;
    expect(await loadBackfillCost(engine.ctx.pool, cancelled)).toBeUndefined();
    expect((await buildIncidentPackage(engine.ctx.pool, cancelled)).cost).toBeNull();
    expect(incidentPackageMarkdown(await buildIncidentPackage(engine.ctx.pool, cancelled))).toContain('## Cost\n\nNot filed yet');
  });

  it('files the cost of a finished run exactly as its timeline says: rows, partitions, replays, people told, ack wait, compute, signed figures moved', async () => {
    expect(await openSteps(engine.ctx.pool, night15)).toBe(0);
    afterRun = await expectCostMatchesTimeline(engine.ctx.pool, night15);
    // Night 15: six hourly partitions, three readers re-triggered and told (two before, one after), one signed figure moved.
    expect(afterRun).toMatchObject({ partitions: 6, replays: 3, peopleTold: 3, signedFiguresMoved: 1 });
    expect(afterRun.rowsRewritten).toBeGreaterThan(0);
    expect(afterRun.computeMs).toBeGreaterThan(0);
  });

  it('files it in the transaction of the last step that committed, and filing again gives the same row, never a sum', async () => {
    const sameTx = await engine.ctx.pool.query<{ same: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM backfill.backfill_steps s WHERE s.backfill_id = c.backfill_id AND s.xmin = c.xmin) AS same
       FROM backfill.backfill_costs c WHERE c.backfill_id = $1`, [night15]);
    expect(sameTx.rows[0]?.same).toBe(true);
    // A step delivered again (a retried job) commits nothing and files nothing twice.
    expect(await executeStep({ ...engine.ctx, messenger: engine.notifier }, { backfillId: night15, kind: 'report', key: 'diff' })).toBe('already_done');
    await withTransaction(engine.ctx.pool, (tx) => upsertBackfillCost(tx, night15));
    const again = await loadBackfillCost(engine.ctx.pool, night15);
    const { filedAt: _a, ...first } = afterRun;
    const { filedAt: _b, ...second } = again as BackfillCost;
    expect(second).toEqual(first);
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfill_costs WHERE backfill_id = $1', [night15])).toBe(1);
  });

  it('carries the cost in the incident package, JSON and Markdown alike', async () => {
    const pkg = await buildIncidentPackage(engine.ctx.pool, night15);
    const cost = await loadBackfillCost(engine.ctx.pool, night15);
    expect(JSON.parse(incidentPackageJson(pkg)).cost).toEqual(JSON.parse(JSON.stringify({ ...cost, filedAt: cost?.filedAt.toISOString() })));
    const markdown = incidentPackageMarkdown(pkg);
    expect(markdown.indexOf('## Log row')).toBeLessThan(markdown.indexOf('## Cost'));
    expect(markdown).toContain(`| Rows rewritten | ${pkg.cost?.rowsRewritten} |`);
    expect(markdown).toContain('| Partitions published | 6 |');
    expect(markdown).toContain('| Replays run | 3 |');
    expect(markdown).toContain('| People told | 3 |');
    expect(markdown).toContain(`| Waited for acknowledgements | ${formatDuration(pkg.cost?.ackWaitMs ?? -1)} (${pkg.cost?.ackWaitMs} ms) |`);
    expect(markdown).toContain(`| Compute time | ${formatDuration(pkg.cost?.computeMs ?? -1)} (${pkg.cost?.computeMs} ms) |`);
    expect(markdown).toContain('| Signed figures moved | 1 |');
  });

  it('files a cancelled backfill too: the owners it told and the wait until it was cancelled, nothing rewritten', async () => {
    const before = await engine.ctx.pool.query<{ consumer: string }>(`SELECT consumer FROM backfill.backfill_consumers WHERE backfill_id = $1 AND notify_rule = 'before'`, [cancelled]);
    expect(before.rows.length).toBeGreaterThan(0);
    for (const { consumer } of before.rows) {
      expect(await executeStep({ ...engine.ctx, messenger: engine.notifier }, { backfillId: cancelled, kind: 'announce', key: consumer })).toBe('done');
    }
    await cancelBackfill(engine.ctx, { backfillId: cancelled, actor: OPERATOR, reason: 'the source team reloads the shard themselves' });
    const cost = await expectCostMatchesTimeline(engine.ctx.pool, cancelled);
    expect(cost).toMatchObject({ rowsRewritten: 0, partitions: 0, replays: 0, peopleTold: before.rows.length, signedFiguresMoved: 0 });
    const { rows } = await engine.ctx.pool.query<{ ms: number }>(
      `SELECT round(1000 * extract(epoch FROM finished_at - announced_at))::int AS ms FROM backfill.backfills WHERE id = $1`, [cancelled]);
    expect(cost.ackWaitMs).toBe(rows[0]?.ms);
  });

  it('files a rollback again, whole: its replays and messages added, the partitions it published still counted', async () => {
    await rollbackBackfill(engine.ctx, { backfillId: night15, actor: OPERATOR, reason: 'finance asked to keep the signed figure this month' });
    expect((await runUntilSettled(engine.ctx, night15, () => undefined, engine.notifier)).backfill.state).toBe('rolled_back');
    expect(await openSteps(engine.ctx.pool, night15)).toBe(0);
    const cost = await expectCostMatchesTimeline(engine.ctx.pool, night15);
    expect(cost).toMatchObject({ partitions: 6, rowsRewritten: afterRun.rowsRewritten, replays: 6, peopleTold: 3, signedFiguresMoved: 1, ackWaitMs: afterRun.ackWaitMs });
    expect(cost.computeMs).toBeGreaterThan(afterRun.computeMs);
  });

  it('sums per pipeline and quarter from a date on, counting the rolled-back and the cancelled backfill', async () => {
    const started = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-27', reason: 'shard 3 landed late', actor: OPERATOR });
    night27 = started.backfill.id;
    const readers = await engine.ctx.pool.query<{ owner: string }>(`SELECT DISTINCT owner FROM backfill.backfill_consumers WHERE backfill_id = $1 AND notify_rule = 'before'`, [night27]);
    for (const { owner } of readers.rows) await acknowledge(engine.ctx, { backfillId: night27, actor: owner });
    expect((await runUntilSettled(engine.ctx, night27, () => undefined, engine.notifier)).backfill.state).toBe('done');
    const costs = {
      night15: await expectCostMatchesTimeline(engine.ctx.pool, night15),
      cancelled: await expectCostMatchesTimeline(engine.ctx.pool, cancelled),
      night27: await expectCostMatchesTimeline(engine.ctx.pool, night27),
    };
    // The log rows are dated so the quarters do not depend on the day the test runs: the rolled-back night 15 and
    // night 27 in 2026-Q4, the cancelled one in the last minutes of 2026-Q3 and of another pipeline.
    await engine.ctx.pool.query(`INSERT INTO backfill.pipelines (name, target_table, partition_column, key_columns, measure_column, step_sql, source_shards_sql, shards_expected)
      SELECT 'returns', target_table, partition_column, key_columns, measure_column, step_sql, source_shards_sql, shards_expected FROM backfill.pipelines WHERE name = 'orders'`);
    await engine.ctx.pool.query(`UPDATE backfill.backfills SET announced_at = $2 WHERE id = $1`, [night15, '2026-10-05T09:00:00Z']);
    await engine.ctx.pool.query(`UPDATE backfill.backfills SET announced_at = $2 WHERE id = $1`, [night27, '2026-11-28T09:00:00Z']);
    await engine.ctx.pool.query(`UPDATE backfill.backfills SET announced_at = $2, pipeline = 'returns' WHERE id = $1`, [cancelled, '2026-09-30T23:30:00Z']);

    const q4 = await summarizeCosts(engine.ctx.pool, '2026-10-01');
    const sum = (key: keyof Omit<BackfillCost, 'filedAt'>) => costs.night15[key] + costs.night27[key];
    expect(q4).toEqual({ since: '2026-10-01', rows: [{
      pipeline: 'orders', quarter: '2026-Q4', backfills: 2, done: 1,
      partitions: sum('partitions'), rowsRewritten: sum('rowsRewritten'), replays: sum('replays'), peopleTold: sum('peopleTold'),
      ackWaitMs: sum('ackWaitMs'), medianAckWaitMs: Math.round(sum('ackWaitMs') / 2), computeMs: sum('computeMs'), signedFiguresMoved: sum('signedFiguresMoved'),
    }] });
    const fromQ3 = await summarizeCosts(engine.ctx.pool, '2026-09-30');
    expect(fromQ3.rows.map((r) => [r.quarter, r.pipeline, r.backfills, r.done])).toEqual([['2026-Q3', 'returns', 1, 0], ['2026-Q4', 'orders', 2, 1]]);
    expect(fromQ3.rows[0]).toMatchObject({ partitions: 0, peopleTold: costs.cancelled.peopleTold, ackWaitMs: costs.cancelled.ackWaitMs, medianAckWaitMs: costs.cancelled.ackWaitMs });
    expect((await summarizeCosts(engine.ctx.pool, '2026-12-01')).rows).toEqual([]);
  });
});
