import type { types } from '@slack/bolt';
import type { CostSum, CostSummary } from '../core/file/costs.js';
import { slackText, terminalText } from '../markup.js';
import { sections } from './layout.js';

// What backfills cost, rendered: a table per pipeline and quarter for the terminal (`backfill costs --since …`)
// and a section of the Home tab. Pure: the summary in, text or blocks out.

type Block = types.KnownBlock;

const COUNT = new Intl.NumberFormat('en-US');

/** A count with thousands separators: 12,408. */
export function formatCount(n: number): string {
  return COUNT.format(n);
}

/** A duration a person reads at a glance: 850 ms, 4.2 s, 3 min 05 s, 2 h 07 min, 3 d 04 h. */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.floor(ms / 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${pad(seconds % 60)} s`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)} h ${pad(Math.floor(seconds / 60) % 60)} min`;
  return `${Math.floor(seconds / 86_400)} d ${pad(Math.floor(seconds / 3600) % 24)} h`;
}

/** "3" when every backfill finished done, else "3 (2 done)": the others were cancelled, stopped, failed or rolled back. */
function backfillsCell(row: CostSum): string {
  return row.done === row.backfills ? String(row.backfills) : `${row.backfills} (${row.done} done)`;
}

const COLUMNS: readonly { title: string; cell: (row: CostSum) => string }[] = [
  { title: 'Backfills', cell: backfillsCell },
  { title: 'Partitions', cell: (r) => formatCount(r.partitions) },
  { title: 'Rows rewritten', cell: (r) => formatCount(r.rowsRewritten) },
  { title: 'Replays', cell: (r) => formatCount(r.replays) },
  { title: 'People told', cell: (r) => formatCount(r.peopleTold) },
  { title: 'Ack wait', cell: (r) => formatDuration(r.ackWaitMs) },
  { title: 'Median ack wait', cell: (r) => formatDuration(r.medianAckWaitMs) },
  { title: 'Compute', cell: (r) => formatDuration(r.computeMs) },
  { title: 'Signed figures moved', cell: (r) => formatCount(r.signedFiguresMoved) },
];

const COSTS_NOTE = 'A backfill counts once it has finished: done, or cancelled, stopped, failed or rolled back, whose attention was spent too. ' +
  'Quarters are those the backfills were announced in (UTC); people told are counted per backfill.';

/** The terminal's answer to `backfill costs --since <date>`: one table, a row per quarter and pipeline. */
export function renderCosts(summary: CostSummary): string {
  const title = `What backfills cost since ${summary.since}`;
  if (summary.rows.length === 0) return `${title}: no backfill announced since then has finished.`;
  const header = ['Quarter', 'Pipeline', ...COLUMNS.map((c) => c.title)];
  const body = summary.rows.map((row) => [row.quarter, row.pipeline, ...COLUMNS.map((c) => c.cell(row))]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((cells) => (cells[i] ?? '').length)));
  // Names left, figures right, as a reader scans a ledger.
  const line = (cells: string[]) => cells.map((cell, i) => (i < 2 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join('  ').trimEnd();
  // Pipeline names are the catalog's: on a terminal without control characters, like all outside text.
  return terminalText([title, '', line(header), ...body.map(line), '', COSTS_NOTE].join('\n'));
}

/** One quarter of one pipeline, in a sentence for the Home tab. */
function costSentence(row: CostSum): string {
  const plural = (n: number, one: string, many: string) => `${formatCount(n)} ${n === 1 ? one : many}`;
  return `*${row.quarter} · ${slackText(row.pipeline)}*: ${plural(row.backfills, 'backfill', 'backfills')}${row.done === row.backfills ? '' : ` (${row.done} done)`} · ` +
    `${plural(row.partitions, 'partition', 'partitions')}, ${plural(row.rowsRewritten, 'row', 'rows')} rewritten · ${plural(row.replays, 'replay', 'replays')} · ` +
    `${plural(row.peopleTold, 'person', 'people')} told, ${formatDuration(row.ackWaitMs)} waiting for acknowledgements (median ${formatDuration(row.medianAckWaitMs)}) · ` +
    `compute ${formatDuration(row.computeMs)} · ${plural(row.signedFiguresMoved, 'signed figure', 'signed figures')} moved`;
}

/** The Home tab's section: what backfills cost per pipeline and quarter, since `summary.since`. */
export function costsBlocks(summary: CostSummary): Block[] {
  const lines = summary.rows.map(costSentence);
  return [
    { type: 'header', text: { type: 'plain_text', text: 'What backfills cost' } },
    // As many sections as the quarters and pipelines need: a line is never cut unseen (src/views/layout.ts).
    ...sections('', lines.length ? lines : [`No backfill announced since ${slackText(summary.since)} has finished yet.`]),
    { type: 'context', elements: [{ type: 'mrkdwn', text: `Since ${summary.since}. ${COSTS_NOTE} In a terminal: \`backfill costs --since YYYY-MM-DD\`.` }] },
  ];
}
