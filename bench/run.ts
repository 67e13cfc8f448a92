// npm run bench: how fast the one write path replaces partitions, against the same work written by hand, and
// what a whole backfill through BullMQ costs per partition. Runs on a database of its own (backfill_bot_bench),
// dropped and recreated at the start and dropped again at the end, seeded with the month-end demo; the queue
// lives under a random QUEUE_PREFIX and is obliterated afterwards. Every figure is the median of a few runs.

import { randomBytes } from 'node:crypto';
import os from 'node:os';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { STEP_QUEUE } from '../jobs/registry.js';
import { runUntilSettled } from '../src/cli/runner.js';
import { loadConfig, type Config } from '../src/config.js';
import type { EngineContext } from '../src/core/context.js';
import { overrideGate } from '../src/core/gate.js';
import { replacePartition } from '../src/core/partitionStep.js';
import { startBackfill } from '../src/core/start.js';
import { tick } from '../src/core/tick.js';
import { formatHour, formatHourRange, hoursBetween, parseHour } from '../src/core/time.js';
import { migrate } from '../src/db/migrate.js';
import { requirePipeline, type Pipeline } from '../src/db/pipelines.js';
import { createPool, dropDatabase, quoteIdent, quoteQualified, recreateDatabase, withTransaction, type Pool } from '../src/db/pool.js';
import { DEMO_PIPELINE } from '../src/demo/constants.js';
import { seedDemo } from '../src/demo/seed.js';
import { isBackfillError } from '../src/errors.js';
import { redisConnection } from '../src/queue/stepQueue.js';

const BENCH_DATABASE = 'backfill_bot_bench';
/** Sections 1 and 2: 48 consecutive hours that the month-end seed has built (none of them flagged). */
const WRITE_PATH_HOURS = hoursBetween(parseHour('2026-11-02T00:00'), parseHour('2026-11-03T23:00'));
/** Section 3: the backfill's explicit range; every repetition reruns the same 24 hours. */
const BACKFILL_FIRST_HOUR = '2026-11-02T00:00';
const BACKFILL_LAST_HOUR = '2026-11-02T23:00';
const BACKFILL_TARGET = `${BACKFILL_FIRST_HOUR}..${BACKFILL_LAST_HOUR}`;
const BACKFILL_PARTITIONS = hoursBetween(parseHour(BACKFILL_FIRST_HOUR), parseHour(BACKFILL_LAST_HOUR)).length;
const WRITE_PATH_REPS = 15;
const BACKFILL_REPS = 5;
const ACTOR = 'U07BENCH';

interface Pass {
  seconds: number;
  partitions: number;
  rows: number;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const upper = sorted[mid];
  const lower = sorted[sorted.length % 2 === 0 ? mid - 1 : mid];
  if (upper === undefined || lower === undefined) throw new Error('median of nothing');
  return (lower + upper) / 2;
}

function urlWithDatabase(base: string, database: string): string {
  const url = new URL(base);
  url.pathname = `/${encodeURIComponent(database)}`;
  return url.toString();
}


/**
 * BullMQ retries a Redis that is not there forever, so the bench would hang instead of failing: ask it once,
 * with a short timeout, before anything is created. Returns its version.
 */
async function checkRedis(config: Config): Promise<string> {
  const redis = new Redis(config.REDIS_URL, {
    lazyConnect: true, connectTimeout: 3000, maxRetriesPerRequest: 0, enableOfflineQueue: false, retryStrategy: () => null,
  });
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => {
    lastError = error;
  });
  try {
    await redis.connect();
    const info = await redis.info('server');
    return /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown';
  } catch (error) {
    const why = lastError?.message ?? (error as Error).message;
    throw new Error(`Redis at ${config.REDIS_URL} does not answer (${why}): start it, or set REDIS_URL`, { cause: error });
  } finally {
    redis.disconnect();
  }
}

// ---- 1. the same work by hand: BEGIN; DELETE the hour; the step's INSERT … SELECT; COMMIT, on one connection ----

async function rawPass(client: pg.PoolClient, pipeline: Pipeline, hours: Date[]): Promise<Pass> {
  const del = `DELETE FROM ${quoteQualified(pipeline.targetTable)} WHERE ${quoteIdent(pipeline.partitionColumn)} = $1`;
  let rows = 0;
  const started = performance.now();
  for (const hour of hours) {
    await client.query('BEGIN');
    try {
      await client.query(del, [hour]);
      const inserted = await client.query(pipeline.stepSql, [hour]);
      rows += inserted.rowCount ?? 0;
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw error;
    }
  }
  return { seconds: (performance.now() - started) / 1000, partitions: hours.length, rows };
}

// ---- 2. the engine's write path: one withTransaction per hour around replacePartition ----------------------

async function enginePass(pool: Pool, pipeline: Pipeline, hours: Date[]): Promise<Pass> {
  let rows = 0;
  const started = performance.now();
  for (const hour of hours) {
    const snapshot = await withTransaction(pool, (tx) => replacePartition(tx, pipeline, hour));
    rows += snapshot.rows;
  }
  return { seconds: (performance.now() - started) / 1000, partitions: hours.length, rows };
}

// ---- 3. a whole backfill: start, override the gate, run a real BullMQ worker until it settles ---------------

interface BackfillRun extends Pass {
  id: number;
  /** From the timeline (events.at is clock_timestamp()): approval → first step started (worker start-up, dispatch). */
  toFirstStepMs: number;
  /** approval → the move to done (recompute, watermark, replays, compare). */
  toDoneMs: number;
  /** done → runUntilSettled returned (the notify steps, its 100 ms polling, closing the worker). */
  afterDoneMs: number;
}

async function timelineOf(pool: Pool, backfillId: number): Promise<Map<string, Date>> {
  const { rows } = await pool.query<{ kind: string; at: Date }>(
    `SELECT kind, min(at) AS at FROM backfill.events
     WHERE backfill_id = $1::bigint AND kind IN ('approved', 'step_started', 'finished') GROUP BY kind`, [backfillId]);
  return new Map(rows.map((row) => [row.kind, row.at]));
}

function eventAt(timeline: Map<string, Date>, kind: string, backfillId: number): number {
  const at = timeline.get(kind);
  if (!at) throw new Error(`backfill #${backfillId} has no ${kind} event`);
  return at.getTime();
}

async function backfillRun(ctx: EngineContext): Promise<BackfillRun> {
  // A MAX_PARTITIONS below the range's length would refuse it: the bench says why it goes over.
  const limitOverride = ctx.config.MAX_PARTITIONS < BACKFILL_PARTITIONS ? `bench: fixed ${BACKFILL_PARTITIONS}-hour range` : undefined;
  const { backfill } = await startBackfill(ctx, { pipeline: DEMO_PIPELINE, target: BACKFILL_TARGET, reason: 'bench', actor: ACTOR, limitOverride });
  if (backfill.state !== 'announced') throw new Error(`backfill #${backfill.id} started ${backfill.state}, expected announced (waiting for owners)`);
  const gate = await overrideGate(ctx, { backfillId: backfill.id, actor: ACTOR, reason: 'bench: throughput measurement on a throwaway database' });
  if (!gate.approved) throw new Error(`overriding the gate of backfill #${backfill.id} did not approve it (state ${gate.backfill.state})`);
  // The clock starts once the approval has committed and stops when runUntilSettled has seen the backfill done
  // with its "after" notifications sent, so it includes starting and closing the worker.
  const started = performance.now();
  const report = await runUntilSettled(ctx, backfill.id, () => undefined);
  const seconds = (performance.now() - started) / 1000;
  const returnedAt = Date.now();
  if (report.backfill.state !== 'done') {
    throw new Error(`backfill #${backfill.id} ended ${report.backfill.state}: ${report.backfill.failure ?? 'no failure recorded'}`);
  }
  const timeline = await timelineOf(ctx.pool, backfill.id);
  const approvedAt = eventAt(timeline, 'approved', backfill.id);
  const doneAt = eventAt(timeline, 'finished', backfill.id);
  const rows = report.targets.reduce((sum, target) => sum + (target.rowsAfter ?? 0), 0);
  return {
    id: backfill.id, seconds, partitions: report.targets.length, rows,
    toFirstStepMs: eventAt(timeline, 'step_started', backfill.id) - approvedAt,
    toDoneMs: doneAt - approvedAt,
    afterDoneMs: returnedAt - doneAt,
  };
}

// ---- output ---------------------------------------------------------------------------------------------

function fmt(value: number, digits: number): string {
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function table(header: string[], rows: string[][], alignRight: (column: number) => boolean): string {
  const widths = header.map((cell, column) => Math.max(cell.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: string[]) => cells
    .map((cell, column) => (alignRight(column) ? cell.padStart(widths[column] ?? 0) : cell.padEnd(widths[column] ?? 0)))
    .join('  ').trimEnd();
  return [line(header), widths.map((width) => '-'.repeat(width)).join('  '), ...rows.map(line)].join('\n');
}

interface Summary {
  label: string;
  passes: Pass[];
}

function summaryRow(summary: Summary, rawPerPartition: number | null): string[] {
  const seconds = median(summary.passes.map((pass) => pass.seconds));
  const first = summary.passes[0];
  if (!first) throw new Error(`no runs for ${summary.label}`);
  const perPartition = seconds / first.partitions;
  const rowsPerRun = median(summary.passes.map((pass) => pass.rows));
  const min = Math.min(...summary.passes.map((pass) => pass.seconds));
  const max = Math.max(...summary.passes.map((pass) => pass.seconds));
  return [
    summary.label,
    String(first.partitions),
    `${fmt(seconds, 3)} (${fmt(min, 3)}–${fmt(max, 3)})`,
    fmt(perPartition * 1000, 1),
    fmt(first.partitions / seconds, 1),
    fmt(rowsPerRun / seconds, 0),
    rawPerPartition === null ? '1.00×' : `${fmt(perPartition / rawPerPartition, 2)}×`,
  ];
}

// ---- main -----------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const base = loadConfig();
  const benchUrl = urlWithDatabase(base.DATABASE_URL, BENCH_DATABASE);
  const prefix = `bench-${randomBytes(6).toString('hex')}`;
  // Through loadConfig again so the overrides are validated like any other configuration.
  const config: Config = loadConfig({ ...process.env, DATABASE_URL: benchUrl, QUEUE_PREFIX: prefix });

  const totalStarted = performance.now();
  const redisVersion = await checkRedis(config);
  await recreateDatabase(benchUrl);
  const pool = createPool(benchUrl, 'backfill-bot-bench');
  const ctx: EngineContext = { pool, config };
  let failure: unknown;
  try {
    const seedStarted = performance.now();
    await migrate(pool);
    const seed = await seedDemo(pool, { scenario: 'month-end' });
    const seedSeconds = (performance.now() - seedStarted) / 1000;
    const pipeline = await requirePipeline(pool, DEMO_PIPELINE);
    const { rows: versionRows } = await pool.query<{ server_version: string }>('SHOW server_version');
    const postgresVersion = versionRows[0]?.server_version ?? 'unknown';

    console.log(`backfill-bot benchmark: database ${BENCH_DATABASE} (month-end seed, ${fmt(seed.orderRows, 0)} rows in ` +
      `${seed.partitions} partitions, seeded in ${fmt(seedSeconds, 1)} s), queue prefix ${prefix}`);

    // 1 and 2, interleaved (ABBA) after one untimed pass of each, so drift (dead rows, autovacuum, caches)
    // falls on both alike.
    const raw: Pass[] = [];
    const engine: Pass[] = [];
    const client = await pool.connect();
    try {
      await rawPass(client, pipeline, WRITE_PATH_HOURS);
      await enginePass(pool, pipeline, WRITE_PATH_HOURS);
      for (let rep = 0; rep < WRITE_PATH_REPS; rep += 1) {
        if (rep % 2 === 0) {
          raw.push(await rawPass(client, pipeline, WRITE_PATH_HOURS));
          engine.push(await enginePass(pool, pipeline, WRITE_PATH_HOURS));
        } else {
          engine.push(await enginePass(pool, pipeline, WRITE_PATH_HOURS));
          raw.push(await rawPass(client, pipeline, WRITE_PATH_HOURS));
        }
      }
    } finally {
      client.release();
    }
    const rowsChecked = new Set([...raw, ...engine].map((pass) => pass.rows));
    if (rowsChecked.size !== 1) throw new Error(`the passes wrote different row counts: ${[...rowsChecked].join(', ')}`);

    // 3. Each backfill moves the watermark back to the hour before the range; tick re-advances it over the
    // range so every repetition starts from the same place.
    const backfills: BackfillRun[] = [];
    const rangeEnd = parseHour(BACKFILL_LAST_HOUR);
    for (let rep = 0; rep < BACKFILL_REPS; rep += 1) {
      backfills.push(await backfillRun(ctx));
      const ticked = await tick(ctx, { pipeline: DEMO_PIPELINE, actor: ACTOR, until: rangeEnd });
      if (ticked.watermark?.getTime() !== rangeEnd.getTime()) {
        throw new Error(`tick after the backfill stopped at ${ticked.watermark ? formatHour(ticked.watermark) : 'no watermark'}: ${ticked.stoppedBecause}`);
      }
    }

    const rawPerPartition = median(raw.map((pass) => pass.seconds)) / WRITE_PATH_HOURS.length;
    const cpus = os.cpus();
    const firstHour = WRITE_PATH_HOURS[0];
    const lastHour = WRITE_PATH_HOURS.at(-1);
    if (!firstHour || !lastHour) throw new Error('no hours to measure');

    console.log('');
    console.log(table(['machine', ''], [
      ['node', process.version],
      ['cores (os.cpus)', `${cpus.length}${cpus[0] ? ` × ${cpus[0].model.trim()}` : ''}`],
      ['postgres', postgresVersion],
      ['redis', redisVersion],
      ['platform', `${os.platform()} ${os.release()}`],
      ['WORKER_CONCURRENCY', `${config.WORKER_CONCURRENCY} (from config; default 4)`],
    ], () => false));
    console.log('');
    console.log(`1, 2: ${formatHourRange(firstHour, lastHour)} (${WRITE_PATH_HOURS.length} hours, ` +
      `${fmt(median(raw.map((pass) => pass.rows)), 0)} rows), one partition per transaction, one at a time; ` +
      `${WRITE_PATH_REPS} timed runs each after one warm-up, interleaved.`);
    console.log(`3: backfill ${BACKFILL_TARGET} (reason 'bench', gate overridden), timed from approval to done with ` +
      `notifications sent; ${BACKFILL_REPS} runs, tick re-advances the watermark between them.`);
    console.log('');
    console.log(table(
      ['measurement', 'partitions', 'median s (min–max)', 'ms/partition', 'partitions/s', 'rows/s', 'time vs 1'],
      [
        summaryRow({ label: '1 raw SQL: BEGIN; DELETE; step INSERT…SELECT; COMMIT', passes: raw }, null),
        summaryRow({ label: '2 withTransaction + replacePartition', passes: engine }, rawPerPartition),
        summaryRow({ label: `3 backfill via BullMQ, concurrency ${config.WORKER_CONCURRENCY}`, passes: backfills }, rawPerPartition),
      ],
      (column) => column > 0,
    ));
    const toDone = median(backfills.map((run) => run.toDoneMs));
    console.log('');
    console.log(`3 split by the timeline (events.at, clock_timestamp), medians: approval → first step started ` +
      `${fmt(median(backfills.map((run) => run.toFirstStepMs)), 0)} ms (worker start-up, dispatch); approval → done ` +
      `${fmt(toDone, 0)} ms (${fmt(toDone / BACKFILL_PARTITIONS, 1)} ms/partition, ` +
      `${fmt(toDone / 1000 / BACKFILL_PARTITIONS / rawPerPartition, 2)}× row 1); done → runUntilSettled returned ` +
      `${fmt(median(backfills.map((run) => run.afterDoneMs)), 0)} ms (notify steps, 100 ms polling, worker close).`);
    console.log(`bench time ${fmt((performance.now() - totalStarted) / 1000, 1)} s, seeding included.`);
  } catch (error) {
    failure = error;
  }

  // Clean up whatever happened above; a clean-up error is reported, but never hides the first failure.
  const cleanup: [string, () => Promise<unknown>][] = [
    ['close the pool', () => pool.end()],
    ['obliterate the bench queue', async () => {
      const queue = new Queue(STEP_QUEUE, { connection: redisConnection(config), prefix });
      try {
        await queue.obliterate({ force: true });
      } finally {
        await queue.close();
      }
    }],
    [`drop ${BENCH_DATABASE}`, () => dropDatabase(benchUrl)],
  ];
  for (const [what, step] of cleanup) {
    try {
      await step();
    } catch (error) {
      console.error(`clean-up: could not ${what}: ${(error as Error).message}`);
      failure ??= error;
    }
  }
  if (failure !== undefined) throw failure;
}

main().then(() => process.exit(0), (error: unknown) => {
  console.error(`bench failed: ${isBackfillError(error) ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
