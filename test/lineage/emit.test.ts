import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { tick } from '../../src/core/recompute/tick.js';
import { rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { startApproved } from '../../src/core/lifecycle/dispatch.js';
import { executeStep } from '../../src/core/procedure.js';
import { listSteps } from '../../src/db/steps.js';
import { backfillRunId, emitRunEvents } from '../../src/core/lineage/emit.js';
import { parseRunEvent } from '../../src/core/lineage/runEvent.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';

interface Received {
  authorization: string | undefined;
  event: Record<string, unknown> & { eventType: string; run: { runId: string; facets: Record<string, { message?: string }> }; job: unknown; outputs: unknown[] };
}

/** An OpenLineage endpoint on loopback (what Marquez's /api/v1/lineage would be) that keeps what it is sent. */
async function startReceiver(): Promise<{ server: Server; url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => { body += chunk.toString(); });
    req.on('end', () => {
      received.push({ authorization: req.headers.authorization, event: JSON.parse(body) as Received['event'] });
      res.writeHead(201).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1/lineage`, received };
}

const OPERATOR = 'U07ONCALL';
const NIGHT_15 = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00:00.000Z`);

describe("the backfill's own runs as OpenLineage events", () => {
  let engine: TestEngine;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver();
    engine = await createTestEngine('month-end', { OPENLINEAGE_URL: receiver.url, OPENLINEAGE_API_KEY: 'marquez-key', JOB_ATTEMPTS: '2', RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
  });
  afterAll(async () => {
    await new Promise((resolve) => receiver.server.close(resolve));
    await engine.close();
  });

  async function night15(): Promise<number> {
    // An earlier backfill in this file moved the watermark back; the normal run re-advances it first.
    await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler', until: new Date('2026-11-26T00:00:00Z') });
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    await overrideGate(engine.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'lineage test' });
    return backfill.id;
  }
  const runIdOf = async (id: number) => {
    const { rows } = await engine.ctx.pool.query<{ announcedAt: Date }>('SELECT announced_at AS "announcedAt" FROM backfill.backfills WHERE id = $1', [id]);
    return backfillRunId({ id, announcedAt: rows[0]?.announcedAt ?? new Date(0) });
  };

  it('POSTs START then COMPLETE for a real run, once each, naming the job, the run and the partitions written', async () => {
    const id = await night15();
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    const runId = await runIdOf(id);
    const mine = receiver.received.filter((r) => r.event.run.runId === runId);
    expect(mine.map((r) => r.event.eventType)).toEqual(['START', 'COMPLETE']);
    for (const { event, authorization } of mine) {
      expect(authorization).toBe('Bearer marquez-key');
      // Well-formed by the same reading the bot gives to events it receives.
      expect(() => parseRunEvent(event)).not.toThrow();
      expect(event.job).toEqual({ namespace: 'backfill-bot', name: 'backfill.orders' });
      expect(event.outputs).toEqual([{ namespace: expect.stringMatching(/^postgres:\/\/127\.0\.0\.1:\d+$/), name: 'warehouse.orders', facets: { backfillPartitions: expect.objectContaining({ hours: NIGHT_15 }) } }]);
      expect(event.run.facets.nominalTime).toMatchObject({ nominalStartTime: '2026-11-15T05:00:00.000Z', nominalEndTime: '2026-11-15T11:00:00.000Z' });
    }
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.lineage_emissions WHERE backfill_id = $1 AND sent_at IS NOT NULL AND http_status = 201`, [id])).toBe(2);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'lineage_emitted'`, [id])).toBe(2);
    // Asked again (another worker, a retried step): each event was sent once and is not sent again.
    await emitRunEvents(engine.ctx, id);
    expect(receiver.received.filter((r) => r.event.run.runId === runId)).toHaveLength(2);
  });

  it('POSTs START then FAIL, with the failure, when the backfill fails', async () => {
    const { rows: original } = await engine.ctx.pool.query(`SELECT retrigger FROM backfill.consumers WHERE name = 'settlement_report'`);
    // A replay that cannot succeed: a webhook nobody answers.
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [{ kind: 'webhook', url: 'http://127.0.0.1:1/replay' }]);
    try {
      const id = await night15();
      const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
      expect(report.backfill.state).toBe('failed');
      const runId = await runIdOf(id);
      const events = receiver.received.filter((r) => r.event.run.runId === runId).map((r) => r.event);
      expect(events.map((e) => e.eventType)).toEqual(['START', 'FAIL']);
      expect(events[1]?.run.facets.errorMessage?.message).toMatch(/^replay settlement_report failed/);
      await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [original[0]?.retrigger]);
      // Its partitions are published: rolled back, they are free for the next test's backfill. Nothing more is emitted.
      await rollbackBackfill(engine.ctx, { backfillId: id, actor: OPERATOR, reason: 'replay endpoint down' });
      expect((await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier)).backfill.state).toBe('rolled_back');
      expect(receiver.received.filter((r) => r.event.run.runId === runId)).toHaveLength(2);
    } finally {
      await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [original[0]?.retrigger]);
    }
  });

  it('POSTs START then ABORT when an operator stops a backfill that has started running, and nothing after', async () => {
    const id = await night15();
    // The announcements go out and the run starts; the operator stops it before any partition is staged.
    for (const step of await listSteps(engine.ctx.pool, id)) {
      if (step.kind === 'announce') await executeStep(engine.ctx, { backfillId: id, kind: step.kind, key: step.key });
    }
    expect(await startApproved(engine.ctx, id)).toEqual([id]);
    await emitRunEvents(engine.ctx, id);
    const stopped = await stopBackfill(engine.ctx, { backfillId: id, actor: OPERATOR, reason: 'wrong step version deployed' });
    expect(stopped.state).toBe('stopped');
    const runId = await runIdOf(id);
    const events = receiver.received.filter((r) => r.event.run.runId === runId).map((r) => r.event);
    expect(events.map((e) => e.eventType)).toEqual(['START', 'ABORT']);
    expect(() => parseRunEvent(events[1])).not.toThrow();
    expect(Date.parse(String(events[1]?.eventTime))).toBe(stopped.finishedAt?.getTime());
    await emitRunEvents(engine.ctx, id);
    expect(receiver.received.filter((r) => r.event.run.runId === runId)).toHaveLength(2);
  });

  it('a receiver that is down does not hold up the backfill: the failure is a timeline row, and nothing is retried', async () => {
    // A port that was just listening and is closed now: connections are refused.
    const gone = await startReceiver();
    await new Promise((resolve) => gone.server.close(resolve));
    const ctx = { ...engine.ctx, config: { ...engine.ctx.config, OPENLINEAGE_URL: gone.url } };
    const before = receiver.received.length;
    await tick(ctx, { pipeline: 'orders', actor: 'scheduler', until: new Date('2026-11-26T00:00:00Z') });
    const { backfill } = await startBackfill(ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'again', actor: OPERATOR });
    await overrideGate(ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'lineage test' });
    const report = await runUntilSettled(ctx, backfill.id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    const { rows } = await engine.ctx.pool.query(`SELECT detail->>'eventType' AS type FROM backfill.events WHERE backfill_id = $1 AND kind = 'lineage_emit_failed' ORDER BY id`, [backfill.id]);
    expect(rows.map((r) => r.type)).toEqual(['START', 'COMPLETE']);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.lineage_emissions WHERE backfill_id = $1 AND sent_at IS NULL AND error IS NOT NULL`, [backfill.id])).toBe(2);
    await emitRunEvents(ctx, backfill.id);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind LIKE 'lineage_emit%'`, [backfill.id])).toBe(2);
    expect(receiver.received.length).toBe(before);
  });
});
