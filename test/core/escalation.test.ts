import { afterEach, describe, expect, it } from 'vitest';
import { parseDocument, stringify } from 'yaml';
import { readDemoCatalog } from '../../dev/demo/seed.js';
import { acknowledge, cancelBackfill, hold } from '../../src/core/announce/gate.js';
import { prepareEscalations, sendEscalation } from '../../src/core/announce/escalation.js';
import { nextWorkingMinute, type EscalationPath } from '../../src/core/announce/escalationPath.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { applyCatalog } from '../../src/core/catalog/apply.js';
import type { Catalog } from '../../src/core/catalog/schema.js';
import { buildIncidentPackage } from '../../src/core/file/incidentPackage.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import type { EscalationMessage, EscalationReach, Messenger } from '../../src/core/messenger.js';
import { executeStep, type StepContext } from '../../src/core/procedure.js';
import { insertDelegate } from '../../src/db/delegates.js';
import { Metrics } from '../../src/metrics.js';
import { incidentPackageMarkdown } from '../../src/views/incidentPackage.js';
import { waitingOn } from '../../src/views/waiting.js';
import { startWorkers } from '../../src/worker.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';

const OPERATOR = 'U07ONCALL';
const SETTLE = 'U07SETTLE';
const DEPUTIES = ['U07DEPUTY1', 'U07DEPUTY2'];
const ONCALL = ['U07FINOPS1', 'U07FINOPS2'];
const CONSUMER = 'settlement_report';
/** The settlement report's path, without working hours: each step's time is then its wait alone. */
const PATH: EscalationPath = [
  { after: '30m', to: 'delegates' },
  { after: '1h', to: 'channel', channel: 'C0FINANCE' },
  { after: '2h', to: 'oncall', usergroup: 'S0FINOPS' },
];
const step = (n: number) => ({ backfillId: 1, consumer: CONSUMER, step: n });

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** The demo's catalog with the settlement report's escalation path replaced, applied as `catalog apply` does. */
async function applyPath(e: TestEngine, path: EscalationPath): Promise<void> {
  const document = parseDocument((await readDemoCatalog()).text).toJS() as Catalog;
  const report = document.consumers.find((c) => c.name === CONSUMER);
  if (!report) throw new Error('the demo catalog has no settlement report');
  report.escalation = path;
  await applyCatalog(e.ctx.pool, { text: stringify(document), source: 'catalog.yml' }, OPERATOR);
}

/** An engine whose settlement report escalates along `path`, with its owner's delegates and the on-call group set. */
async function escalating(path: EscalationPath = PATH): Promise<TestEngine> {
  // Reminders stay out of the way: the clock is moved by hours here.
  engine = await createTestEngine('month-end', { ANNOUNCE_REMINDER_MS: String(7 * 24 * 3_600_000) });
  await applyPath(engine, path);
  for (const deputy of DEPUTIES) await insertDelegate(engine.ctx.pool, SETTLE, deputy);
  engine.notifier.usergroups.set('S0FINOPS', ONCALL);
  return engine;
}

/** Night 15 started, both announcements delivered, the escalation steps dated: backfill #1 waits at its gate. */
async function announcedNight15(e: TestEngine): Promise<void> {
  const { backfill } = await startBackfill(e.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
  expect(backfill.id).toBe(1);
  for (const key of ['payout_export', CONSUMER]) expect(await executeStep(e.ctx, { backfillId: 1, kind: 'announce', key })).toBe('done');
  await prepareEscalations(e.ctx, 1);
}

/**
 * `minutes` pass in the database: what the escalation counts from (the announcements' times) and what it counted
 * already (the steps' due and sent times) move back together, as if the backfill had been announced earlier.
 */
async function passes(e: TestEngine, minutes: number): Promise<void> {
  const back = [1, `${minutes} minutes`];
  await e.ctx.pool.query(`UPDATE backfill.backfill_steps SET finished_at = finished_at - $2::interval WHERE backfill_id = $1 AND kind = 'announce'`, back);
  await e.ctx.pool.query(`UPDATE backfill.escalations SET due_at = due_at - $2::interval, sent_at = sent_at - $2::interval WHERE backfill_id = $1`, back);
}

const rows = async (e: TestEngine) => (await e.ctx.pool.query<{ step: number; status: string; stop_reason: string | null }>(
  `SELECT step, status, stop_reason FROM backfill.escalations WHERE backfill_id = 1 AND consumer = $1 ORDER BY step`, [CONSUMER])).rows;

const told = (e: TestEngine) => e.notifier.escalations.map((m) => `${m.step}:${m.to}`);

const plainStatus = async (e: TestEngine) => waitingOn(await loadBackfillReport(e.ctx.pool, 1), (id) => id, (text) => text, (text) => text);

describe('an escalation path, step by step', () => {
  it('copies each "before" reader\'s path with the backfill and dates it from when the announcement went out', async () => {
    const e = await escalating();
    await announcedNight15(e);
    // To the second: the database keeps microseconds, a JavaScript date milliseconds.
    const { rows: dated } = await e.ctx.pool.query<{ step: number; waited: number; status: string }>(
      `SELECT e.step, round(extract(epoch FROM e.due_at - s.finished_at))::int AS waited, e.status FROM backfill.escalations e
       JOIN backfill.backfill_steps s ON s.backfill_id = e.backfill_id AND s.kind = 'announce' AND s.step_key = e.consumer ORDER BY e.step`);
    expect(dated).toEqual([
      { step: 1, waited: 1800, status: 'waiting' }, { step: 2, waited: 3600, status: 'waiting' }, { step: 3, waited: 7200, status: 'waiting' },
    ]);
    // payout_export declares no path; the "after" readers wait for nobody.
    expect(await countRows(e.ctx, `SELECT 1 FROM backfill.escalations WHERE consumer <> $1`, [CONSUMER])).toBe(0);
    expect(await plainStatus(e)).toMatch(/U07SETTLE \(settlement_report, since \d{4}-\d\d-\d\d \d\d:\d\d UTC; next: the delegates at \d{4}-\d\d-\d\d \d\d:\d\d UTC\)/);
  });

  it('DMs the delegates after the first wait, posts in the channel after the second, DMs the group\'s members after the third: each once', async () => {
    const e = await escalating();
    await announcedNight15(e);
    expect(await sendEscalation(e.ctx, step(1))).toBe('not_due');
    expect(told(e)).toEqual([]);

    await passes(e, 31);
    expect(await sendEscalation(e.ctx, step(1))).toBe('sent');
    expect(await sendEscalation(e.ctx, step(1))).toBe('already_done');
    expect(await sendEscalation(e.ctx, step(2))).toBe('not_due');
    expect(told(e)).toEqual(DEPUTIES.map((d) => `1:${d}`));
    expect(e.notifier.escalations[0]?.text).toMatch(/^The backfill #1 of orders is waiting for <@U07SETTLE> to acknowledge it for settlement_report since .* UTC \(escalation step 1 of 3\)\. You are their delegate/);
    expect(await plainStatus(e)).toMatch(/settlement_report, since .*; escalated to the delegates at .*; next: #C0FINANCE at /);

    await passes(e, 30);
    expect(await sendEscalation(e.ctx, step(2))).toBe('sent');
    expect(await sendEscalation(e.ctx, step(3))).toBe('not_due');
    await passes(e, 60);
    expect(await sendEscalation(e.ctx, step(3))).toBe('sent');
    expect(await sendEscalation(e.ctx, step(3))).toBe('already_done');

    expect(told(e)).toEqual([...DEPUTIES.map((d) => `1:${d}`), '2:C0FINANCE', ...ONCALL.map((u) => `3:${u}`)]);
    expect(e.notifier.duplicatesSuppressed).toBe(0);
    expect((await rows(e)).map((r) => r.status)).toEqual(['sent', 'sent', 'sent']);
    const { rows: events } = await e.ctx.pool.query<{ detail: { step: number; to: string; reached: string[] } }>(
      `SELECT detail FROM backfill.events WHERE backfill_id = 1 AND kind = 'escalated' ORDER BY id`);
    expect(events.map((row) => [row.detail.step, row.detail.to, row.detail.reached])).toEqual([[1, 'delegates', DEPUTIES], [2, 'channel', ['C0FINANCE']], [3, 'oncall', ONCALL]]);
    expect(await plainStatus(e)).toMatch(/settlement_report, since .*; escalated to the on-call group S0FINOPS at [^;)]*\)/);
  });

  it('sends each message once when the job runs twice at once, or its worker dies between the send and the commit', async () => {
    const e = await escalating();
    await announcedNight15(e);
    await passes(e, 61);
    // Two runs of the same job: one decides, the other finds it decided and delivers under the same intents.
    await Promise.all([sendEscalation(e.ctx, step(1)), sendEscalation(e.ctx, step(1))]);
    expect(told(e)).toEqual(DEPUTIES.map((d) => `1:${d}`));
    expect(await countRows(e.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'escalated'`)).toBe(1);

    // The channel takes the post, then the worker is gone before it commits: the step is left decided, not sent.
    const dies: Messenger = Object.assign(Object.create(e.notifier) as Messenger, {
      async escalate(message: EscalationMessage): Promise<EscalationReach> {
        await e.notifier.escalate(message);
        throw new Error('the worker died before its commit');
      },
    });
    const dying: StepContext = { ...e.ctx, messenger: dies };
    await expect(sendEscalation(dying, step(2))).rejects.toThrow(/worker died/);
    expect((await rows(e))[1]?.status).toBe('sending');
    // The retry delivers under the same intent (found delivered: nothing is posted again) and marks it sent.
    expect(await sendEscalation(e.ctx, step(2))).toBe('sent');
    expect(told(e).filter((t) => t.startsWith('2:'))).toEqual(['2:C0FINANCE']);
    expect(e.notifier.duplicatesSuppressed).toBeGreaterThanOrEqual(1);
    expect((await rows(e))[1]?.status).toBe('sent');
  });

  it('stops at an acknowledgement: the steps after it never send, by their own job or by the sweep', async () => {
    const e = await escalating();
    await announcedNight15(e);
    await passes(e, 31);
    expect(await sendEscalation(e.ctx, step(1))).toBe('sent');
    // A delegate answers in the owner's place.
    await acknowledge(e.ctx, { backfillId: 1, actor: DEPUTIES[0] ?? '', consumer: CONSUMER });
    await passes(e, 120);
    // The next step's job decides under the backfill's lock: the acknowledgement is there, so it and the rest stop.
    expect(await sendEscalation(e.ctx, step(2))).toBe('stopped');
    expect(await sendEscalation(e.ctx, step(3))).toBe('already_done');
    expect(told(e)).toEqual(DEPUTIES.map((d) => `1:${d}`));
    expect(await rows(e)).toEqual([
      { step: 1, status: 'sent', stop_reason: null }, { step: 2, status: 'stopped', stop_reason: 'acknowledged' }, { step: 3, status: 'stopped', stop_reason: 'acknowledged' },
    ]);
    const { rows: [stopped] } = await e.ctx.pool.query(`SELECT detail FROM backfill.events WHERE kind = 'escalation_stopped'`);
    expect(stopped?.detail).toEqual({ consumer: CONSUMER, reason: 'acknowledged', steps: [2, 3] });
  });

  it('decides under the backfill\'s lock: an acknowledgement committing meanwhile is seen, and nothing is sent', async () => {
    const e = await escalating();
    await announcedNight15(e);
    await passes(e, 31);
    // The acknowledgement's transaction as gate.ts runs it: the backfill's row locked for update, the row written.
    const client = await e.ctx.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT 1 FROM backfill.backfills WHERE id = 1 FOR UPDATE');
      await client.query(`INSERT INTO backfill.acknowledgements (backfill_id, consumer, owner) VALUES (1, $1, $2)`, [CONSUMER, SETTLE]);
      let settled = false;
      const deciding = sendEscalation(e.ctx, step(1)).finally(() => {
        settled = true;
      });
      // It waits for the lock (or, were it not to, it has decided and sent already, and the expectations say so).
      await waitUntil(async () => settled || told(e).length > 0 || (await countRows(e.ctx,
        `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM backfill.backfills WHERE id = $1::bigint FOR SHARE%'`)) === 1,
      'the step\'s decision to wait for the acknowledgement');
      await client.query('COMMIT');
      expect(await deciding).toBe('stopped');
    } finally {
      client.release();
    }
    expect(told(e)).toEqual([]);
    expect((await rows(e)).map((r) => r.stop_reason)).toEqual(['acknowledged', 'acknowledged', 'acknowledged']);
  });

  it('stops a held owner\'s path at the sweep: the holder is whom it waits for', async () => {
    const e = await escalating();
    await announcedNight15(e);
    await hold(e.ctx, { backfillId: 1, actor: SETTLE, consumer: CONSUMER, reason: 'the lead checks the rates first' });
    await prepareEscalations(e.ctx, 1);
    expect((await rows(e)).map((r) => r.stop_reason)).toEqual(['held', 'held', 'held']);
    await passes(e, 240);
    expect(await sendEscalation(e.ctx, step(1))).toBe('already_done');
    expect(told(e)).toEqual([]);
    expect(await plainStatus(e)).not.toMatch(/next:/);
  });

  it('stops every path of a backfill that left its gate without an answer (cancelled)', async () => {
    const e = await escalating();
    await announcedNight15(e);
    await cancelBackfill(e.ctx, { backfillId: 1, actor: OPERATOR, reason: 'wrong night' });
    await passes(e, 240);
    expect(await sendEscalation(e.ctx, step(1))).toBe('stopped');
    expect((await rows(e)).map((r) => r.stop_reason)).toEqual(['left_gate', 'left_gate', 'left_gate']);
    expect(told(e)).toEqual([]);
  });

  it('defers a step due outside its working hours to the next working minute', async () => {
    const e = await escalating();
    const { rows: [clock] } = await e.ctx.pool.query<{ now: Date }>('SELECT now()');
    // Working only on the weekday three days after the step would be due (UTC, 09:00-17:00): it waits for that day.
    const weekday = (at: Date) => ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'][at.getUTCDay()] ?? 'mon';
    const later = new Date((clock?.now ?? new Date()).getTime() + 30 * 60_000 + 3 * 86_400_000);
    await applyPath(e, [{ after: '30m', to: 'delegates', hours: { days: weekday(later), from: '09:00', to: '17:00', tz: 'UTC' } }]);
    await announcedNight15(e);
    const { rows: [due] } = await e.ctx.pool.query<{ dueAt: Date; wouldBe: Date }>(
      `SELECT e.due_at AS "dueAt", s.finished_at + interval '30 minutes' AS "wouldBe" FROM backfill.escalations e
       JOIN backfill.backfill_steps s ON s.backfill_id = e.backfill_id AND s.kind = 'announce' AND s.step_key = e.consumer`);
    const expected = new Date(Date.UTC(later.getUTCFullYear(), later.getUTCMonth(), later.getUTCDate(), 9));
    expect(due?.dueAt.toISOString()).toBe(expected.toISOString());
    expect(due && due.dueAt > due.wouldBe).toBe(true);
    await passes(e, 31);
    expect(await sendEscalation(e.ctx, step(1))).toBe('not_due');
    expect(told(e)).toEqual([]);
  });

  it('keeps the path it started with when the catalog changes mid-run', async () => {
    const e = await escalating();
    await announcedNight15(e);
    // A path is no frozen field to refuse: the apply goes through, and the next backfill takes the new path.
    await applyPath(e, [{ after: '10m', to: 'channel', channel: 'C0ELSEWHERE' }]);
    const { rows: [live] } = await e.ctx.pool.query(`SELECT escalation FROM backfill.consumers WHERE name = $1`, [CONSUMER]);
    expect(live?.escalation).toEqual([{ after: '10m', to: 'channel', channel: 'C0ELSEWHERE' }]);
    expect(await countRows(e.ctx, `SELECT 1 FROM backfill.backfills WHERE state = 'paused'`)).toBe(0);
    await passes(e, 61);
    expect(await sendEscalation(e.ctx, step(1))).toBe('sent');
    expect(await sendEscalation(e.ctx, step(2))).toBe('sent');
    expect(told(e)).toEqual([...DEPUTIES.map((d) => `1:${d}`), '2:C0FINANCE']);
    expect((await rows(e)).length).toBe(3);
  });
});

describe('working hours', () => {
  const berlin = { days: 'mon-fri', from: '09:00', to: '18:00', tz: 'Europe/Berlin' };
  const at = (iso: string) => nextWorkingMinute(new Date(iso), berlin).toISOString();

  it('leave a time inside them as it is and move one outside to the next working minute', () => {
    expect(at('2026-11-16T10:15:00.000Z')).toBe('2026-11-16T10:15:00.000Z'); // Monday 11:15 in Berlin
    expect(at('2026-11-16T06:00:00.000Z')).toBe('2026-11-16T08:00:00.000Z'); // before 09:00
    expect(at('2026-11-16T17:00:00.000Z')).toBe('2026-11-17T08:00:00.000Z'); // 18:00: no longer working time
    expect(at('2026-11-20T17:30:00.000Z')).toBe('2026-11-23T08:00:00.000Z'); // Friday evening: Monday
    // Across the change to summer time: Friday 19:00 CET, then Monday 09:00 CEST.
    expect(at('2026-03-27T18:00:00.000Z')).toBe('2026-03-30T07:00:00.000Z');
    expect(nextWorkingMinute(new Date('2026-11-21T12:00:00.000Z'), { days: 'fri-mon', from: '00:00', to: '24:00', tz: 'UTC' }).toISOString()).toBe('2026-11-21T12:00:00.000Z');
  });
});

describe('the wait, as a metric and in the incident package', () => {
  it('measures the acknowledgement from the announcement, with how far its escalation had gone', async () => {
    const e = await escalating();
    await announcedNight15(e);
    await passes(e, 45);
    expect(await sendEscalation(e.ctx, step(1))).toBe('sent');
    await acknowledge(e.ctx, { backfillId: 1, actor: SETTLE, consumer: CONSUMER });
    await acknowledge(e.ctx, { backfillId: 1, actor: 'U07PAYOUTS', consumer: 'payout_export' });
    await prepareEscalations(e.ctx, 1);

    const metrics = new Metrics(e.ctx.pool);
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^backfill_acknowledgement_wait_seconds_bucket\{le="1800",kind="report",escalated_to="delegates"\} 0$/m);
    expect(text).toMatch(/^backfill_acknowledgement_wait_seconds_bucket\{le="3600",kind="report",escalated_to="delegates"\} 1$/m);
    expect(text).toMatch(/^backfill_acknowledgement_wait_seconds_bucket\{le="3600",kind="export",escalated_to="none"\} 1$/m);
    const sum = Number(/^backfill_acknowledgement_wait_seconds_sum\{kind="report",escalated_to="delegates"\} (\S+)$/m.exec(text)?.[1]);
    expect(sum).toBeGreaterThanOrEqual(45 * 60);
    expect(sum).toBeLessThan(46 * 60);

    const pkg = await buildIncidentPackage(e.ctx.pool, 1);
    const report = pkg.consumers.find((c) => c.name === CONSUMER);
    expect(report?.acknowledgedAfterSeconds).toBeGreaterThanOrEqual(45 * 60);
    expect(report?.escalation.map((s) => [s.step, s.to, s.status, s.stopReason])).toEqual([[1, 'delegates', 'sent', null], [2, 'channel', 'stopped', 'acknowledged'], [3, 'oncall', 'stopped', 'acknowledged']]);
    expect(report?.escalation[0]?.reached).toEqual(DEPUTIES);
    const markdown = incidentPackageMarkdown(pkg);
    // The consumer's row: when it went out, how long the owner took, and each step of the path.
    const row = markdown.split('\n').find((line) => line.startsWith('| 1 | settlement_report |')) ?? '';
    expect(row).toMatch(/\| 45 min \d\d s \(\d+ s\) \|/);
    expect(row).toMatch(/#1 after 30m to delegates: sent at [^;]+ UTC to U07DEPUTY1, U07DEPUTY2; due [^<]+ UTC<br>#2 after 1h to channel C0FINANCE: stopped \(acknowledged\) at [^;]+ UTC; due /);
  });
});

describe('through the queue', () => {
  it('schedules one delayed job per step from the rows; one that comes early sends nothing and is scheduled again', async () => {
    const e = await escalating();
    await announcedNight15(e);
    const workers = await startWorkers(e.ctx, { sweepMs: 3_600_000 });
    try {
      const jobId = (n: number) => `bf1-escalate-${CONSUMER}-${n}`;
      for (const [n, minutes] of [[1, 30], [2, 60], [3, 120]] as const) {
        const job = await workers.queue.getJob(jobId(n));
        expect(await job?.getState()).toBe('delayed');
        expect(job?.opts.delay).toBeGreaterThan((minutes - 1) * 60_000);
        expect(job?.opts.delay).toBeLessThanOrEqual(minutes * 60_000);
      }
      await (await workers.queue.getJob(jobId(1)))?.promote();
      await waitUntil(async () => (await (await workers.queue.getJob(jobId(1)))?.getState()) === 'completed', 'the early job to run');
      expect((await workers.queue.getJob(jobId(1)))?.returnvalue).toBe('not_due');
      expect(told(e)).toEqual([]);

      // Half an hour later by the database: the sweep adds it again, due now, and it sends.
      await passes(e, 31);
      await workers.kick(1);
      await waitUntil(() => told(e).length === DEPUTIES.length, 'the delegates told');
      await waitUntil(async () => (await (await workers.queue.getJob(jobId(1)))?.getState()) === 'completed', 'the job to complete');
      expect((await workers.queue.getJob(jobId(1)))?.returnvalue).toBe('sent');
      // Sent is not outstanding: another sweep adds nothing for it.
      await workers.kick(1);
      expect((await workers.queue.getJob(jobId(1)))?.returnvalue).toBe('sent');
      expect(told(e)).toEqual(DEPUTIES.map((d) => `1:${d}`));
    } finally {
      await workers.close();
    }
  });
});
