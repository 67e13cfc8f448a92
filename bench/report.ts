// What the benchmark prints and what it writes to bench/results.json.

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import type { StatementSummary } from './autoExplain.js';
import type { BackfillRun, Phases } from './backfill.js';
import type { Spread } from './stats.js';

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
}

export function describeMachine(versions: { postgres: string; redis: string; settings: Record<string, string> }, config: { WORKER_CONCURRENCY: number; WAVE_SIZE: number }): Machine {
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
  workers: number;
  /** Medians over the repetitions, in ms. */
  phases: Phases;
}

export interface RunResult {
  at: string;
  args: Record<string, unknown>;
  machine: Machine;
  data: Record<string, unknown>;
  measurements: Measurement[];
  phases: BackfillPhases[];
  workerMemory: { workers: number; idleRssMb: number[]; peakRssMb: number[] }[];
  targets: TargetCheck[];
  /** Every backfill run, as measured. */
  backfills: (BackfillRun & { workers: number })[];
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

export function phasesTable(phases: BackfillPhases[], rawSeconds: number): string {
  const ms = (value: number) => fmt(value / 1000, 2);
  const ofRaw = (value: number) => `${fmt(value / 1000 / rawSeconds, 2)}×`;
  return table(
    ['worker processes', 'approval→1st stage s', 'stage wall s', 'stage busy s (×raw)', 'stage/partition ms', 'publish wall s', 'publish busy s (×raw)', 'publish/partition ms',
      'swap window ms (median/longest)', 'watermark+replays+compare s'],
    phases.map(({ workers, phases: p }) => [
      String(workers), ms(p.toFirstStageMs), ms(p.stageWallMs), `${ms(p.stageBusyMs)} (${ofRaw(p.stageBusyMs)})`, fmt(p.stageMedianMs, 0),
      ms(p.publishWallMs), `${ms(p.publishBusyMs)} (${ofRaw(p.publishBusyMs)})`, fmt(p.publishMedianMs, 0),
      p.swapMedianMs === null || p.swapMedianMs === undefined ? '—' : `${fmt(p.swapMedianMs, 1)} / ${fmt(p.swapMaxMs ?? 0, 1)}`, ms(p.tailMs),
    ]), () => true);
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
 * bench/results.json holds the latest run of each size (rows per partition × partitions), so one file keeps
 * the figures the README's table quotes; a run replaces only its own size's entry.
 */
export function writeResults(path: string, key: string, run: RunResult): void {
  let runs: Record<string, RunResult> = {};
  if (existsSync(path)) {
    try {
      const parsed = JSON.parse(readFileSync(path, 'utf8')) as { runs?: Record<string, RunResult> };
      runs = parsed.runs ?? {};
    } catch (error) {
      console.error(`${path} was not readable JSON (${(error as Error).message}); starting it over`);
    }
  }
  runs[key] = run;
  const ordered = Object.fromEntries(Object.entries(runs).sort(([, a], [, b]) => rowsOf(a) - rowsOf(b) || partitionsOf(a) - partitionsOf(b)));
  writeFileSync(path, `${JSON.stringify({ note: 'npm run bench: the latest run of each size, keyed <rows per partition>x<partitions>[-partitioned]', runs: ordered }, null, 2)}\n`);
}

const rowsOf = (run: RunResult) => Number(run.args.rowsPerPartition ?? 0);
const partitionsOf = (run: RunResult) => Number(run.args.partitions ?? 0);
