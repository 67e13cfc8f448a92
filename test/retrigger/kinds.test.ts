import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Worker } from 'bullmq';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import type { StepContext } from '../../src/core/procedure.js';
import type { BackfillReport } from '../../src/core/file/status.js';
import { tick } from '../../src/core/recompute/tick.js';
import type { ReplayJobs, ReplayJobTarget } from '../../src/core/retrigger/call.js';
import { createQueue, createWorker } from '../../src/queue/connection.js';
import { BullmqReplayJobs, replayBackendOf } from '../../src/queue/replayJobs.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';

// The re-trigger kinds people run today, each in a real backfill of night 15 through the real worker: the
// settlement report through an orchestrator's REST API (a receiver on loopback that starts runs, dedupes them
// by idempotency key and reports their state), then the payout export, which depends on it, as a job on a
// BullMQ queue of its own, processed by a worker of the test's own on the consumer's own prefix. Then the
// export's job failing on that worker, and the job no worker takes: each on a queue of its own, so no test's
// worker sees another's jobs.

const OPERATOR = 'U07ONCALL';
const TOKEN = 'orchestrator-token-for-tests';

interface Orchestrator {
  server: Server;
  url: string;
  /** Every trigger call, in order, with what it carried. */
  posts: { key: string; authorization: string; body: { conf: { backfill_id: number; consumer: string; partitions: string[] } } }[];
  /** The runs it started, by idempotency key. */
  runs: Map<string, { id: string; polls: number }>;
}

/**
 * The project's own ReplayJobs, recording each add and what it answered; with `loseFirstLook`, the first look
 * at a job's state throws as a dropped connection to the consumer's queue would, which the step retries.
 */
class RecordingReplayJobs implements ReplayJobs {
  readonly adds: { jobId: string; added: boolean }[] = [];
  private looks = 0;
  private readonly real: BullmqReplayJobs;

  constructor(config: TestEngine['ctx']['config'], private readonly loseFirstLook: boolean) {
    this.real = new BullmqReplayJobs(config);
  }

  async add(target: ReplayJobTarget, job: { name: string; jobId: string; data: Record<string, unknown> }): Promise<{ added: boolean }> {
    const result = await this.real.add(target, job);
    this.adds.push({ jobId: job.jobId, added: result.added });
    return result;
  }

  async state(target: ReplayJobTarget, jobId: string): ReturnType<ReplayJobs['state']> {
    this.looks += 1;
    if (this.loseFirstLook && this.looks === 1) throw new Error('Connection is closed.');
    return this.real.state(target, jobId);
  }

  close(): Promise<void> {
    return this.real.close();
  }
}

/** An orchestrator: POST starts a run (the same key gives the same run), GET says running, then `end`. */
async function startOrchestrator(log: string[], end: 'success' | 'failed'): Promise<Orchestrator> {
  const posts: Orchestrator['posts'] = [];
  const runs = new Map<string, { id: string; polls: number }>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => { body += chunk.toString(); });
    req.on('end', () => {
      if (req.method === 'POST') {
        const key = String(req.headers['idempotency-key']);
        posts.push({ key, authorization: String(req.headers.authorization), body: JSON.parse(body) });
        const run = runs.get(key) ?? { id: `run-${runs.size + 1}`, polls: 0 };
        if (!runs.has(key)) log.push(`run started: ${posts.at(-1)?.body.conf.consumer}`);
        runs.set(key, run);
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: run.id }));
        return;
      }
      const run = [...runs.values()].find((candidate) => req.url === `/runs/${candidate.id}`);
      if (!run) return void res.writeHead(404).end();
      run.polls += 1;
      const state = run.polls < 2 ? 'running' : end;
      if (state !== 'running') log.push(`run ended: ${state}`);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { state } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, posts, runs };
}

describe('re-trigger kinds: an orchestrator REST API and a BullMQ queue', () => {
  let engine: TestEngine;
  let orchestrator: Orchestrator | undefined;
  let consumerWorker: Worker | undefined;
  const prefix = `exports-${randomBytes(4).toString('hex')}`;
  const target = { queue: 'payout-exports', connection: 'default', prefix };
  // The export's queue in the failure tests: one its worker fails the job on, one no worker listens on.
  const failingQueue = 'payout-exports-failing';
  const idleQueue = 'payout-exports-idle';

  // A database of its own for each test: a failed backfill keeps holding night 15 until it is rolled back, and
  // the next test starts night 15 again. Its backfill ids start again too, so the consumers' queues are emptied.
  beforeEach(async () => {
    // The orchestrator listens on loopback, which a re-trigger reaches only when the operator names it.
    engine = await createTestEngine('month-end', { JOB_ATTEMPTS: '3', RETRIGGER_SECRET_ORCH_TOKEN: TOKEN, RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
  });
  afterEach(async () => {
    await consumerWorker?.close();
    consumerWorker = undefined;
    if (orchestrator) await new Promise((resolve) => orchestrator?.server.close(resolve));
    orchestrator = undefined;
    for (const name of [target.queue, failingQueue, idleQueue]) {
      const queue = createQueue(replayBackendOf(engine.ctx.config, target), name);
      await queue.obliterate({ force: true });
      await queue.close();
    }
    await engine.close();
  });

  /** settlement_report by REST (waiting for the run's end), payout_export by a job on its own queue (waiting too). */
  async function configureConsumers(url: string, exports: { queue: string; timeoutMs: number } = { queue: target.queue, timeoutMs: 60_000 }): Promise<void> {
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [{
      kind: 'rest', url: `${url}/api/dags/settlement/runs`, headers: { Authorization: { env: 'RETRIGGER_SECRET_ORCH_TOKEN' } },
      status: { url: `${url}/runs/{{run_id}}`, field: 'data.state', success: ['success'], failure: ['failed'], runIdField: 'id', pollMs: 20, timeoutMs: 60_000 },
    }]);
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'payout_export'`, [{
      kind: 'bullmq', queue: exports.queue, jobName: 'rebuild-payouts', connection: 'default', prefix, wait: true, pollMs: 20, timeoutMs: exports.timeoutMs,
    }]);
  }

  /** The consumer's worker; with `failWith`, every job it takes fails with that reason. */
  async function startConsumerWorker(log: string[], jobs: { id: string | undefined; name: string; data: unknown }[], queue = target.queue, failWith?: string): Promise<void> {
    consumerWorker = createWorker(replayBackendOf(engine.ctx.config, target), queue, async (job) => {
      log.push(`job ran: ${String(job.data.consumer)}`);
      jobs.push({ id: job.id, name: job.name, data: job.data });
      if (failWith !== undefined) throw new Error(failWith);
      return 'rebuilt';
    }, { concurrency: 1 });
    await consumerWorker.waitUntilReady();
  }

  /** Every job in one of the consumer's queues, whatever its state: the proof that a retry added none. */
  async function jobsIn(name: string): Promise<{ id: string | undefined; state: string }[]> {
    const queue = createQueue(replayBackendOf(engine.ctx.config, target), name);
    try {
      const found = await queue.getJobs(['waiting', 'prioritized', 'delayed', 'active', 'completed', 'failed']);
      return await Promise.all(found.map(async (job) => ({ id: job.id, state: await job.getState() })));
    } finally {
      await queue.close();
    }
  }

  async function exportReplaySteps(id: number): Promise<{ retried: number; replayed: number }> {
    return {
      retried: await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'step_retried' AND detail->>'step' = 'replay' AND detail->>'key' = 'payout_export'`, [id]),
      replayed: await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'replayed' AND detail->>'consumer' = 'payout_export'`, [id]),
    };
  }

  /** Runs the backfill to its end with these queues for the re-triggers (the worker takes a context's own). */
  async function runWith(replayJobs: RecordingReplayJobs, id: number): Promise<BackfillReport> {
    const ctx: StepContext = { ...engine.ctx, replayJobs };
    try {
      return await runUntilSettled(ctx, id, () => undefined, engine.notifier);
    } finally {
      await replayJobs.close();
    }
  }

  async function runNight15(): Promise<number> {
    // The normal run first, as on the night itself: the watermark stands after the hours the backfill replaces.
    await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler', until: new Date('2026-11-26T00:00:00Z') });
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    await overrideGate(engine.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'test run' });
    return backfill.id;
  }

  /**
   * The first commit of each consumer's replay fails (a worker dying between the trigger and its commit, as
   * far as the receiver can tell): a sequence counts attempts outside the transaction the failure rolls back.
   */
  async function failFirstReplayCommits(): Promise<void> {
    await engine.ctx.pool.query(`
      CREATE SEQUENCE IF NOT EXISTS public.replayed_settlement_report;
      CREATE SEQUENCE IF NOT EXISTS public.replayed_payout_export;
      CREATE OR REPLACE FUNCTION public.fail_first_replay_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.kind = 'replayed' AND NEW.detail->>'consumer' IN ('settlement_report', 'payout_export')
           AND nextval(('public.replayed_' || (NEW.detail->>'consumer'))::regclass) = 1 THEN
          RAISE EXCEPTION 'the worker died before its commit';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER fail_first_replay_commit BEFORE INSERT ON backfill.events FOR EACH ROW EXECUTE FUNCTION public.fail_first_replay_commit();`);
  }

  it('runs the REST re-trigger, then the BullMQ one, in dependency order, each once though both steps were retried', async () => {
    const log: string[] = [];
    const jobs: { id: string | undefined; name: string; data: unknown }[] = [];
    orchestrator = await startOrchestrator(log, 'success');
    await configureConsumers(orchestrator.url);
    await startConsumerWorker(log, jobs);
    await failFirstReplayCommits();
    const id = await runNight15();
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    await engine.ctx.pool.query('DROP TRIGGER fail_first_replay_commit ON backfill.events');
    expect(report.backfill.state).toBe('done');

    // The report's run ended before the export's job ran: the order of the dependency.
    expect(log).toEqual(['run started: settlement_report', 'run ended: success', 'run ended: success', 'job ran: payout_export']);
    const partitions = Array.from({ length: 6 }, (_, hour) => `2026-11-15T${String(hour + 5).padStart(2, '0')}:00:00.000Z`);
    // Two calls (the retry), one key, one run; the token from the environment, never from the catalog.
    expect(orchestrator.posts).toHaveLength(2);
    expect(orchestrator.runs.size).toBe(1);
    for (const post of orchestrator.posts) {
      expect(post).toEqual({
        key: `backfill-${id}-replay-settlement_report`, authorization: TOKEN,
        body: { conf: { backfill_id: id, consumer: 'settlement_report', partitions } },
      });
    }
    // One job, under the replay's own id, though the step ran twice.
    expect(jobs).toEqual([{
      id: `backfill-${id}-replay-payout_export`, name: 'rebuild-payouts',
      data: { backfillId: id, consumer: 'payout_export', partitions, idempotencyKey: `backfill-${id}-replay-payout_export`, rollback: false },
    }]);
    const replays = report.steps.filter((step) => step.kind === 'replay' && ['settlement_report', 'payout_export'].includes(step.key));
    expect(replays.map((step) => [step.key, step.status, step.attempts])).toEqual(expect.arrayContaining([
      ['settlement_report', 'done', 2], ['payout_export', 'done', 2],
    ]));
    const { rows } = await engine.ctx.pool.query(
      `SELECT detail->>'consumer' AS consumer, detail->>'via' AS via, detail->>'state' AS state, detail->>'added' AS added FROM backfill.events
       WHERE backfill_id = $1 AND kind = 'replayed' AND detail->>'consumer' IN ('settlement_report', 'payout_export') ORDER BY id`, [id]);
    expect(rows).toEqual([
      { consumer: 'settlement_report', via: 'rest', state: 'success', added: null },
      // The retry found the job its first attempt added.
      { consumer: 'payout_export', via: 'bullmq', state: 'completed', added: 'false' },
    ]);
  });

  it("fails the replay with the run's id and state when the orchestrator's run fails; its dependant never starts", async () => {
    const log: string[] = [];
    const jobs: { id: string | undefined; name: string; data: unknown }[] = [];
    orchestrator = await startOrchestrator(log, 'failed');
    await configureConsumers(orchestrator.url);
    await startConsumerWorker(log, jobs);
    const id = await runNight15();
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('failed');
    expect(report.backfill.failure).toBe(`replay settlement_report failed: settlement_report's run run-1 ended failed (${orchestrator.url}/runs/run-1)`);
    // A failed run is an answer, not a fault: the step is not retried, and the export is never enqueued.
    expect(orchestrator.posts).toHaveLength(1);
    expect(jobs).toEqual([]);
    expect(report.steps.find((step) => step.kind === 'replay' && step.key === 'payout_export')).toMatchObject({ status: 'skipped', attempts: 0 });
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'replayed' AND detail->>'consumer' IN ('settlement_report', 'payout_export')`, [id])).toBe(0);
  });

  it("fails the replay with the consumer, the job's id and its reason when the consumer's worker fails the job; the retry adds no second job", async () => {
    const log: string[] = [];
    const jobs: { id: string | undefined; name: string; data: unknown }[] = [];
    orchestrator = await startOrchestrator(log, 'success');
    await configureConsumers(orchestrator.url, { queue: failingQueue, timeoutMs: 60_000 });
    await startConsumerWorker(log, jobs, failingQueue, 'payout ledger is locked');
    // The first attempt loses its connection after adding the job: the step is retried, and must find that job.
    const replayJobs = new RecordingReplayJobs(engine.ctx.config, true);
    const id = await runNight15();
    const report = await runWith(replayJobs, id);
    const jobId = `backfill-${id}-replay-payout_export`;
    expect(report.backfill.state).toBe('failed');
    expect(report.backfill.failure).toBe(`replay payout_export failed: payout_export's job ${jobId} on queue ${failingQueue} failed: payout ledger is locked`);
    // Two attempts, one job, run once: the retry found the job its first attempt added, and saw it fail.
    expect(replayJobs.adds).toEqual([{ jobId, added: true }, { jobId, added: false }]);
    expect(jobs.map((job) => job.id)).toEqual([jobId]);
    expect(await jobsIn(failingQueue)).toEqual([{ id: jobId, state: 'failed' }]);
    // A failed job is the consumer's answer, not a fault: no third attempt, and the replay is not recorded as done.
    expect(report.steps.find((step) => step.kind === 'replay' && step.key === 'payout_export')).toMatchObject({ status: 'failed', attempts: 2 });
    expect(await exportReplaySteps(id)).toEqual({ retried: 1, replayed: 0 });
  });

  it('fails the replay as timed out, saying what to do, when no worker finishes the job; every attempt waits for the same job', async () => {
    const log: string[] = [];
    orchestrator = await startOrchestrator(log, 'success');
    // Nobody listens on this queue: the job waits until every attempt of the step has timed out.
    await configureConsumers(orchestrator.url, { queue: idleQueue, timeoutMs: 200 });
    const replayJobs = new RecordingReplayJobs(engine.ctx.config, false);
    const id = await runNight15();
    const report = await runWith(replayJobs, id);
    const jobId = `backfill-${id}-replay-payout_export`;
    expect(report.backfill.state).toBe('failed');
    expect(report.backfill.failure).toBe(`replay payout_export failed: payout_export's job ${jobId} on queue ${idleQueue} (prefix ${prefix}) timed out: still waiting after 200 ms; `
      + `no worker has taken it: check that payout_export's worker runs and listens on queue ${idleQueue} (prefix ${prefix}), or raise timeoutMs in payout_export's retrigger in the catalog. `
      + 'The job stays in the queue, and a retry waits for that same job instead of adding another');
    // A timeout is retried (JOB_ATTEMPTS is 3), each attempt waiting for the job the first one added; then it fails.
    expect(replayJobs.adds).toEqual([{ jobId, added: true }, { jobId, added: false }, { jobId, added: false }]);
    expect(await jobsIn(idleQueue)).toEqual([{ id: jobId, state: 'waiting' }]);
    expect(report.steps.find((step) => step.kind === 'replay' && step.key === 'payout_export')).toMatchObject({ status: 'failed', attempts: 3 });
    expect(await exportReplaySteps(id)).toEqual({ retried: 2, replayed: 0 });
  });
});
