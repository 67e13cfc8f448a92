// The benchmark's table in docs/benchmark.md and its short version in README.md, made from bench/results.json by
// `npm run bench:table` (scripts/benchTable.ts), so the pages quote what was measured and nothing else. One row per
// size of the full suite (bench/suite.ts) and target shape: the suite's own entry when it has run, else the latest
// run of that size on its own (one worker process's backfill, Redis first), else "not measured". Every ratio is to
// the raw step of the same run. Under the table, each target is marked met or missed from the numbers.
// test/benchTable.test.ts fails when the pages differ from what this makes of the results file.

import type { TargetShape } from '../dev/demo/seed.js';
import type { Machine, ResultsFile, RunResult } from './report.js';
import { median } from './stats.js';
import { SUITE_TARGETS, SUITE_WORKERS, SUITES, sizeLabel, TARGETS, type SuiteName, type SuiteSize } from './suite.js';

export const BENCHMARK_MARKERS = {
  begin: '<!-- bench-table:begin: made by `npm run bench:table` from bench/results.json; measure again, do not edit these lines -->',
  end: '<!-- bench-table:end -->',
} as const;
export const README_MARKERS = {
  begin: '<!-- bench-summary:begin: made by `npm run bench:table` from bench/results.json -->',
  end: '<!-- bench-summary:end -->',
} as const;

/** What one row of the table quotes, from one results entry. */
interface Figures {
  key: string;
  at: string;
  fromSuite: boolean;
  machine: Machine;
  rawSeconds: number;
  backfill: { seconds: number; ratio: number; lowerBound: boolean };
  start: { seconds: number; ratio: number } | null;
  reconcile: { seconds: number; ratio: number } | null;
  /** (whole backfill − raw step) / partitions, in ms. */
  overheadMs: number;
  swap: { medianMs: number; maxMs: number } | null;
  /** Of the whole backfill, the last partition published → done (the watermark, the consumers' replays, the compare), in s. */
  tailSeconds: number | null;
  peakRssMb: number | null;
}

interface Row extends SuiteSize {
  target: TargetShape;
  figures: Figures | null;
}

/** The queue backend of the entry's backfills with one worker process, Redis first; undefined when it has none. */
function queueOf(run: RunResult): string | undefined {
  const queues = new Set(run.backfills.filter((b) => b.workers === SUITE_WORKERS).map((b) => b.queue ?? 'redis'));
  return queues.has('redis') ? 'redis' : [...queues][0];
}

const sameSize = (run: RunResult, size: SuiteSize, target: TargetShape) => Number(run.args.rowsPerPartition) === size.rowsPerPartition &&
  Number(run.args.partitions) === size.partitions && (run.data.target ?? 'plain') === target;

/** The suite's entry of the size; else the latest run of the size alone on a configured server (not another suite's). */
function entryOf(results: ResultsFile, suite: SuiteName, size: SuiteSize, target: TargetShape): { key: string; run: RunResult; fromSuite: boolean } | undefined {
  const named = results.suites?.[suite]?.entries.find((entry) => entry.key && entry.rowsPerPartition === size.rowsPerPartition &&
    entry.partitions === size.partitions && entry.target === target);
  const suiteRun = named?.key ? results.runs[named.key] : undefined;
  if (named?.key && suiteRun && queueOf(suiteRun)) return { key: named.key, run: suiteRun, fromSuite: true };
  const alone = Object.entries(results.runs)
    .filter(([, run]) => run.args.suite === undefined && run.data.server !== 'embedded' && sameSize(run, size, target) && queueOf(run) !== undefined)
    .sort(([, a], [, b]) => b.at.localeCompare(a.at));
  const [key, run] = alone[0] ?? [];
  return key && run ? { key, run, fromSuite: false } : undefined;
}

function figuresOf(key: string, run: RunResult, fromSuite: boolean, size: SuiteSize): Figures {
  const queue = queueOf(run);
  const ofQueue = <T extends { workers: number; queue?: string }>(item: T) => item.workers === SUITE_WORKERS && (item.queue ?? 'redis') === queue;
  const measured = (prefix: string) => run.measurements.find((m) => m.name.startsWith(prefix));
  const raw = measured('raw step')?.median;
  if (raw === undefined) throw new Error(`bench/results.json ${key} has no raw step`);
  const backfills = run.backfills.filter(ofQueue);
  const seconds = median(backfills.map((b) => b.seconds));
  const ratioed = (m: ReturnType<typeof measured>) => (m && m.ratio !== null ? { seconds: m.median, ratio: m.ratio } : null);
  const phases = run.phases.find(ofQueue)?.phases;
  const memory = run.workerMemory.find(ofQueue);
  return {
    key, at: run.at, fromSuite, machine: run.machine, rawSeconds: raw,
    backfill: { seconds, ratio: seconds / raw, lowerBound: backfills.some((b) => !b.finished) },
    start: ratioed(measured('start')),
    reconcile: ratioed(measured('reconciliation')),
    overheadMs: ((seconds - raw) / size.partitions) * 1000,
    swap: phases?.swapMedianMs !== null && phases?.swapMedianMs !== undefined ? { medianMs: phases.swapMedianMs, maxMs: phases.swapMaxMs ?? phases.swapMedianMs } : null,
    tailSeconds: phases ? phases.tailMs / 1000 : null,
    peakRssMb: memory && memory.peakRssMb.length > 0 ? Math.max(...memory.peakRssMb) : null,
  };
}

function rowsOf(results: ResultsFile, suite: SuiteName = 'full'): Row[] {
  return SUITES[suite].flatMap((size) => SUITE_TARGETS.map((target): Row => {
    const entry = entryOf(results, suite, size, target);
    return { ...size, target, figures: entry ? figuresOf(entry.key, entry.run, entry.fromSuite, size) : null };
  }));
}

// ---- numbers as the pages write them ----------------------------------------------------------------------

const fmt = (value: number, digits: number) => value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

function duration(seconds: number): string {
  const ms = seconds * 1000;
  if (ms < 10) return `${fmt(ms, 1)} ms`;
  if (ms < 1000) return `${fmt(ms, 0)} ms`;
  return `${fmt(seconds, seconds < 10 ? 2 : seconds < 100 ? 1 : 0)} s`;
}

const times = (ratio: number) => `${fmt(ratio, 2)}×`;
const day = (iso: string) => iso.slice(0, 10);

/** The whole backfill's cost per row, against the first linear size's on the same target; null below it or without it. */
function perRowAgainstFirst(rows: Row[], row: Row): { backfill: number; raw: number } | null {
  const base = rows.find((r) => r.target === row.target && r.rowsPerPartition >= TARGETS.linearFromRows);
  if (!base?.figures || !row.figures || row.rowsPerPartition < TARGETS.linearFromRows) return null;
  const rowsIn = (r: Row) => r.rowsPerPartition * r.partitions;
  return {
    backfill: (row.figures.backfill.seconds / rowsIn(row)) / (base.figures.backfill.seconds / rowsIn(base)),
    raw: (row.figures.rawSeconds / rowsIn(row)) / (base.figures.rawSeconds / rowsIn(base)),
  };
}

/** The size the cost per row is held against: the suite's first at or above TARGETS.linearFromRows. */
function linearBase(rows: Row[]): Row | undefined {
  return rows.find((row) => row.rowsPerPartition >= TARGETS.linearFromRows);
}

/** The machine as the pages name it: what the figures depend on (the kernel's build is left out). */
function machineText(m: Machine): string {
  const settings = Object.entries(m.settings).map(([name, value]) => `${name} ${value}`).join(', ');
  const redis = m.redis === 'not used' ? 'no Redis (queues in PostgreSQL)' : `Redis ${m.redis}`;
  return `${m.nproc} cores (nproc), ${m.cpuModel}, ${m.memoryGb} GB; Node ${m.node.replace(/^v/, '')}; PostgreSQL ${m.postgres} with ${settings}; ` +
    `${redis}; WORKER_CONCURRENCY ${m.workerConcurrency}, WAVE_SIZE ${m.waveSize}${m.swapMinRows === undefined ? '' : `, SWAP_MIN_ROWS ${m.swapMinRows}`}`;
}

/** The distinct machines of the measured rows, in the order rows name them. */
function machinesOf(rows: Row[]): string[] {
  return [...new Set(rows.flatMap((row) => (row.figures ? [machineText(row.figures.machine)] : [])))];
}

const DASH = '—';

function cells(row: Row, rows: Row[], machines: string[]): string[] {
  const f = row.figures;
  const head = [row.target, sizeLabel(row)];
  if (!f) return [...head, ...Array<string>(9).fill(DASH), 'not measured'];
  const bound = f.backfill.lowerBound ? '> ' : '';
  const perRow = perRowAgainstFirst(rows, row);
  const machine = machines.length > 1 ? `, machine ${String.fromCharCode(65 + machines.indexOf(machineText(f.machine)))}` : '';
  return [
    ...head,
    duration(f.rawSeconds),
    `${bound}${duration(f.backfill.seconds)} (${bound}${times(f.backfill.ratio)})`,
    f.tailSeconds === null || f.backfill.lowerBound ? DASH : `${duration(f.tailSeconds)} (${fmt((100 * f.tailSeconds) / f.backfill.seconds, 0)}%)`,
    `${bound}${fmt(f.overheadMs, f.overheadMs < 10 ? 1 : 0)} ms`,
    f.start ? `${duration(f.start.seconds)} (${times(f.start.ratio)})` : DASH,
    f.reconcile ? `${duration(f.reconcile.seconds)} (${times(f.reconcile.ratio)})` : DASH,
    f.swap ? `${fmt(f.swap.medianMs, 1)} / ${fmt(f.swap.maxMs, 1)} ms` : DASH,
    f.peakRssMb === null ? DASH : `${fmt(f.peakRssMb, 0)} MB`,
    perRow ? `${times(perRow.backfill)} (raw step ${times(perRow.raw)})` : DASH,
    `${day(f.at)}, \`${f.key}\`${machine}`,
  ];
}

function markdownTable(header: string[], body: string[][]): string[] {
  const line = (row: string[]) => `| ${row.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...body.map(line)];
}

function fullTable(rows: Row[], machines: string[]): string[] {
  const base = linearBase(rows);
  return markdownTable(
    ['target', 'rows × partitions', 'raw step', 'whole backfill, 1 worker process (× raw)', 'of which the watermark, the consumers\' replays and the compare', 'overhead per partition', 'start (× raw)',
      'reconciliation (× one scan of both sides)', 'swap window, median / longest', 'worker peak RSS',
      `whole backfill per row, × ${base ? sizeLabel(base) : 'the first linear size'}'s`, 'measured, entry'],
    rows.map((row) => cells(row, rows, machines)));
}

// ---- the targets, each marked from the numbers -------------------------------------------------------------

/** One size of one target checked: its figure as written, and whether it meets the target (null: not measured). */
interface Case {
  row: Row;
  shown: string;
  met: boolean | null;
}

interface Target {
  text: string;
  cases: Case[];
}

function verdict(cases: Case[]): string {
  if (cases.some((c) => c.met === false)) return 'missed';
  if (cases.length > 0 && cases.every((c) => c.met === true)) return 'met';
  return cases.some((c) => c.met === true) ? 'met so far' : 'not measured';
}

function targetLine(target: Target): string {
  const named = (c: Case) => `${sizeLabel(c.row)}${SUITE_TARGETS.length > 1 && target.cases.some((o) => o !== c && sizeLabel(o.row) === sizeLabel(c.row)) ? ` ${c.row.target}` : ''}`;
  // Each figure marked only when some meet the target and some miss it: otherwise the verdict says it of all.
  const mixed = target.cases.some((c) => c.met === true) && target.cases.some((c) => c.met === false);
  const measured = target.cases.filter((c) => c.met !== null).map((c) => `${named(c)}: ${c.shown}${mixed ? (c.met ? ' met' : ' missed') : ''}`);
  const open = target.cases.filter((c) => c.met === null).map(named);
  const parts = [...measured, ...(open.length > 0 ? [`not measured: ${open.join(', ')}`] : [])];
  return `- ${target.text}: **${verdict(target.cases)}**${parts.length > 0 ? ` (${parts.join('; ')})` : ''}`;
}

/** A case per row the predicate picks: `value` null when the row has no such figure. */
function casesOf(rows: Row[], pick: (row: Row) => boolean, value: (f: Figures, row: Row) => { shown: string; met: boolean } | null): Case[] {
  return rows.filter(pick).map((row) => {
    const checked = row.figures ? value(row.figures, row) : null;
    return checked ? { row, ...checked } : { row, shown: '', met: null };
  });
}

function targets(rows: Row[]): Target[] {
  const atScale = (row: Row) => row.rowsPerPartition >= TARGETS.atScaleRows;
  const ratio = (limit: number, of: (f: Figures) => { ratio: number; lowerBound?: boolean } | null) => (f: Figures) => {
    const figure = of(f);
    return figure ? { shown: `${figure.lowerBound ? '> ' : ''}${times(figure.ratio)}`, met: !figure.lowerBound && figure.ratio <= limit } : null;
  };
  const scale = `at ${TARGETS.atScaleRows.toLocaleString('en-US')} rows a partition and above`;
  const base = linearBase(rows);
  return [
    { text: `whole backfill ≤ ${fmt(TARGETS.backfillSwap, 1)}× the raw step on a partitioned target (published by swap), ${scale}`,
      cases: casesOf(rows, (r) => atScale(r) && r.target === 'partitioned', ratio(TARGETS.backfillSwap, (f) => f.backfill)) },
    { text: `whole backfill ≤ ${fmt(TARGETS.backfillRewrite, 1)}× the raw step on a plain one (published by rewrite), ${scale}`,
      cases: casesOf(rows, (r) => atScale(r) && r.target === 'plain', ratio(TARGETS.backfillRewrite, (f) => f.backfill)) },
    { text: `\`start\` (the preview) ≤ ${fmt(TARGETS.start, 1)}× the raw step, ${scale}`, cases: casesOf(rows, atScale, ratio(TARGETS.start, (f) => f.start)) },
    { text: `reconciliation of a partition ≤ ${fmt(TARGETS.reconcile, 1)}× one scan of both sides, ${scale}`, cases: casesOf(rows, atScale, ratio(TARGETS.reconcile, (f) => f.reconcile)) },
    { text: `overhead ≤ ${TARGETS.overheadMsPerPartition} ms per partition at ${TARGETS.overheadRows} rows a partition (whole backfill less the raw step, over the partitions)`,
      cases: casesOf(rows, (r) => r.rowsPerPartition === TARGETS.overheadRows, (f) => ({ shown: `${fmt(f.overheadMs, 1)} ms`, met: !f.backfill.lowerBound && f.overheadMs <= TARGETS.overheadMsPerPartition })) },
    { text: `worker peak RSS ≤ ${TARGETS.workerRssMb} MB at ${TARGETS.memoryRows.toLocaleString('en-US')} rows a partition`,
      cases: casesOf(rows, (r) => r.rowsPerPartition === TARGETS.memoryRows, (f) => (f.peakRssMb === null ? null : { shown: `${fmt(f.peakRssMb, 0)} MB`, met: f.peakRssMb <= TARGETS.workerRssMb })) },
    { text: `swap window (readers of the target wait) < ${TARGETS.swapPublishMs} ms per publish, longest of each size`,
      cases: casesOf(rows, (r) => r.target === 'partitioned', (f) => (f.swap ? { shown: `${fmt(f.swap.maxMs, 1)} ms`, met: f.swap.maxMs < TARGETS.swapPublishMs } : null)) },
    { text: `cost linear in rows from ${base ? sizeLabel(base) : TARGETS.linearFromRows.toLocaleString('en-US')} up: the whole backfill per row ≤ ${fmt(TARGETS.linearPerRow, 2)}× ` +
      `that size's, on the same target${base?.figures ? '' : ` (which needs ${base ? sizeLabel(base) : 'it'} measured)`}`,
    cases: casesOf(rows, (r) => base !== undefined && r.rowsPerPartition > base.rowsPerPartition, (_, row) => {
      const perRow = perRowAgainstFirst(rows, row);
      return perRow ? { shown: times(perRow.backfill), met: perRow.backfill <= TARGETS.linearPerRow } : null;
    }) },
  ];
}

// ---- the pages' blocks --------------------------------------------------------------------------------------

function days(rows: Row[]): string {
  const all = [...new Set(rows.flatMap((row) => (row.figures ? [day(row.figures.at)] : [])))].sort();
  return all.length <= 1 ? (all[0] ?? 'no day yet') : `${all.slice(0, -1).join(', ')} and ${all.at(-1)}`;
}

function sourceLine(results: ResultsFile, suite: SuiteName, rows: Row[]): string {
  const record = results.suites?.[suite];
  const command = `\`npm run bench -- --suite ${suite}\``;
  const alone = 'the latest run of that size alone (`npm run bench -- --rows-per-partition N --partitions P [--target partitioned]`), ' +
    'its backfills with 1 worker process (on Redis; entries keyed without a backend ran there)';
  const older = rows.some((row) => row.figures && !row.figures.fromSuite);
  const measured = `measured on ${days(rows)}`;
  if (!record) return `The ${suite} suite (${command}) has not run yet: each row is ${alone}, ${measured}; a size no run has measured says so.`;
  const how = record.finishedAt ? `${fmt(record.seconds / 60, 0)} min` : 'cut short';
  return `The ${suite} suite's run of ${day(record.at)} (${command}: ${how}, queues on ${record.args.queues.join(', ')})` +
    `${older ? `; a row whose entry is not the suite's is ${alone}` : ''}; ${measured}.`;
}

function machineLines(machines: string[]): string[] {
  if (machines.length === 1) return [`Machine: ${machines[0]}.`];
  return machines.map((machine, index) => `Machine ${String.fromCharCode(65 + index)}: ${machine}.`);
}

/** The lines docs/benchmark.md holds between its markers. */
export function benchmarkBlock(results: ResultsFile, suite: SuiteName = 'full'): string {
  const rows = rowsOf(results, suite);
  const machines = machinesOf(rows);
  return [
    BENCHMARK_MARKERS.begin,
    '',
    sourceLine(results, suite, rows),
    '',
    ...machineLines(machines),
    '',
    ...fullTable(rows, machines),
    '',
    'Against the targets, each marked from the figures above (*met so far*: met at every size measured, some not measured yet):',
    '',
    ...targets(rows).map(targetLine),
    '',
    BENCHMARK_MARKERS.end,
  ].join('\n');
}

/** The lines README.md holds between its markers: the sizes measured, their ratios, and the targets counted. */
export function readmeBlock(results: ResultsFile, suite: SuiteName = 'full'): string {
  const rows = rowsOf(results, suite);
  const measured = rows.filter((row) => row.figures);
  const open = rows.filter((row) => !row.figures).map((row) => `${sizeLabel(row)} ${row.target}`);
  const verdicts = targets(rows).map((target) => verdict(target.cases));
  const count = (word: string) => verdicts.filter((v) => v === word).length;
  const machine = measured[0]?.figures?.machine;
  return [
    README_MARKERS.begin,
    '',
    `The whole backfill (approval → done, 1 worker process), \`start\` and reconciliation against the same work done by hand in the same run, ` +
      `measured on ${days(rows)}${machine ? ` on ${machine.nproc} cores (${machine.cpuModel}), PostgreSQL ${machine.postgres.split(' ')[0] ?? ''}` : ''}. ` +
      'Made by `npm run bench:table` from `bench/results.json`; the machine, every figure and the targets are in [docs/benchmark.md](docs/benchmark.md).',
    '',
    ...markdownTable(['target', 'rows × partitions', 'whole backfill (× raw step)', 'start (× raw step)', 'reconciliation (× one scan)', 'worker peak RSS'],
      measured.map((row) => {
        const f = row.figures as Figures;
        return [row.target, sizeLabel(row), `${f.backfill.lowerBound ? '> ' : ''}${times(f.backfill.ratio)}`, f.start ? times(f.start.ratio) : DASH,
          f.reconcile ? times(f.reconcile.ratio) : DASH, f.peakRssMb === null ? DASH : `${fmt(f.peakRssMb, 0)} MB`];
      })),
    '',
    `${open.length > 0 ? `Not measured yet: ${open.join(', ')}. ` : ''}Targets: ${count('met')} met, ${count('missed')} missed, ` +
      `${count('met so far')} met so far, ${count('not measured')} not measured.`,
    '',
    README_MARKERS.end,
  ].join('\n');
}

/** The page with the lines between its markers made again; refused when the markers are not there once each, in order. */
export function withBlock(page: string, markers: { begin: string; end: string }, block: string, name: string): string {
  const begin = page.indexOf(markers.begin);
  const end = page.indexOf(markers.end);
  if (begin < 0 || end < begin || page.indexOf(markers.begin, begin + 1) >= 0 || page.indexOf(markers.end, end + 1) >= 0) {
    throw new Error(`${name} must hold the markers ${markers.begin} and ${markers.end}, once each and in that order`);
  }
  return `${page.slice(0, begin)}${block}${page.slice(end + markers.end.length)}`;
}
