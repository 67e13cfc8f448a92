// The sizes `npm run bench -- --suite <name>` runs in one invocation, each on both target shapes, and what the
// figures are held to. The table in docs/benchmark.md (bench/resultsTable.ts) is made from the same list, so a
// size the suite runs is a row of the table whether it has been measured yet or not.

import type { TargetShape } from '../dev/demo/seed.js';

export interface SuiteSize {
  rowsPerPartition: number;
  partitions: number;
}

/**
 * full: the sizes the docs' table quotes. 60 rows a partition run over 240 partitions as well: what a partition
 * costs besides its rows must not grow with the partitions (a dispatch and a claim read the backfill's steps; at
 * 240 they once took 7 times what they took at 24, docs/benchmark.md). 200,000 rows a partition run over 6
 * partitions, not 24: at 24 that one
 * size would hold 4.8 million rows a target, nearly as many as 1,000,000 × 6, and take a suite of about 22 minutes
 * on the 2-core bench machine to about 30 (docs/benchmark.md, *One run for every size*, says how that was estimated).
 * quick: the same run at small sizes, to check the suite end to end in a few minutes.
 */
export const SUITES = {
  full: [
    { rowsPerPartition: 60, partitions: 24 },
    { rowsPerPartition: 60, partitions: 240 },
    { rowsPerPartition: 20_000, partitions: 24 },
    { rowsPerPartition: 50_000, partitions: 24 },
    { rowsPerPartition: 200_000, partitions: 6 },
    { rowsPerPartition: 1_000_000, partitions: 6 },
  ],
  quick: [
    { rowsPerPartition: 60, partitions: 24 },
    { rowsPerPartition: 2_000, partitions: 24 },
  ],
} as const satisfies Record<string, readonly SuiteSize[]>;

export type SuiteName = keyof typeof SUITES;
export const SUITE_NAMES = Object.keys(SUITES) as SuiteName[];

/** Every size on a plain target (published by rewrite) and on one partitioned by hour (published by swap). */
export const SUITE_TARGETS: readonly TargetShape[] = ['plain', 'partitioned'];

/** The suite runs each backfill with one worker process: the figures are the engine's, not the spread over processes. */
export const SUITE_WORKERS = 1;

/**
 * What the figures are held to. The ratios of the whole backfill, of `start` and of reconciliation are held from
 * `atScaleRows` rows a partition up, where the rows, not the per-step overhead, take the time; the overhead is held
 * at the demo's size, `overheadRows`; memory at `memoryRows`; linearity from `linearFromRows` up: each larger size's
 * cost per row against the cost per row of the suite's first size at or above it, on the same target.
 */
export const TARGETS = {
  atScaleRows: 50_000,
  backfillSwap: 1.0,
  backfillRewrite: 1.5,
  start: 1.0,
  reconcile: 1.5,
  overheadRows: 60,
  overheadMsPerPartition: 5,
  memoryRows: 1_000_000,
  workerRssMb: 256,
  swapPublishMs: 50,
  linearFromRows: 20_000,
  /** A size's whole backfill per row at most this many times the smallest linear size's: no worse than linear, with room for noise. */
  linearPerRow: 1.25,
} as const;

/** One size on one target as the suite ran it: the results entry it wrote, or why it has none. */
export interface SuiteEntry extends SuiteSize {
  target: TargetShape;
  key: string | null;
  error?: string;
}

/** The suite's own record in the results file, beside the entries it wrote (written again after every size). */
export interface SuiteRecord {
  suite: SuiteName;
  at: string;
  /** null while it runs (or when it was cut short). */
  finishedAt: string | null;
  /** The machine of its first entry: every entry of a suite ran on the same one. */
  machine: unknown;
  args: { sizes: SuiteSize[]; targets: readonly TargetShape[]; workers: number; queues: string[]; backfillTimeoutSeconds: number | null };
  entries: SuiteEntry[];
  seconds: number;
}

/** How a size is written in prose and tables: 50,000 × 24. */
export function sizeLabel(size: SuiteSize): string {
  return `${size.rowsPerPartition.toLocaleString('en-US')} × ${size.partitions}`;
}
