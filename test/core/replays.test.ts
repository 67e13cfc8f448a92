import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { acknowledge, hold, overrideGate } from '../../src/core/announce/gate.js';
import { rollbackBackfill } from '../../src/core/recovery/recovery.js';
import { verifyWebhookSignature } from '../../src/core/retrigger/webhookRetrigger.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { tick } from '../../src/core/recompute/tick.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { isBackfillError, ErrorCode } from '../../src/errors.js';
import { countRows, createTestEngine, TEST_WEBHOOK_SECRET, type TestEngine } from '../support/engine.js';

interface Delivery {
  body: string;
  headers: IncomingMessage['headers'];
}

/** A consumer's webhook endpoint on loopback that answers with the statuses it is given, in turn. */
async function startHook(statuses: number[]): Promise<{ server: Server; url: string; deliveries: Delivery[] }> {
  const deliveries: Delivery[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => { body += chunk.toString(); });
    req.on('end', () => {
      deliveries.push({ body, headers: req.headers });
      res.writeHead(statuses[Math.min(deliveries.length - 1, statuses.length - 1)] ?? 200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/replay`, deliveries };
}

const OPERATOR = 'U07ONCALL';

describe('re-triggering consumers', () => {
  let engine: TestEngine;
  let hook: Awaited<ReturnType<typeof startHook>> | undefined;

  beforeAll(async () => {
    // The hooks listen on loopback, which a re-trigger reaches only when the operator names it.
    engine = await createTestEngine('month-end', { JOB_ATTEMPTS: '3', RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
  });
  afterEach(async () => {
    if (hook) await new Promise((resolve) => hook?.server.close(resolve));
    hook = undefined;
  });
  afterAll(async () => engine.close());

  async function runNight15(): Promise<number> {
    // A previous backfill in this file moved the watermark back; the normal run re-advances it first.
    await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler', until: new Date('2026-11-26T00:00:00Z') });
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    await overrideGate(engine.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'test run' });
    return backfill.id;
  }

  it('a failing replay stops its dependants and fails the backfill naming it; it holds its hours until rolled back', async () => {
    hook = await startHook([500]);
    const { rows: original } = await engine.ctx.pool.query(`SELECT retrigger FROM backfill.consumers WHERE name = 'settlement_report'`);
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [{ kind: 'webhook', url: hook.url }]);
    const id = await runNight15();
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('failed');
    expect(report.backfill.failure).toMatch(/^replay settlement_report failed: webhook .* answered 500/);
    expect(hook.deliveries).toHaveLength(3);
    const step = (key: string) => report.steps.find((s) => s.kind === 'replay' && s.key === key);
    expect(step('settlement_report')).toMatchObject({ status: 'failed', attempts: 3 });
    expect(step('payout_export')).toMatchObject({ status: 'skipped', attempts: 0, startedAt: null });
    expect(report.steps.find((s) => s.kind === 'compare')).toMatchObject({ status: 'skipped' });
    expect(report.backfill.totalAfter).toBeNull();
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'step_retried'`, [id])).toBe(2);
    expect(engine.notifier.sent).toHaveLength(0);
    // Its partitions are published: nobody may start over them until it is rolled back.
    await expect(startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'again', actor: OPERATOR }))
      .rejects.toSatisfy((err: unknown) => isBackfillError(err, ErrorCode.Overlap) && new RegExp(`#${id} .* is failed with partitions published`).test(err.message));
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [original[0]?.retrigger]);
    await rollbackBackfill(engine.ctx, { backfillId: id, actor: OPERATOR, reason: 'replay endpoint down' });
    expect((await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier)).backfill.state).toBe('rolled_back');
  });

  it('a webhook replay is signed, retried with backoff on a non-2xx, and succeeds', async () => {
    hook = await startHook([503, 200]);
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [{ kind: 'webhook', url: hook.url }]);
    const id = await runNight15();
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    expect(hook.deliveries).toHaveLength(2);
    const delivery = hook.deliveries[1];
    const payload = JSON.parse(delivery?.body ?? '{}');
    expect(payload).toMatchObject({ backfill_id: id, consumer: 'settlement_report' });
    expect(payload.partitions).toHaveLength(6);
    expect(delivery?.headers['idempotency-key']).toBe(`backfill-${id}-replay-settlement_report`);
    const signature = String(delivery?.headers['x-backfill-signature']);
    expect(verifyWebhookSignature(TEST_WEBHOOK_SECRET, String(delivery?.headers['x-backfill-timestamp']), delivery?.body ?? '', signature)).toBe(true);
    expect(verifyWebhookSignature('some-other-secret-value', String(delivery?.headers['x-backfill-timestamp']), delivery?.body ?? '', signature)).toBe(false);
  });
});

describe('delegates', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('a configured delegate may acknowledge for the owner; the row says who pressed it', async () => {
    const { addDelegate } = await import('../../src/core/finance/signing.js');
    await addDelegate(engine.ctx, { owner: OWNERS.settlementLead, delegate: 'U07DEPUTY', actor: OPERATOR });
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    const result = await acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07DEPUTY' });
    expect(result.waitingFor.map((w) => w.consumer)).toEqual(['payout_export']);
    const { rows } = await engine.ctx.pool.query('SELECT consumer, owner FROM backfill.acknowledgements WHERE backfill_id = $1', [backfill.id]);
    expect(rows).toEqual([{ consumer: 'settlement_report', owner: 'U07DEPUTY' }]);
    await expect(acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07SOMEONE', consumer: 'payout_export' }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e, ErrorCode.NotAllowed));
  });
});

describe('holding', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('a hold pauses the backfill until the holder acknowledges; an override does not overrule it', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    await acknowledge(engine.ctx, { backfillId: backfill.id, actor: OWNERS.payouts });
    const held = await hold(engine.ctx, { backfillId: backfill.id, actor: OWNERS.settlementLead, reason: 'finance is reconciling' });
    expect(held.backfill.state).toBe('held');
    await expect(overrideGate(engine.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'hurry' }))
      .rejects.toSatisfy((e: unknown) => isBackfillError(e, ErrorCode.WrongState) && e.message.includes(`<@${OWNERS.settlementLead}> asked to wait`));
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = $1 AND kind <> 'announce'`, [backfill.id])).toBe(0);
    const released = await acknowledge(engine.ctx, { backfillId: backfill.id, actor: OWNERS.settlementLead });
    expect(released.approved).toBe(true);
    expect(released.backfill.state).toBe('approved');
    const kinds = await engine.ctx.pool.query(`SELECT kind FROM backfill.events WHERE backfill_id = $1 AND kind IN ('held','released','approved') ORDER BY id`, [backfill.id]);
    expect(kinds.rows.map((r) => r.kind)).toEqual(['held', 'released', 'approved']);
  });
});
