import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate, acknowledge } from '../../src/core/announce/gate.js';
import { answerPaidAgainst } from '../../src/core/finance/paidAgainst.js';
import { addSigner, signReport } from '../../src/core/finance/signing.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { tick } from '../../src/core/recompute/tick.js';
import { listUntoldNotices } from '../../src/db/catchUps.js';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { deliverNight9Source } from '../../dev/demo/seed.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { startWorkers } from '../../src/worker.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';

const OPERATOR = 'U07ONCALL';

describe('what did we pay against', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('answers the signed figure when nothing has corrected it', async () => {
    const answer = await answerPaidAgainst(engine.ctx.pool, { report: 'settlement_report', date: '2026-11-15' });
    expect(answer.signatures).toEqual([{ total: NIGHT_15.signedTotal, signedBy: OWNERS.settlementLead, signedAt: new Date('2026-11-16T07:00:00Z') }]);
    expect(answer.corrections).toEqual([]);
    expect(answer.current).toEqual({ total: NIGHT_15.signedTotal, source: 'signature' });
  });

  it('lists two corrections of one date in the order they ran, and the current figure', async () => {
    const first = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15T05:00..2026-11-15T07:00', reason: 'first half of the batch', actor: OPERATOR });
    await acknowledge(engine.ctx, { backfillId: first.backfill.id, actor: OWNERS.settlementLead });
    await acknowledge(engine.ctx, { backfillId: first.backfill.id, actor: OWNERS.payouts });
    await runUntilSettled(engine.ctx, first.backfill.id, () => undefined, engine.notifier);
    const second = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15T08:00..2026-11-15T10:00', reason: 'second half of the batch', actor: OPERATOR });
    await overrideGate(engine.ctx, { backfillId: second.backfill.id, actor: OPERATOR, reason: 'owners agreed in the incident call' });
    await runUntilSettled(engine.ctx, second.backfill.id, () => undefined, engine.notifier);

    const answer = await answerPaidAgainst(engine.ctx.pool, { date: '2026-11-15' });
    expect(answer.report).toBe('settlement_report');
    expect(answer.corrections.map((c) => c.backfillId)).toEqual([first.backfill.id, second.backfill.id]);
    const [one, two] = answer.corrections;
    expect(one?.signedTotal).toBe(NIGHT_15.signedTotal);
    expect(one?.acknowledgedBy.map((a) => a.owner)).toEqual([OWNERS.settlementLead, OWNERS.payouts]);
    expect(two?.corrected).toBe(NIGHT_15.correctedTotal);
    expect(two?.diffFromSigned).toBe(NIGHT_15.diff);
    expect(two?.overriddenBy).toEqual([
      { operator: OPERATOR, consumer: 'settlement_report', reason: 'owners agreed in the incident call' },
      { operator: OPERATOR, consumer: 'payout_export', reason: 'owners agreed in the incident call' },
    ]);
    expect(Number(one?.corrected)).toBeGreaterThan(1271902.10);
    expect(answer.current).toEqual({ total: NIGHT_15.correctedTotal, source: 'correction', backfillId: second.backfill.id });
  });

  it('keeps both signatures when a report is signed twice, and the newer one is current', async () => {
    const again = await signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: OWNERS.settlementLead });
    expect(again).toMatchObject({ total: NIGHT_15.correctedTotal, signatureNumber: 2 });
    const third = await signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: OWNERS.settlementLead });
    expect(third.signatureNumber).toBe(3);
    const answer = await answerPaidAgainst(engine.ctx.pool, { report: 'settlement_report', date: '2026-11-15' });
    expect(answer.signatures.map((s) => s.total)).toEqual([NIGHT_15.signedTotal, NIGHT_15.correctedTotal, NIGHT_15.correctedTotal]);
    expect(answer.current).toEqual({ total: NIGHT_15.correctedTotal, source: 'signature' });
  });

  it('lets only configured signers sign, and says who may', async () => {
    await expect(signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: 'U07INTRUDER' }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e, ErrorCode.NotAllowed) && e.message.includes('Who may: <@U07SETTLE>'));
    await addSigner(engine.ctx, { report: 'settlement_report', signer: 'U07DEPUTY', actor: OPERATOR });
    expect((await signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-14', actor: 'U07DEPUTY' })).signedBy).toBe('U07DEPUTY');
    await expect(signReport(engine.ctx, { report: 'demand_forecast', period: '2026-11-15', actor: OWNERS.settlementLead }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e, ErrorCode.UnknownConsumer) && e.message.includes('Reports: settlement_report'));
  });

  it('says clearly when the report is unknown or the date was never signed, listing what can be asked about', async () => {
    await expect(answerPaidAgainst(engine.ctx.pool, { report: 'settlements', date: '2026-11-15' }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e) && /no report called "settlements".*settlement_report \(2026-11-01 … 2026-11-30/.test(e.message));
    await expect(answerPaidAgainst(engine.ctx.pool, { report: 'settlement_report', date: '2026-12-24' }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e) && /no signed figure for 2026-12-24\. Signed dates: 2026-11-01 … 2026-11-30/.test(e.message));
    await expect(answerPaidAgainst(engine.ctx.pool, { date: '2026-12-24' }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e) && /Nothing was signed for 2026-12-24/.test(e.message));
    await expect(answerPaidAgainst(engine.ctx.pool, { date: '2026-13-01' })).rejects.toSatisfy((e: unknown) => isBackfillError(e, ErrorCode.BadInput));
  });
});

describe('night 9: telling the readers of the stale report', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine('night-9-outage');
  });
  afterAll(async () => engine.close());

  it('records the catch-up like a diff and tells each stale reader once, with the report total before and after', async () => {
    await deliverNight9Source(engine.ctx.pool);
    const result = await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler' });
    expect(result.catchUpId).toBeDefined();
    const notices = await listUntoldNotices(engine.ctx.pool, result.catchUpId);
    expect(notices.map((n) => `${n.consumer} ${n.period}`)).toEqual(['demand_forecast 2026-11-09', 'settlement_report 2026-11-09']);
    const settlement = notices.find((n) => n.consumer === 'settlement_report');
    expect(settlement?.hoursRead).toBe(24);
    expect(Number(settlement?.totalAfter)).toBeGreaterThan(Number(settlement?.reportBefore ?? 0));
    const workers = await startWorkers(engine.ctx, { sweepMs: 200 });
    try {
      await waitUntil(() => engine.notifier.direct.length >= 2, 'the two notices');
      await new Promise((resolve) => setTimeout(resolve, 600));
    } finally {
      await workers.close();
    }
    expect(engine.notifier.direct.map((d) => d.user).sort()).toEqual([OWNERS.forecast, OWNERS.settlementLead]);
    const told = engine.notifier.direct.find((d) => d.user === OWNERS.settlementLead)?.text ?? '';
    expect(told).toMatch(/are now real: those hours had not landed when settlement_report read 24 of them/);
    expect(told).toMatch(/For 2026-11-09: [\d,.]+ when you read it; [\d,.]+ now \(\+[\d,.]+\)/);
    expect(await listUntoldNotices(engine.ctx.pool)).toEqual([]);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'stale_readers_told'`)).toBe(2);
  });
});
