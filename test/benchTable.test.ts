// The benchmark's tables in docs/benchmark.md and README.md are the ones bench/results.json makes (npm run
// bench:table), and the marks under them follow from the numbers: a figure changed by hand, or a run added without
// making the tables again, fails here.

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readResults, type ResultsFile, type RunResult } from '../bench/report.js';
import { benchmarkBlock, BENCHMARK_MARKERS, README_MARKERS, readmeBlock, withBlock } from '../bench/resultsTable.js';
import type { SuiteEntry } from '../bench/suite.js';
import type { TargetShape } from '../dev/demo/seed.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

describe('the benchmark tables', () => {
  const results = readResults(path.join(ROOT, 'bench/results.json'));
  const pages = [
    { file: 'docs/benchmark.md', markers: BENCHMARK_MARKERS, block: benchmarkBlock(results) },
    { file: 'README.md', markers: README_MARKERS, block: readmeBlock(results) },
  ];

  it.each(pages)('$file holds the table bench/results.json makes', ({ file, markers, block }) => {
    const page = read(file);
    const between = (text: string) => text.slice(text.indexOf(markers.begin), text.indexOf(markers.end) + markers.end.length);
    // Compared as the blocks alone, so a failure shows the lines that differ.
    expect(between(page), `${file} differs from bench/results.json: run \`npm run bench:table\``).toBe(between(withBlock(page, markers, block, file)));
  });
});

const MACHINE = {
  nproc: 2, cpuModel: 'AMD EPYC', memoryGb: 24, platform: 'linux', node: 'v20.20.2', postgres: '15.20', redis: '7.0.15',
  settings: { shared_buffers: '128MB' }, workerConcurrency: 4, waveSize: 4,
};

/** One size's entry as the bench writes it, with the figures the table reads: seconds, MB. */
function entry(rows: number, partitions: number, target: TargetShape, f: { raw: number; backfill: number; start: number; reconcile: number; scan: number; rssMb: number; tail?: number }, at = '2026-12-05T10:00:00.000Z'): RunResult {
  const measurement = (name: string, median: number, against: number | null) => ({
    name, unit: 's' as const, median, min: median, max: median, runs: [median], perPartitionMs: null, ratio: against === null ? null : median / against, against: null,
  });
  const run = { id: 1, finished: true, published: partitions, startSeconds: f.start, previewedBy: 'step', seconds: f.backfill, settledSeconds: f.backfill, rowsAfter: 0, diff: null };
  const swap = target === 'partitioned' ? { swapMedianMs: 11, swapMaxMs: 18 } : { swapMedianMs: null, swapMaxMs: null };
  return {
    at, args: { rowsPerPartition: rows, partitions, target, suite: 'full' }, machine: MACHINE, data: { target, server: 'configured' },
    measurements: [
      measurement('raw step: BEGIN; DELETE; step INSERT…SELECT; COMMIT', f.raw, null),
      measurement('start (preview by step, targets, envelope)', f.start, f.raw),
      measurement('reconciliation of one partition', f.reconcile, f.scan),
    ],
    phases: [{ queue: 'redis', workers: 1, phases: { toFirstStageMs: 0, stageWallMs: 0, stageBusyMs: 0, stageMedianMs: 0, publishWallMs: 0, publishBusyMs: 0, publishMedianMs: 0, tailMs: (f.tail ?? 0) * 1000, ...swap } }],
    workerMemory: [{ queue: 'redis', workers: 1, idleRssMb: [120], peakRssMb: [f.rssMb] }],
    targets: [], backfills: [{ queue: 'redis', workers: 1, ...run, phases: null }], seconds: 1,
  };
}

/** A full suite's results: the sizes given, each keyed as the suite keys them; every other size unmeasured. */
function suiteResults(runs: [number, number, TargetShape, Parameters<typeof entry>[3]][]): ResultsFile {
  const entries: SuiteEntry[] = runs.map(([rows, partitions, target]) => ({ rowsPerPartition: rows, partitions, target, key: `${rows}x${partitions}-${target}-suite-full` }));
  return {
    note: '',
    runs: Object.fromEntries(runs.map(([rows, partitions, target, f]) => [`${rows}x${partitions}-${target}-suite-full`, entry(rows, partitions, target, f)])),
    suites: {
      full: {
        suite: 'full', at: '2026-12-05T10:00:00.000Z', finishedAt: '2026-12-05T10:25:00.000Z', machine: MACHINE, entries, seconds: 1500,
        args: { sizes: [], targets: ['plain', 'partitioned'], workers: 1, queues: ['redis'], backfillTimeoutSeconds: null },
      },
    },
  };
}

const targetLine = (block: string, starts: string) => block.split('\n').find((line) => line.startsWith(`- ${starts}`)) ?? `no target line starting "${starts}"`;

describe('the marks against the targets', () => {
  const block = benchmarkBlock(suiteResults([
    // 60 rows: 90 ms of overhead over 24 partitions is 3.75 ms a partition.
    [60, 24, 'plain', { raw: 0.01, backfill: 0.1, start: 0.01, reconcile: 0.001, scan: 0.001, rssMb: 140 }],
    [20_000, 24, 'partitioned', { raw: 2, backfill: 2, start: 2, reconcile: 0.01, scan: 0.01, rssMb: 130 }],
    [20_000, 24, 'plain', { raw: 2, backfill: 3, start: 2, reconcile: 0.01, scan: 0.01, rssMb: 130 }],
    // 2.5 times the rows in 2.75 times the time (1.1× per row): linear; 1.5× the raw step: met on a plain target.
    [50_000, 24, 'plain', { raw: 5.5, backfill: 8.25, start: 5, reconcile: 0.02, scan: 0.02, rssMb: 130 }],
    // 0.95× the raw step on a partitioned target, start 1.1×, reconciliation 1.6× one scan; 1.9 s of it after the publishes.
    [50_000, 24, 'partitioned', { raw: 5, backfill: 4.75, start: 5.5, reconcile: 0.032, scan: 0.02, rssMb: 130, tail: 1.9 }],
    // 12.5 times the rows of 20,000 × 24 in 21 times the time: 1.68× per row, not linear; 300 MB at 1,000,000 rows.
    [1_000_000, 6, 'partitioned', { raw: 30, backfill: 42, start: 25, reconcile: 0.1, scan: 0.1, rssMb: 300 }],
  ]));

  it('marks a target met when every size meets it, and met so far while some are not measured', () => {
    expect(targetLine(block, 'whole backfill ≤ 1.5× the raw step on a plain one')).toContain('**met so far** (50,000 × 24: 1.50×; not measured: 200,000 × 6, 1,000,000 × 6)');
    expect(targetLine(block, 'overhead ≤ 5 ms per partition at 60 rows')).toContain('**met so far** (60 × 24 plain: 3.8 ms; not measured: 60 × 24 partitioned, 60 × 240 plain, 60 × 240 partitioned)');
  });

  it('marks a target missed when one size misses it, naming which', () => {
    expect(targetLine(block, 'whole backfill ≤ 1.0× the raw step on a partitioned target')).toContain('**missed** (50,000 × 24: 0.95× met; 1,000,000 × 6: 1.40× missed;');
    expect(targetLine(block, '`start` (the preview) ≤ 1.0×')).toContain('**missed** (50,000 × 24 plain: 0.91× met; 50,000 × 24 partitioned: 1.10× missed;');
    expect(targetLine(block, 'reconciliation of a partition ≤ 1.5×')).toContain('50,000 × 24 partitioned: 1.60× missed');
    expect(targetLine(block, 'worker peak RSS ≤ 256 MB at 1,000,000 rows')).toContain('**missed** (1,000,000 × 6 partitioned: 300 MB;');
  });

  it('measures linearity as the whole backfill per row against 20,000 × 24 of the same target', () => {
    const line = targetLine(block, 'cost linear in rows from 20,000 × 24 up');
    expect(line).toContain('**missed**');
    expect(line).toContain('50,000 × 24 plain: 1.10× met');
    expect(line).toContain('1,000,000 × 6 partitioned: 1.68× missed');
  });

  it('says how much of the whole backfill came after the publishes (the watermark, the replays, the compare)', () => {
    const row = block.split('\n').find((line) => line.startsWith('| partitioned | 50,000 × 24 |'));
    expect(row).toContain('| 4.75 s (0.95×) | 1.90 s (40%) |');
  });

  it('says "not measured" for a size no run measured, and invents no figure for it', () => {
    const row = block.split('\n').find((line) => line.startsWith('| plain | 1,000,000 × 6 |'));
    expect(row).toBe('| plain | 1,000,000 × 6 | — | — | — | — | — | — | — | — | — | not measured |');
    expect(readmeBlock(suiteResults([]))).toContain('Targets: 0 met, 0 missed, 0 met so far, 8 not measured.');
  });
});
