import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acknowledge } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { listEvents } from '../../src/db/events.js';
import { createTestEngine, countRows, type TestEngine } from '../support/engine.js';
import { formatMoney, formatSignedMoney } from '../../src/core/money.js';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { createStepQueue } from '../../src/queue/stepQueue.js';
import type { BackfillReport } from '../../src/core/file/status.js';
import { storedAnnouncement } from '../../src/core/notices.js';
import { slackNoticeText } from '../../src/views/notices.js';
import { terminalNoticeText } from '../../src/views/text.js';

const OPERATOR = 'U07ONCALL';

describe('the night-15 backfill, end to end on Postgres and BullMQ', () => {
  let engine: TestEngine;
  let backfillId: number;
  let report: BackfillReport;
  const lines: string[] = [];

  beforeAll(async () => {
    engine = await createTestEngine();
    const started = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    backfillId = started.backfill.id;
  });
  afterAll(async () => engine.close());

  it('targets hours 05 to 10 and captures total_before and announced_at before anything is deleted', async () => {
    const { rows } = await engine.ctx.pool.query(
      `SELECT b.state, b.total_before::text AS total_before, b.partition_count, b.announced_at,
              to_char(b.watermark_reset_to AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS reset_to
       FROM backfill.backfills b WHERE id = $1`, [backfillId]);
    expect(rows[0]).toMatchObject({ state: 'announced', total_before: NIGHT_15.signedTotal, partition_count: 6, reset_to: '2026-11-15 04:00' });
    const hours = await engine.ctx.pool.query(`SELECT to_char(partition_hour AT TIME ZONE 'UTC', 'HH24') AS h FROM backfill.backfill_targets WHERE backfill_id = $1 ORDER BY 1`, [backfillId]);
    expect(hours.rows.map((r) => r.h)).toEqual(['05', '06', '07', '08', '09', '10']);
  });

  it('lists the readers in dependency order and leaves out a consumer that read other nights only', async () => {
    const { rows } = await engine.ctx.pool.query(
      'SELECT consumer, owner, notify_rule, dependency_rank FROM backfill.backfill_consumers WHERE backfill_id = $1 ORDER BY dependency_rank, consumer', [backfillId]);
    expect(rows.map((r) => r.consumer)).toEqual(['settlement_report', 'demand_forecast', 'payout_export']);
    expect(rows[0]).toMatchObject({ owner: OWNERS.settlementLead, notify_rule: 'before', dependency_rank: 1 });
    expect(rows.find((r) => r.consumer === 'marketing_weekly')).toBeUndefined();
  });

  it('generates the announcement with the signed figure, who signed it and when, the direction and who asked', async () => {
    const { rows } = await engine.ctx.pool.query(
      `SELECT announcement, announcement_facts AS "announcementFacts" FROM backfill.backfill_consumers WHERE backfill_id = $1 AND consumer = 'settlement_report'`, [backfillId]);
    // Kept as facts, not as one front end's words.
    expect(rows[0].announcement).toBeNull();
    const notice = storedAnnouncement(rows[0]);
    if (notice.kind !== 'announcement') throw new Error(`expected announcement facts, got ${notice.kind}`);
    expect(notice.facts).toMatchObject({
      backfillId, direction: 'down', totalBefore: NIGHT_15.signedTotal, expectedTotalAfter: NIGHT_15.correctedTotal, requestedBy: OPERATOR,
      signed: [{ report: 'settlement_report', period: '2026-11-15', total: NIGHT_15.signedTotal, signedBy: OWNERS.settlementLead }],
    });
    expect(notice.facts.signed[0]?.signedAt).toEqual(new Date('2026-11-16T07:00:00Z'));
    const text = slackNoticeText(notice);
    expect(text).toContain('05:00–10:00 on 2026-11-15');
    expect(text).toContain('currency parsed as text');
    expect(text).toContain(`= 1,284,310.55, signed by <@${OWNERS.settlementLead}> at 2026-11-16 07:00 UTC`);
    expect(text).toContain('Expected direction of the change: down');
    expect(text).toContain('Expected new total for 2026-11-15: 1,271,902.10 (−12,408.45 from 1,284,310.55 now)');
    expect(text).toContain(`Asked by <@${OPERATOR}>`);
    // A terminal words the same facts with names and no Slack markup.
    const terminal = terminalNoticeText(notice, { people: new Map([[OWNERS.settlementLead, 'Settlement lead']]), colour: false });
    expect(terminal).toContain('= 1,284,310.55, signed by Settlement lead at 2026-11-16 07:00 UTC');
    expect(terminal).toContain(`Asked by @${OPERATOR}`);
    expect(terminal).not.toMatch(/<@/);
  });

  it('enqueues and deletes nothing before the owners acknowledge', async () => {
    // Only the announcements exist as steps until the gate opens.
    const steps = await engine.ctx.pool.query('SELECT kind, step_key FROM backfill.backfill_steps WHERE backfill_id = $1 ORDER BY step_key', [backfillId]);
    expect(steps.rows).toEqual([{ kind: 'announce', step_key: 'payout_export' }, { kind: 'announce', step_key: 'settlement_report' }]);
    const queue = createStepQueue(engine.ctx.config);
    try {
      expect(await queue.count()).toBe(0);
    } finally {
      await queue.close();
    }
    // The settlement owner alone does not open the gate: the payout export's owner is told before too.
    const first = await acknowledge(engine.ctx, { backfillId, actor: OWNERS.settlementLead });
    expect(first.approved).toBe(false);
    expect(first.waitingFor.map((w) => w.owner)).toEqual([OWNERS.payouts]);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind <> 'announce'`, [backfillId])).toBe(0);
  });

  it('records one acknowledgement for a double click', async () => {
    const again = await acknowledge(engine.ctx, { backfillId, actor: OWNERS.settlementLead });
    expect(again.changed).toBe(false);
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.acknowledgements WHERE backfill_id = $1', [backfillId])).toBe(1);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'acknowledged'`, [backfillId])).toBe(1);
  });

  it('runs once the last owner acknowledges and lands on the corrected figure, −12,408.45 from the signed one', async () => {
    const last = await acknowledge(engine.ctx, { backfillId, actor: OWNERS.payouts });
    expect(last.approved).toBe(true);
    report = await runUntilSettled(engine.ctx, backfillId, (line) => lines.push(line), engine.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.totalBefore).toBe(NIGHT_15.signedTotal);
    expect(report.backfill.totalAfter).toBe(NIGHT_15.correctedTotal);
    expect(report.backfill.diff).toBe(NIGHT_15.diff);
    expect(formatSignedMoney(report.backfill.diff ?? '0')).toBe('−12,408.45');
    expect(report.signed).toEqual([expect.objectContaining({
      report: 'settlement_report', period: '2026-11-15', signedTotal: NIGHT_15.signedTotal, reportAfter: NIGHT_15.correctedTotal, diff: NIGHT_15.diff, signedBy: OWNERS.settlementLead,
    })]);
    expect(formatMoney(report.signed[0]?.signedTotal ?? '0')).toBe('1,284,310.55');
    expect(report.backfill.ranBy).toBe(OPERATOR);
    expect(report.backfill.announcedAt.getTime()).toBeLessThan(report.backfill.ranAt?.getTime() ?? 0);
  });

  it('replaced each partition without changing its row count, and stamped backfilled_at while reconciled stays false', async () => {
    for (const target of report.targets) {
      expect(target.rowsAfter).toBe(target.rowsBefore);
      expect(target.checksumAfter).not.toBe(target.checksumBefore);
      expect(target.recomputedAt?.getTime()).toBeGreaterThan(report.backfill.announcedAt.getTime());
    }
    const { rows } = await engine.ctx.pool.query(
      `SELECT count(*)::int AS n, bool_or(reconciled) AS any_reconciled, bool_and(backfilled_at IS NOT NULL) AS all_stamped
       FROM backfill.partition_log WHERE partition_hour BETWEEN '2026-11-15T05:00Z' AND '2026-11-15T10:00Z'`);
    expect(rows[0]).toEqual({ n: 6, any_reconciled: false, all_stamped: true });
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.partition_log WHERE NOT reconciled')).toBe(35);
  });

  it('moved the watermark back to 04:00, never further', async () => {
    const events = await listEvents(engine.ctx.pool, backfillId);
    const moved = events.find((e) => e.kind === 'watermark_moved');
    expect(moved?.detail).toEqual({ from: '2026-11-30 23:00', to: '2026-11-15 04:00' });
    const { rows } = await engine.ctx.pool.query(`SELECT processed_through FROM backfill.watermarks WHERE pipeline = 'orders'`);
    expect(rows[0].processed_through.toISOString()).toBe('2026-11-15T04:00:00.000Z');
  });

  it('re-triggered the consumers in dependency order: the report before the export that reads it', async () => {
    const replays = report.steps.filter((s) => s.kind === 'replay');
    expect(replays.every((s) => s.status === 'done')).toBe(true);
    const finished = (key: string) => replays.find((s) => s.key === key)?.finishedAt?.getTime() ?? Infinity;
    const started = (key: string) => replays.find((s) => s.key === key)?.startedAt?.getTime() ?? -Infinity;
    expect(started('payout_export')).toBeGreaterThanOrEqual(finished('settlement_report'));
    const payout = await engine.ctx.pool.query(`SELECT total::text FROM warehouse.payout_export WHERE report_date = '2026-11-15'`);
    expect(payout.rows[0].total).toBe(NIGHT_15.correctedTotal);
  });

  it('tells the "after" owner after the run, and keeps every step in the timeline in order', async () => {
    expect(engine.notifier.sent.map((n) => n.owner)).toEqual([OWNERS.forecast]);
    expect(engine.notifier.announced.map((n) => n.owner).sort()).toEqual([OWNERS.payouts, OWNERS.settlementLead]);
    expect(engine.notifier.diffs).toEqual([backfillId]);
    const kinds = (await listEvents(engine.ctx.pool, backfillId)).map((e) => e.kind);
    const firstOf = (kind: string) => kinds.indexOf(kind as never);
    expect(firstOf('requested')).toBeLessThan(firstOf('announced'));
    expect(firstOf('announced')).toBeLessThan(firstOf('acknowledged'));
    expect(firstOf('announcement_sent')).toBeLessThan(firstOf('recomputed'));
    expect(firstOf('approved')).toBeLessThan(firstOf('recomputed'));
    expect(firstOf('job_enqueued')).toBeLessThan(firstOf('recomputed'));
    expect(firstOf('recomputed')).toBeLessThan(firstOf('watermark_moved'));
    expect(firstOf('watermark_moved')).toBeLessThan(firstOf('replayed'));
    expect(firstOf('replayed')).toBeLessThan(firstOf('compared'));
    expect(firstOf('compared')).toBeLessThan(firstOf('notified'));
    expect(kinds.filter((k) => k === 'recomputed')).toHaveLength(6);
  });

  it('re-advances the watermark on the next tick with the same step, and stops before silently moving another signed figure', async () => {
    const { tick } = await import('../../src/core/recompute/tick.js');
    const totals = `SELECT sum(amount_base)::text AS t, count(*)::int AS n FROM warehouse.orders`;
    const before = await engine.ctx.pool.query(totals);
    const result = await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler' });
    expect(result.processed[0]?.toISOString()).toBe('2026-11-15T05:00:00.000Z');
    // Night 27's late shard is in the source now: rerunning 02:00 would change the signed 11-27 settlement total.
    expect(result.watermark?.toISOString()).toBe('2026-11-27T01:00:00.000Z');
    expect(result.stoppedBecause).toMatch(/2026-11-27 02:00 would change signed settlement_report 2026-11-27: start a backfill/);
    expect((await engine.ctx.pool.query(totals)).rows[0]).toEqual(before.rows[0]);
    // ...and that backfill is still possible past the watermark, because those hours were built.
    const { planBackfill } = await import('../../src/core/identify/plan.js');
    const plan = await planBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-27', reason: 'late shard', actor: OPERATOR });
    expect(plan.identified.hours).toHaveLength(4);
  });
});
