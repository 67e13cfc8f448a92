// The real system under the model-based test: a database cloned from the seeded template, a queue prefix of its
// own in the real Redis, and a BullMQ worker that fetches jobs by hand (no processor, no timers) so the test
// decides which job runs when. Each job goes through the real step processor (jobs/stepProcessor.ts).
//
// NOTE: the clone of the next run's database is started while the current run works (it costs ~0.1 s of a run
// that costs about a second), and databases are dropped in the background; closeModelSystems() waits for both.

import { randomUUID } from 'node:crypto';
import { Worker, type Job, type Queue } from 'bullmq';
import pg from 'pg';
import { STEP_QUEUE } from '../../src/queue/registry.js';
import { createStepProcessor } from '../../jobs/stepProcessor.js';
import type { StepContext } from '../../src/core/procedure.js';
import { createStepQueue } from '../../src/queue/stepQueue.js';
import { createWorker } from '../../src/queue/connection.js';
import { queueBackendOf } from '../../src/backends.js';
import { createTestEngine, type TestEngine } from './engine.js';
import { ModelMessenger } from './modelMessenger.js';
import { storedRows } from './storedRows.js';

export const OPERATOR = 'U07ONCALL';
/** The demo's day and the part of it the model's backfills cover: two overlapping hour ranges of night 15. */
export const DAY = '2026-11-15';
export const MODEL_HOURS = ['05', '06', '07', '08'].map((h) => new Date(`${DAY}T${h}:00:00Z`).toISOString());
/** Every hour of the day whose rows the final check compares (outside the targets nothing may change). */
const DAY_HOURS = Array.from({ length: 24 }, (_, h) => new Date(Date.UTC(2026, 10, 15, h)).toISOString());
/** The id space of late rows: far above the demo's order ids, so a late row never collides with a staged one. */
const LATE_ORDER_BASE = 9_000_000_000;

/** A partition's rows by key (order_id), each as its jsonb text: comparable with staged and preserved rows. */
export type RowMap = Map<string, string>;

export interface LateRow {
  hour: string;
  orderId: string;
  row: string;
  /** Written from the publish's own test seam, between its writes and its commit. */
  duringPublish: boolean;
}

/** Acts at the publish seam of (backfill, hour); returns false to wait for another publish. */
type SeamAction = (backfillId: number, hour: string) => Promise<boolean>;

/**
 * Acts after a statement of a publish (its hour given) or of a rollback (no hour): returns false to wait for a
 * later statement. Each action counts the statements it is offered, so it lands between two given ones.
 */
export type StatementAction = (hour: string | undefined) => Promise<boolean>;

/** A job taken from Redis by a worker that then died: its lock is never renewed nor released. */
interface AbandonedJob {
  job: Job;
  token: string;
  /** The claim the dead worker took in Postgres (none when the step was not claimable). */
  claim?: DeadClaim;
}

export interface DeadClaim {
  backfillId: number;
  kind: string;
  key: string;
  token: string;
  /** When its lease runs out (epoch ms, the database's clock): nobody may claim the step before. */
  leaseUntil: number;
  /** The last timeline event when it claimed: a later step_started of the step is whoever claimed it next. */
  afterEventId: number;
}

/** What the database's schema offers: the model also runs against the engine before migration 0005 (48f2591). */
interface SchemaFeatures {
  /** backfill_steps.claim_token / lease_expires_at */
  leases: boolean;
  /** backfill_targets.breach */
  breach: boolean;
  /** backfill.partition_generations */
  generations: boolean;
  /** backfill_consumers.undeliverable */
  undeliverable: boolean;
}

export interface ModelSystem {
  ctx: StepContext;
  schema: SchemaFeatures;
  messenger: ModelMessenger;
  queue: Queue;
  worker: Worker;
  process: (job: Job) => Promise<unknown>;
  /** Another connection: normal ingestion's late rows and changes to the source. */
  writer: pg.Client;
  leaseMs: number;
  abandoned: AbandonedJob[];
  /** Every claim a dead worker took in this run (kept after its job is recovered). */
  deadClaims: DeadClaim[];
  /**
   * One-shot actions at the publish seam (a publish has done its writes and is about to run its commit
   * checks): each is offered every publish until it says it fired.
   */
  seam: SeamAction[];
  /** One-shot actions after a statement of a publish (any statement, not only the last). */
  publishStatements: StatementAction[];
  /** One-shot actions after a statement of the next rollback. */
  rollbackStatements: StatementAction[];
  /** Late rows the seam wrote since the model last looked. */
  firedLate: LateRow[];
  /** Late rows a seam is writing: on a target published by swap they wait for the publish to commit. */
  landing: Promise<unknown>[];
  /** warehouse.orders as one table (publish by rewrite) or partitioned by hour (publish by swap). */
  target: ModelTarget;
  /** Every hour small: staged in the shared tables, several a stage step (SMALL_HOUR_BATCH), published by rewrite. */
  smallHours: boolean;
  /** Connections the test ended under a publish: each may surface once as a raw connection error. */
  connectionsKilled: number;
  /** Errors checked-out pool clients emitted (their connection died between queries). */
  droppedConnections: string[];
  /** Work started from the seam that may outlive the job (a stop waiting for the publish's locks). */
  pending: Promise<unknown>[];
  /** Waits for that work; a failure in it fails the run. */
  settlePending(): Promise<void>;
  nextLateId: number;
  close(): Promise<void>;
}

export type ModelTarget = 'plain' | 'partitioned';
const TEMPLATE: Record<ModelTarget, 'month-end' | 'month-end-partitioned'> = { plain: 'month-end', partitioned: 'month-end-partitioned' };
const spares = new Map<ModelTarget, Promise<TestEngine>>();
const background: Promise<unknown>[] = [];

function engineEnv(): Record<string, string> {
  return {
    JOB_ATTEMPTS: '3',
    JOB_BACKOFF_MS: '5',
    // Reminders are delayed jobs due an hour after the announcement: never within a run.
    ANNOUNCE_REMINDER_MS: '3600000',
    STEP_LEASE_MS: '250',
    WORKER_CONCURRENCY: '1',
  };
}

async function takeEngine(target: ModelTarget): Promise<TestEngine> {
  const engine = await (spares.get(target) ?? createTestEngine(TEMPLATE[target], engineEnv()));
  const spare = createTestEngine(TEMPLATE[target], engineEnv());
  spares.set(target, spare);
  // A clone that fails is reported by the run that takes it.
  spare.catch(() => undefined);
  return engine;
}

export async function createModelSystem(options: { waveSize: number; target: ModelTarget; smallHours: boolean }): Promise<ModelSystem> {
  const engine = await takeEngine(options.target);
  // NOTE: a pool client whose connection dies while it is checked out but between queries (the test ends the
  // session of a publish waiting at its seam) emits 'error' with nobody listening, which would crash the
  // process; src/db/pool.ts listens on idle clients only. The model listens on every client, so the run goes
  // on and the step's next query fails as "not queryable". Reported as a finding of this test.
  const droppedConnections: string[] = [];
  engine.ctx.pool.on('connect', (client) => {
    client.on('error', (error) => droppedConnections.push(error.message));
  });
  const messenger = new ModelMessenger();
  const writer = new pg.Client({ connectionString: engine.ctx.config.DATABASE_URL, application_name: 'backfill-bot-model-writer' });
  await writer.connect();
  const config = { ...engine.ctx.config, WAVE_SIZE: options.waveSize, ...(options.smallHours ? { SWAP_MIN_ROWS: 10_000, SMALL_HOUR_BATCH: 3 } : {}) };
  const system: ModelSystem = {
    ctx: { pool: engine.ctx.pool, config, messenger },
    schema: await schemaFeatures(engine.ctx.pool),
    messenger,
    queue: createStepQueue(config),
    worker: createWorker(queueBackendOf(config), STEP_QUEUE, null, {
      autorun: false, skipStalledCheck: true, skipLockRenewal: true, lockDuration: 60_000,
    }),
    process: async () => undefined,
    writer,
    leaseMs: config.STEP_LEASE_MS,
    abandoned: [],
    deadClaims: [],
    seam: [],
    publishStatements: [],
    rollbackStatements: [],
    firedLate: [],
    landing: [],
    target: options.target,
    smallHours: options.smallHours,
    connectionsKilled: 0,
    droppedConnections,
    pending: [],
    async settlePending() {
      await Promise.all(this.pending.splice(0));
    },
    nextLateId: LATE_ORDER_BASE,
    async close() {
      await this.worker.close(true).catch(() => undefined);
      await this.queue.obliterate({ force: true }).catch(() => undefined);
      await this.queue.close().catch(() => undefined);
      await writer.end().catch(() => undefined);
      // engine.close() obliterates (again, cheaply) and drops the database.
      background.push(engine.close().catch((error: unknown) => console.error(`model: dropping a run's database failed: ${String(error)}`)));
    },
  };
  system.ctx.hooks = {
    beforeFenceCheck: async (backfillId: number, hour: Date) => {
      for (const action of [...system.seam]) {
        if (await action(backfillId, hour.toISOString())) system.seam.splice(system.seam.indexOf(action), 1);
      }
    },
    afterStatement: async (_backfillId: number, hour: Date) => offerStatement(system.publishStatements, hour.toISOString()),
  };
  const processor = createStepProcessor(system.ctx, system.queue);
  system.process = processor;
  return system;
}

/** Offers one statement to the waiting actions; those that fired are done. */
export async function offerStatement(actions: StatementAction[], hour: string | undefined): Promise<void> {
  for (const action of [...actions]) {
    if (await action(hour)) actions.splice(actions.indexOf(action), 1);
  }
}

async function schemaFeatures(db: pg.Pool): Promise<SchemaFeatures> {
  const { rows } = await db.query<SchemaFeatures>(
    `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'backfill' AND table_name = 'backfill_steps' AND column_name = 'lease_expires_at') AS leases,
            EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'backfill' AND table_name = 'backfill_targets' AND column_name = 'breach') AS breach,
            EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = 'backfill' AND table_name = 'partition_generations') AS generations,
            EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'backfill' AND table_name = 'backfill_consumers' AND column_name = 'undeliverable') AS undeliverable`);
  return rows[0] ?? { leases: false, breach: false, generations: false, undeliverable: false };
}

/** Waits for the databases being dropped and drops the spare clone. */
export async function closeModelSystems(): Promise<void> {
  for (const pending of spares.values()) background.push(pending.then((engine) => engine.close(), () => undefined));
  spares.clear();
  await Promise.all(background.splice(0));
}

/**
 * A row another writer commits into a target hour: a fresh key, from its own connection (autocommit). `via`: a
 * connection of its own for a write that may wait (inside a swap), so the shared writer stays free for the
 * seam's other actions (one of them ends the publish's session, which is what lets such a write through).
 */
export async function insertLateRow(system: ModelSystem, hour: string, via: pg.Client = system.writer): Promise<Omit<LateRow, 'duringPublish'>> {
  system.nextLateId += 1;
  const { rows } = await via.query<{ k: string; v: string }>(
    `INSERT INTO warehouse.orders AS o (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
     VALUES ($1::timestamptz, $2::bigint, 1, 4242, 'EUR', 100.00, 1.000000, 100.00)
     RETURNING o.order_id::text AS k, to_jsonb(o)::text AS v`,
    [hour, system.nextLateId]);
  const row = rows[0];
  if (!row) throw new Error('the late row insert returned nothing');
  return { hour, orderId: row.k, row: row.v };
}

export interface JobResult {
  ran: true;
  name: string;
  data: Record<string, unknown>;
  outcome?: unknown;
  error?: unknown;
}

export async function takeNextJob(system: ModelSystem): Promise<{ job: Job; token: string } | undefined> {
  const token = randomUUID();
  const job = await system.worker.getNextJob(token, { block: false });
  return job ? { job, token } : undefined;
}

/** A job that runs longer than this is stuck (a lock wait nobody will end): the run fails saying so. */
const JOB_TIMEOUT_MS = 20_000;

export class JobTimeout extends Error {
  constructor(readonly jobName: string) {
    super(`the ${jobName} job did not finish within ${JOB_TIMEOUT_MS} ms`);
  }
}

function withinTimeout<T>(work: Promise<T>, jobName: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new JobTimeout(jobName)), JOB_TIMEOUT_MS);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/** Runs a taken job through the real processor and hands it back to BullMQ as completed or failed. */
export async function processTaken(system: ModelSystem, taken: { job: Job; token: string }): Promise<JobResult> {
  const { job, token } = taken;
  const data = (job.data ?? {}) as Record<string, unknown>;
  let result: JobResult;
  try {
    result = { ran: true, name: job.name, data, outcome: await withinTimeout(system.process(job), job.name) };
  } catch (error) {
    if (error instanceof JobTimeout) throw error;
    result = { ran: true, name: job.name, data, error };
  }
  try {
    if (result.error === undefined) await job.moveToCompleted(result.outcome, token, false);
    else await job.moveToFailed(result.error instanceof Error ? result.error : new Error(String(result.error)), token, false);
  } catch (error) {
    // Redis lost the job while it ran (emptied under it): the worker cannot report it; the database knows.
    if (!/Missing (key|lock) for job/.test(error instanceof Error ? error.message : String(error))) throw error;
  }
  return result;
}

export async function partitionRows(db: pg.Pool | pg.Client, hour: string): Promise<RowMap> {
  const { rows } = await db.query<{ k: string; v: string }>(
    'SELECT order_id::text AS k, to_jsonb(t)::text AS v FROM warehouse.orders t WHERE partition_hour = $1::timestamptz', [hour]);
  return new Map(rows.map((r) => [r.k, r.v]));
}

export async function dayRows(db: pg.Pool): Promise<Map<string, RowMap>> {
  const { rows } = await db.query<{ h: Date; k: string; v: string }>(
    `SELECT partition_hour AS h, order_id::text AS k, to_jsonb(t)::text AS v FROM warehouse.orders t
     WHERE partition_hour >= $1::timestamptz AND partition_hour < $1::timestamptz + interval '1 day'`, [`${DAY}T00:00:00Z`]);
  const byHour = new Map<string, RowMap>(DAY_HOURS.map((h) => [h, new Map()]));
  for (const r of rows) byHour.get(r.h.toISOString())?.set(r.k, r.v);
  return byHour;
}

// Staged and saved rows live in the pipeline's store (bf_orders), shaped like the target plus the run's columns:
// read back as the target's row type, they give the live form.
const AS_LIVE_ROW = `to_jsonb(jsonb_populate_record(NULL::warehouse.orders, to_jsonb(s) - 'bf_backfill' - 'bf_generation'))::text`;

export async function stagedRows(db: pg.Pool, backfillId: number, hour: string): Promise<RowMap> {
  const { rows } = await db.query<{ k: string; v: string }>(
    `SELECT s.order_id::text AS k, ${AS_LIVE_ROW} AS v FROM ${await storedRows(db, 'staged', 's')} JOIN backfill.backfills b ON b.id = s.bf_backfill
     WHERE s.bf_backfill = $1::bigint AND s.partition_hour = $2::timestamptz AND s.bf_generation = 1`, [backfillId, hour]);
  // Published by swap, right after the publish: its staged table is the live partition, the keys it wrote kept.
  const written = `bf_orders.p${hour.slice(0, 13).replace(/[-T]/g, '')}_b${backfillId}_written`;
  const { rows: swapped } = await db.query<{ present: boolean }>('SELECT to_regclass($1::text) IS NOT NULL AS present', [written]);
  if (!swapped[0]?.present) return new Map(rows.map((r) => [r.k, r.v]));
  const { rows: live } = await db.query<{ k: string; v: string }>(
    `SELECT s.order_id::text AS k, ${AS_LIVE_ROW} AS v FROM warehouse.orders s
     WHERE s.partition_hour = $1::timestamptz AND ${await writtenKey(db, backfillId, hour, written)}`, [hour]);
  return new Map([...rows, ...live].map((r) => [r.k, r.v]));
}

/**
 * Whether live row `s` has a key the swap wrote: one of the written table's, or, where staging kept it by difference
 * (its bf_change column), one of the partition swapped out (the saved table) not dropped, or one added.
 */
async function writtenKey(db: pg.Pool, backfillId: number, hour: string, written: string): Promise<string> {
  const { rows } = await db.query<{ saved: string | null }>(
    `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($3::text) AND attname = 'bf_change') THEN saved_table END AS saved
     FROM backfill.preserved_partitions WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz`, [backfillId, hour, written]);
  const saved = rows[0]?.saved;
  if (!saved) return `EXISTS (SELECT 1 FROM ${written} w WHERE w.order_id = s.order_id)`;
  return `(EXISTS (SELECT 1 FROM ${written} w WHERE w.bf_change = 'added' AND w.order_id = s.order_id)
    OR (EXISTS (SELECT 1 FROM ${saved} p WHERE p.order_id = s.order_id) AND NOT EXISTS (SELECT 1 FROM ${written} w WHERE w.bf_change = 'dropped' AND w.order_id = s.order_id)))`;
}

/**
 * Every row a backfill saved before replacing a partition (whatever generation it filed them under); by swap,
 * the prior partition kept in the store. Undefined once a rollback swapped that partition back in: it is live
 * again, and its rows are the live rows' business.
 */
export async function preservedRows(db: pg.Pool, backfillId: number, hour: string): Promise<Set<string> | undefined> {
  const { rows: swapped } = await db.query<{ table: string | null; attached: boolean | null }>(
    `SELECT p.saved_table AS table, c.relispartition AS attached FROM backfill.preserved_partitions p LEFT JOIN pg_class c ON c.oid = to_regclass(p.saved_table)
     WHERE p.backfill_id = $1::bigint AND p.partition_hour = $2::timestamptz AND p.saved_table IS NOT NULL`, [backfillId, hour]);
  const saved = swapped[0];
  if (saved) {
    if (saved.attached !== false || !saved.table) return undefined;
    const { rows } = await db.query<{ v: string }>(`SELECT DISTINCT ${AS_LIVE_ROW} AS v FROM ${saved.table} s`);
    return new Set(rows.map((r) => r.v));
  }
  const { rows } = await db.query<{ v: string }>(
    `SELECT DISTINCT ${AS_LIVE_ROW} AS v FROM ${await storedRows(db, 'saved', 's')} WHERE s.bf_backfill = $1::bigint AND s.partition_hour = $2::timestamptz`, [backfillId, hour]);
  return new Set(rows.map((r) => r.v));
}
