// What the benchmark prints and what it writes to bench/results.json.

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import type { StatementSummary } from './autoExplain.js';
import type { BackfillRun, Phases } from './backfill.js';
import type { Spread } from './stats.js';
import type { SuiteRecord } from './suite.js';

export interface Machine {
  nproc: number;
  cpuModel: string;
  memoryGb: number;
  platform: string;
  node: string;
  postgres: string;
  redis: string;
  /** The PostgreSQL settings the figures depend on. */
  settings: Record<string, string>;
  workerConcurrency: number;
  waveSize: number;
  /** SWAP_MIN_ROWS: below it, a partition of its own hour is published by rewrite (absent from runs before it). */
  swapMinRows?: number;
}

export function describeMachine(versions: { postgres: string; redis: string; settings: Record<string, string> }, config: { WORKER_CONCURRENCY: number; WAVE_SIZE: number; SWAP_MIN_ROWS: number }): Machine {
  let nproc = os.availableParallelism();
  try {
    nproc = Number(execFileSync('nproc', { encoding: 'utf8' }).trim()) || nproc;
  } catch {
    // No coreutils nproc: os.availableParallelism() says the same on Linux.
  }
  return {
    nproc,
    cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
    memoryGb: Math.round(os.totalmem() / 2 ** 30),
    platform: `${os.platform()} ${os.release()}`,
    node: process.version,
    postgres: versions.postgres,
    redis: versions.redis,
    settings: versions.settings,
    workerConcurrency: config.WORKER_CONCURRENCY,
    waveSize: config.WAVE_SIZE,
    swapMinRows: config.SWAP_MIN_ROWS,
  };
}

/** One line of the table: a spread of timed runs (seconds, or MB for memory) and its ratio to a baseline. */
export interface Measurement extends Spread {
  name: string;
  unit: 's' | 'MB';
  /** The median per partition, in ms, for timings of whole passes over the partitions. */
  perPartitionMs: number | null;
  /** median / the baseline's median. */
  ratio: number | null;
  against: string | null;
  /** The run was stopped before it finished: the figure is the time allowed, and the true one is higher. */
  lowerBound?: boolean;
  note?: string;
}

export interface TargetCheck {
  target: string;
  measured: string;
  met: boolean | null;
  note?: string;
}

export interface BackfillPhases {
  /** The queue backend its jobs went through (absent in entries from before the bench compared backends: Redis). */
  queue?: string;
  workers: number;
  /** Medians over the repetitions, in ms. */
  phases: Phases;
}

/** One queue backend's row of the side-by-side table. */
export interface QueueComparison {
  queue: string;
  /** Where its queues lived in the run. */
  where: string;
  /** No-op jobs through one Worker: rates of each timed pass, in jobs per second. */
  jobs: { jobs: number; concurrency: number; addPerSecond: Spread; processPerSecond: Spread } | null;
  /** The whole backfill with each worker-process count: seconds, and the median's ratio to the raw step. */
  backfills: { workers: number; seconds: Spread; ratio: number; lowerBound: boolean }[];
}

export interface RunResult {
  at: string;
  args: Record<string, unknown>;
  machine: Machine;
  data: Record<string, unknown>;
  measurements: Measurement[];
  /** Per queue backend (absent in entries from before the bench compared backends, which ran on Redis). */
  queues?: QueueComparison[];
  phases: BackfillPhases[];
  workerMemory: { queue?: string; workers: number; idleRssMb: number[]; peakRssMb: number[] }[];
  targets: TargetCheck[];
  /** Every backfill run, as measured. */
  backfills: (BackfillRun & { queue?: string; workers: number })[];
  explain?: StatementSummary[];
  seconds: number;
}

const fmt = (value: number, digits: number) => value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

function table(header: string[], rows: string[][], alignRight: (column: number) => boolean): string {
  const widths = header.map((cell, column) => Math.max(cell.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: string[]) => cells
    .map((cell, column) => (alignRight(column) ? cell.padStart(widths[column] ?? 0) : cell.padEnd(widths[column] ?? 0)))
    .join('  ').trimEnd();
  return [line(header), widths.map((width) => '-'.repeat(width)).join('  '), ...rows.map(line)].join('\n');
}

export function measurementTable(measurements: Measurement[]): string {
  return table(['measurement', 'runs', 'median (min–max)', 'ms/partition', 'ratio', 'against'],
    measurements.map((m) => {
      // Below a second in ms, so a reconciliation of a few ms keeps its digits.
      const [scale, unit, digits] = m.unit === 'MB' ? [1, 'MB', 0] : m.median < 1 ? [1000, 'ms', 1] : [1, 's', 2];
      return [
        m.name, String(m.runs.length),
        `${fmt(m.median * scale, digits)} ${unit} (${fmt(m.min * scale, digits)}–${fmt(m.max * scale, digits)})`,
        m.perPartitionMs === null ? '' : fmt(m.perPartitionMs, 1),
        m.ratio === null ? '' : `${m.lowerBound ? '> ' : ''}${fmt(m.ratio, 2)}×`,
        `${m.against ?? ''}${m.note ? ` (${m.note})` : ''}`,
      ];
    }), (column) => column > 0 && column < 5);
}

/**
 * backend | jobs/s added, processed | whole backfill per worker count: seconds (× raw step). Rates are the
 * medians of the passes' own rates, with their range.
 */
export function queuesTable(queues: QueueComparison[]): string {
  const workerCounts = [...new Set(queues.flatMap((queue) => queue.backfills.map((backfill) => backfill.workers)))].sort((a, b) => a - b);
  const rate = (spread: Spread) => `${fmt(spread.median, 0)} (${fmt(spread.min, 0)}–${fmt(spread.max, 0)})`;
  return table(
    ['queue backend', 'jobs/s added', 'jobs/s processed',
      ...workerCounts.map((workers) => `whole backfill, ${workers} worker process${workers === 1 ? '' : 'es'}: s (× raw)`)],
    queues.map((queue) => [
      queue.queue,
      queue.jobs ? rate(queue.jobs.addPerSecond) : '—',
      queue.jobs ? rate(queue.jobs.processPerSecond) : '—',
      ...workerCounts.map((workers) => {
        const backfill = queue.backfills.find((b) => b.workers === workers);
        return backfill ? `${backfill.lowerBound ? '> ' : ''}${fmt(backfill.seconds.median, 2)} (${backfill.lowerBound ? '> ' : ''}${fmt(backfill.ratio, 2)}×)` : '—';
      }),
    ]), (column) => column > 0);
}

export function phasesTable(phases: BackfillPhases[], rawSeconds: number): string {
  const ms = (value: number) => fmt(value / 1000, 2);
  const ofRaw = (value: number) => `${fmt(value / 1000 / rawSeconds, 2)}×`;
  return table(
    ['queues', 'worker processes', 'approval→1st stage s', 'stage wall s', 'stage busy s (×raw)', 'stage/partition ms', 'publish wall s', 'publish busy s (×raw)', 'publish/partition ms',
      'swap window ms (median/longest)', 'watermark+replays+compare s'],
    phases.map(({ queue, workers, phases: p }) => [
      queue ?? 'redis', String(workers), ms(p.toFirstStageMs), ms(p.stageWallMs), `${ms(p.stageBusyMs)} (${ofRaw(p.stageBusyMs)})`, fmt(p.stageMedianMs, 0),
      ms(p.publishWallMs), `${ms(p.publishBusyMs)} (${ofRaw(p.publishBusyMs)})`, fmt(p.publishMedianMs, 0),
      p.swapMedianMs === null || p.swapMedianMs === undefined ? '—' : `${fmt(p.swapMedianMs, 1)} / ${fmt(p.swapMaxMs ?? 0, 1)}`, ms(p.tailMs),
    ]), (column) => column > 0);
}

export function targetsTable(targets: TargetCheck[]): string {
  return table(['target', 'measured', 'verdict'],
    targets.map((t) => [t.target, t.measured, `${t.met === null ? 'n/a' : t.met ? 'met' : 'MISSED'}${t.note ? `: ${t.note}` : ''}`]), () => false);
}

export function explainReport(statements: StatementSummary[]): string {
  return statements.map((s, index) => [
    `--- ${index + 1}. ${fmt(s.totalMs, 0)} ms in ${s.calls} call(s), slowest ${fmt(s.maxMs, 0)} ms`,
    s.statement.length > 600 ? `${s.statement.slice(0, 600)} …` : s.statement,
    s.slowestPlan,
  ].join('\n')).join('\n\n');
}

/**
 * bench/results.json holds the latest run of each kind (rows per partition × partitions, target, queue backends,
 * embedded server or not, suite or not), so one file keeps the figures docs/benchmark.md's tables are made from; a
 * run replaces only its own kind's entry. Entries keyed without queue backends are from before the bench compared
 * them: their queues were on Redis. Beside the entries, `suites` holds each suite's latest record (bench/suite.ts):
 * when it ran, on what, with what, and which entries it wrote.
 */
export interface ResultsFile {
  note: string;
  runs: Record<string, RunResult>;
  suites?: Partial<Record<string, SuiteRecord>>;
}

const RESULTS_NOTE = 'npm run bench: the latest run of each kind, keyed <rows per partition>x<partitions>[-partitioned]-<queue backends>[-embedded][-suite-<name>]; ' +
  'keys without queue backends are runs from before the bench compared them (queues on Redis); suites: the latest run of each --suite, naming its entries';

/** The results file as it stands; a file that is not readable JSON is started over, and says so. */
export function readResults(path: string): ResultsFile {
  if (!existsSync(path)) return { note: RESULTS_NOTE, runs: {} };
  try {
    const parsed = JSON.parse(readFileSync(path, 'utf8')) as Partial<ResultsFile>;
    return { note: RESULTS_NOTE, runs: parsed.runs ?? {}, ...(parsed.suites ? { suites: parsed.suites } : {}) };
  } catch (error) {
    console.error(`${path} was not readable JSON (${(error as Error).message}); starting it over`);
    return { note: RESULTS_NOTE, runs: {} };
  }
}

function write(path: string, results: ResultsFile): void {
  const ordered = Object.fromEntries(Object.entries(results.runs).sort(([, a], [, b]) => rowsOf(a) - rowsOf(b) || partitionsOf(a) - partitionsOf(b)));
  writeFileSync(path, `${JSON.stringify({ note: RESULTS_NOTE, runs: ordered, ...(results.suites ? { suites: results.suites } : {}) }, null, 2)}\n`);
}

export function writeResults(path: string, key: string, run: RunResult): void {
  const results = readResults(path);
  results.runs[key] = run;
  write(path, results);
}

export function writeSuiteRecord(path: string, record: SuiteRecord): void {
  const results = readResults(path);
  results.suites = { ...results.suites, [record.suite]: record };
  write(path, results);
}

const rowsOf = (run: RunResult) => Number(run.args.rowsPerPartition ?? 0);
const partitionsOf = (run: RunResult) => Number(run.args.partitions ?? 0);
