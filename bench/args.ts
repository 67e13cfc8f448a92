// npm run bench -- [--rows-per-partition N] [--partitions P] [--target plain|partitioned] [--workers 1,2,4] [--queues redis,postgres]
//                  [--jobs N] [--jobs-reps R] [--reps R] [--backfill-reps B] [--explain] [--results FILE]
// npm run bench -- --suite full|quick [--queues redis|postgres] [--backfill-timeout S] [--results FILE]

import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { TARGET_SHAPES, type TargetShape } from '../dev/demo/seed.js';
import { MAX_PARTITIONS, MAX_ROWS_PER_PARTITION } from './data.js';
import { SUITE_NAMES, SUITE_WORKERS, SUITES, type SuiteName, type SuiteSize } from './suite.js';

/** The queue backends the bench can put BullMQ on (src/backends.ts): Redis, or BullMQ's PostgreSQL backend. */
export const QUEUE_KINDS = ['redis', 'postgres'] as const;
export type QueueKind = (typeof QUEUE_KINDS)[number];

export interface BenchArgs {
  rowsPerPartition: number;
  partitions: number;
  /** warehouse.orders as one plain table (published by rewrite) or partitioned by hour (published by swap). */
  target: TargetShape;
  /** The worker-process counts to run the whole backfill with, each in its own set of processes. */
  workers: number[];
  /**
   * The queue backends to run the whole backfill and the jobs-per-second measurement on, in this order;
   * undefined: both when REDIS_URL is set, else postgres (bench/run.ts decides, it knows the configuration).
   */
  queues: QueueKind[] | undefined;
  /** No-op jobs per timed pass of the jobs-per-second measurement, and the timed passes per backend (0: not measured). */
  jobs: number;
  jobsReps: number;
  /** Timed passes of the raw step and of replacePartition each (interleaved). */
  writeReps: number;
  /** false: the raw step alone (the suite's table has no replacePartition column, and its passes cost a raw step each). */
  measureReplacePartition: boolean;
  /** Timed backfills with the first worker-process count; later counts run `laterBackfillReps`. */
  backfillReps: number;
  laterBackfillReps: number;
  /** Timed reconciliations and scans each (interleaved). */
  reconcileReps: number;
  /** A backfill not done this long after its approval is stopped and reported as not finished; undefined: 100× the raw step, at least 300 s. */
  backfillTimeoutSeconds: number | undefined;
  /** One extra, untimed backfill under auto_explain, and the slow statements' plans printed. */
  explain: boolean;
  /** Warm-up passes before the timed ones (small sizes only: at large ones the build has warmed the caches). */
  warmUp: boolean;
}

export const USAGE = `npm run bench -- [options]
  --rows-per-partition N  raw orders per benchmarked hour (default 60, about the demo's)
  --partitions P          benchmarked hours from 2026-11-02 00:00 (default 24, at most ${MAX_PARTITIONS})
  --target T              ${TARGET_SHAPES.join(' or ')}: warehouse.orders as one table (published by rewrite, the
                          default) or partitioned by hour (published by swap)
  --workers 1,2,4         worker-process counts to run the whole backfill with (default 1,2,4)
  --queues redis,postgres queue backends to run BullMQ on, side by side (default: both when REDIS_URL is set,
                          else postgres: BullMQ's PostgreSQL backend, in the bench database)
  --jobs N                no-op jobs per pass of the jobs-per-second measurement (default 2000)
  --jobs-reps R           timed passes of it per queue backend (default 5)
  --reps R                timed passes of the raw step and of replacePartition (default by size: 15, 5 or 3)
  --backfill-reps B       timed backfills with the first worker count (default by size: 5, 3 or 3; later counts fewer)
  --backfill-timeout S    stop a backfill not done S seconds after its approval, and report it unfinished
                          (default 100 × the raw step, at least 300 s)
  --explain               after the timed runs, one backfill under auto_explain: prints EXPLAIN (ANALYZE, BUFFERS)
                          of the statements that take the time
  --results FILE          the results file to add the run to (default bench/results.json)

  --suite NAME            every size of the suite on both targets, one after the other, instead of one size:
                          ${SUITE_NAMES.map((name) => `${name} (${SUITES[name].map((size) => `${size.rowsPerPartition}×${size.partitions}`).join(', ')})`).join(', ')};
                          ${SUITE_WORKERS} worker process, one queue backend (--queues: Redis when REDIS_URL is set),
                          repetitions by size as above, no replacePartition or jobs-per-second passes; takes
                          --queues, --backfill-timeout and --results only. quick checks the suite itself: its
                          results go to a temporary file unless --results says otherwise
                          (npm run bench:table makes docs/benchmark.md's table from the full suite's)`;

function positive(name: string, text: string | undefined, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  if (text === undefined) return fallback;
  const value = Number(text.replace(/[_,]/g, ''));
  if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`--${name} must be a whole number from 1 to ${max}, not "${text}"\n\n${USAGE}`);
  return value;
}

/** What one invocation runs: one size, or a suite of them; and the results file it adds to (undefined: bench/results.json). */
export type BenchRequest = { results: string | undefined } & (
  | { kind: 'size'; args: BenchArgs }
  | { kind: 'suite'; suite: SuiteName; queues: QueueKind[] | undefined; backfillTimeoutSeconds: number | undefined });

/** Options of one size's run that the suite sets itself. */
const SIZE_ONLY = ['rows-per-partition', 'partitions', 'target', 'workers', 'jobs', 'jobs-reps', 'reps', 'backfill-reps', 'explain'] as const;

export function parseBenchArgs(argv: string[]): BenchRequest | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      'rows-per-partition': { type: 'string' },
      partitions: { type: 'string' },
      target: { type: 'string' },
      workers: { type: 'string' },
      queues: { type: 'string' },
      jobs: { type: 'string' },
      'jobs-reps': { type: 'string' },
      reps: { type: 'string' },
      'backfill-reps': { type: 'string' },
      'backfill-timeout': { type: 'string' },
      explain: { type: 'boolean' },
      results: { type: 'string' },
      suite: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) return 'help';
  const queues = values.queues === undefined ? undefined : parseQueues(values.queues);
  const backfillTimeoutSeconds = values['backfill-timeout'] === undefined ? undefined : positive('backfill-timeout', values['backfill-timeout'], 0);
  const results = values.results === undefined ? undefined : path.resolve(values.results);
  if (values.suite === undefined) return { kind: 'size', results, args: sizeArgs(values, queues, backfillTimeoutSeconds) };
  const suite = SUITE_NAMES.find((name) => name === values.suite);
  if (!suite) throw new Error(`--suite must be ${SUITE_NAMES.join(' or ')}, not "${values.suite}"\n\n${USAGE}`);
  const given = SIZE_ONLY.filter((option) => values[option] !== undefined);
  if (given.length > 0) throw new Error(`--suite sets ${given.map((option) => `--${option}`).join(', ')} itself: leave ${given.length === 1 ? 'it' : 'them'} out\n\n${USAGE}`);
  if (queues && queues.length > 1) throw new Error(`--suite runs one queue backend: --queues ${queues.join(',')} names ${queues.length}\n\n${USAGE}`);
  // A quick suite checks the bench, it measures nothing worth keeping: bench/results.json keeps the measured history.
  const quickResults = path.join(os.tmpdir(), 'backfill-bench-quick-results.json');
  return { kind: 'suite', suite, queues, backfillTimeoutSeconds, results: results ?? (suite === 'quick' ? quickResults : undefined) };
}

type Size = 'small' | 'medium' | 'large';

/** Fewer repetitions as the data grows, so 50,000 × 24 finishes in minutes; spreads stay visible at small sizes. */
function sizeOf(rowsPerPartition: number, partitions: number): Size {
  const rows = rowsPerPartition * partitions;
  return rows <= 100_000 ? 'small' : rows <= 500_000 ? 'medium' : 'large';
}

// Three backfills at every size from 500,000 rows: one alone was too noisy to judge a target by (at 50,000 × 24
// partitioned, one commit's backfills took 3.50 and 3.92 s in one sitting, a suite's single one 4.78 s), and a
// backfill costs less than building the data it runs on.
const REPS_BY_SIZE = {
  writeReps: { small: 15, medium: 5, large: 3 },
  backfillReps: { small: 5, medium: 3, large: 3 },
  reconcileReps: { small: 15, medium: 7, large: 5 },
} as const;

function sizeArgs(values: Record<string, string | boolean | undefined>, queues: QueueKind[] | undefined, backfillTimeoutSeconds: number | undefined): BenchArgs {
  const text = (name: string) => (typeof values[name] === 'string' ? values[name] : undefined);
  const rowsPerPartition = positive('rows-per-partition', text('rows-per-partition'), 60, MAX_ROWS_PER_PARTITION);
  const partitions = positive('partitions', text('partitions'), 24, MAX_PARTITIONS);
  const targetText = text('target') ?? 'plain';
  const target = TARGET_SHAPES.find((shape) => shape === targetText);
  if (!target) throw new Error(`--target must be ${TARGET_SHAPES.join(' or ')}, not "${targetText}"\n\n${USAGE}`);
  const workers = (text('workers') ?? '1,2,4').split(',').map((part) => positive('workers', part.trim(), 1, 16));
  const size = sizeOf(rowsPerPartition, partitions);
  const backfillReps = positive('backfill-reps', text('backfill-reps'), REPS_BY_SIZE.backfillReps[size]);
  return {
    rowsPerPartition, partitions, target, workers, queues,
    jobs: positive('jobs', text('jobs'), 2000, 1_000_000),
    jobsReps: positive('jobs-reps', text('jobs-reps'), 5, 100),
    writeReps: positive('reps', text('reps'), REPS_BY_SIZE.writeReps[size]),
    measureReplacePartition: true,
    backfillReps,
    laterBackfillReps: size === 'small' ? Math.min(3, backfillReps) : 1,
    reconcileReps: REPS_BY_SIZE.reconcileReps[size],
    backfillTimeoutSeconds,
    explain: values.explain === true,
    warmUp: size === 'small',
  };
}

/** One size of a suite on one target: the defaults by size, one worker-process count, no jobs-per-second passes. */
export function suiteSizeArgs(size: SuiteSize, target: TargetShape, queues: QueueKind[], backfillTimeoutSeconds: number | undefined): BenchArgs {
  const bySize = sizeOf(size.rowsPerPartition, size.partitions);
  return {
    ...size, target, workers: [SUITE_WORKERS], queues,
    jobs: 0, jobsReps: 0,
    writeReps: REPS_BY_SIZE.writeReps[bySize],
    measureReplacePartition: false,
    backfillReps: REPS_BY_SIZE.backfillReps[bySize],
    laterBackfillReps: 0,
    reconcileReps: REPS_BY_SIZE.reconcileReps[bySize],
    backfillTimeoutSeconds,
    explain: false,
    warmUp: bySize === 'small',
  };
}

function parseQueues(text: string): QueueKind[] {
  const queues: QueueKind[] = [];
  for (const part of text.split(',').map((item) => item.trim().toLowerCase()).filter(Boolean)) {
    const kind = QUEUE_KINDS.find((known) => known === part);
    if (!kind) throw new Error(`--queues takes ${QUEUE_KINDS.join(' and/or ')}, comma-separated, not "${part}"\n\n${USAGE}`);
    if (!queues.includes(kind)) queues.push(kind);
  }
  if (queues.length === 0) throw new Error(`--queues needs at least one of ${QUEUE_KINDS.join(', ')}\n\n${USAGE}`);
  return queues;
}
