import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acknowledge, cancelBackfill, overrideGate } from '../../src/core/announce/gate.js';
import { planBackfill } from '../../src/core/identify/plan.js';
import { recordingRefusals } from '../../src/core/refusals.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { ErrorCode, isBackfillError, type ErrorCode as Code } from '../../src/errors.js';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';

function refusedWith(code: Code, pattern: RegExp) {
  return (error: unknown) => isBackfillError(error, code) && pattern.test(error.message);
}

describe('bad input gets a clear error and changes nothing', () => {
  let engine: TestEngine;
  const start = (target: string, extra: Partial<{ pipeline: string; reason: string; limitOverride: string; actor: string }> = {}) =>
    recordingRefusals(engine.ctx, { actor: extra.actor ?? OPERATOR, action: 'start' }, () =>
      startBackfill(engine.ctx, { pipeline: extra.pipeline ?? 'orders', target, reason: extra.reason ?? 'testing', actor: extra.actor ?? OPERATOR, limitOverride: extra.limitOverride }));

  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  const nothingWritten = async () => {
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfill_targets')).toBe(0);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.watermarks WHERE processed_through <> '2026-11-30T23:00Z'`)).toBe(0);
  };

  it('names the known pipelines when the pipeline is unknown', async () => {
    await expect(start('2026-11-15', { pipeline: 'ordrs' })).rejects.toSatisfy(refusedWith(ErrorCode.UnknownPipeline, /no pipeline called "ordrs".*Known pipelines: orders/));
    await nothingWritten();
  });

  it('shows the accepted forms for a malformed range, and the right order for a reversed one', async () => {
    await expect(start('2026-11-15T05..')).rejects.toSatisfy(refusedWith(ErrorCode.BadInput, /YYYY-MM-DD.*from\.\.to/));
    await expect(start('2026-11-31')).rejects.toSatisfy(refusedWith(ErrorCode.BadInput, /not a calendar date/));
    await expect(start('2026-11-15T05:30..2026-11-15T06:00')).rejects.toSatisfy(refusedWith(ErrorCode.BadInput, /start of an hour/));
    await expect(start('2026-11-15T10:00..2026-11-15T05:00')).rejects.toSatisfy(refusedWith(ErrorCode.BadInput, /runs backwards.*earlier hour first/));
    await nothingWritten();
  });

  it('refuses "rerun the month to be safe" unless an override reason is given', async () => {
    await expect(start('2026-11-01T00:00..2026-11-30T23:00')).rejects.toSatisfy(refusedWith(ErrorCode.RangeTooLong, /720 partitions, more than the limit of 48/));
    await expect(start('2026-11-01T00:00..2026-11-03T00:00', { limitOverride: '   ' })).rejects.toSatisfy(refusedWith(ErrorCode.RangeTooLong, /override/));
    await nothingWritten();
  });

  it('says why nights 4 and 21 need no backfill', async () => {
    await expect(start('2026-11-04')).rejects.toSatisfy(refusedWith(ErrorCode.NothingToBackfill, /No backfill needed.*landed late but whole \(3 of 3 shards\)/s));
    await expect(start('2026-11-21')).rejects.toSatisfy(refusedWith(ErrorCode.NothingToBackfill, /completed by retries/));
    await expect(start('2026-11-12')).rejects.toSatisfy(refusedWith(ErrorCode.NothingToBackfill, /no unreconciled partition/));
    await nothingWritten();
  });

  it('keeps every refusal in the timeline', async () => {
    const { rows } = await engine.ctx.pool.query(`SELECT detail->>'code' AS code FROM backfill.events WHERE kind = 'refused' ORDER BY id`);
    expect(rows.map((r) => r.code)).toEqual([
      'unknown_pipeline', 'bad_input', 'bad_input', 'bad_input', 'bad_input', 'range_too_long', 'range_too_long',
      'nothing_to_backfill', 'nothing_to_backfill', 'nothing_to_backfill',
    ]);
  });

  it('plans without writing anything but an audit event', async () => {
    const before = await countRows(engine.ctx, 'SELECT 1 FROM backfill.events');
    const plan = await planBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'dry run', actor: OPERATOR });
    expect(plan.identified.hours).toHaveLength(6);
    expect(plan.direction).toBe('down');
    await nothingWritten();
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.events')).toBe(before + 1);
    const { rows } = await engine.ctx.pool.query(`SELECT sum(amount_base)::text AS t FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`);
    expect(rows[0].t).toBe(NIGHT_15.signedTotal);
  });

  it('refuses an overlapping backfill by a database constraint, naming the one in flight', async () => {
    const first = await start('2026-11-15');
    await expect(start('2026-11-15T09:00..2026-11-15T12:00')).rejects.toSatisfy(
      refusedWith(ErrorCode.Overlap, new RegExp(`Backfill #${first.backfill.id} of orders .* is still in flight`)));
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(1);
    // The constraint, not the application, is what refuses: a raw insert is refused just the same.
    await expect(engine.ctx.pool.query(
      `INSERT INTO backfill.backfills (pipeline, reason, requested_by, first_hour, last_hour, partition_count, watermark_reset_to, total_before, announced_at, state)
       VALUES ('orders', 'x', 'x', '2026-11-15T10:00Z', '2026-11-15T11:00Z', 2, '2026-11-15T09:00Z', 0, now(), 'announced')`))
      .rejects.toMatchObject({ code: '23P01' });
    // A different pipeline range that does not overlap is fine once the first is cancelled.
    await cancelBackfill(engine.ctx, { backfillId: first.backfill.id, actor: OPERATOR });
    const again = await start('2026-11-15');
    expect(again.backfill.id).toBeGreaterThan(first.backfill.id);
  });

  it('refuses an acknowledgement from someone who is not the owner, and records the refusal', async () => {
    const { rows } = await engine.ctx.pool.query(`SELECT id FROM backfill.backfills WHERE state = 'announced'`);
    const id = rows[0].id as number;
    const attempt = recordingRefusals(engine.ctx, { actor: 'U07INTRUDER', action: 'acknowledge', backfillId: id },
      () => acknowledge(engine.ctx, { backfillId: id, actor: 'U07INTRUDER' }));
    await expect(attempt).rejects.toSatisfy(refusedWith(ErrorCode.NotAllowed, new RegExp(`does not own .* Only the owner \\(or a delegate they named\\) can: settlement_report \\(<@${OWNERS.settlementLead}>\\)`)));
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.acknowledgements')).toBe(0);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'refused' AND actor = 'U07INTRUDER'`, [id])).toBe(1);
  });

  it('takes an override only with a reason, and the timeline keeps it per consumer', async () => {
    const { rows } = await engine.ctx.pool.query(`SELECT id FROM backfill.backfills WHERE state = 'announced'`);
    const id = rows[0].id as number;
    await expect(overrideGate(engine.ctx, { backfillId: id, actor: OPERATOR, reason: ' ' })).rejects.toSatisfy(refusedWith(ErrorCode.BadInput, /needs a reason/));
    const result = await overrideGate(engine.ctx, { backfillId: id, actor: OPERATOR, reason: 'owners on a flight; finance lead agreed by phone' });
    expect(result.approved).toBe(true);
    const overrides = await engine.ctx.pool.query(`SELECT detail->>'consumer' AS consumer, detail->>'reason' AS reason FROM backfill.events WHERE backfill_id = $1 AND kind = 'overridden' ORDER BY id`, [id]);
    expect(overrides.rows).toEqual([
      { consumer: 'settlement_report', reason: 'owners on a flight; finance lead agreed by phone' },
      { consumer: 'payout_export', reason: 'owners on a flight; finance lead agreed by phone' },
    ]);
  });
});
