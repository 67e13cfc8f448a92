import { fileURLToPath } from 'node:url';
import { renderAsync } from '@resvg/resvg-js';
import { subtractMoney } from '../core/money.js';
import type { BackfillReport } from '../core/file/status.js';
import { formatHour, formatHourRange, formatMoney, formatSignedMoney, moneyOrNone, NONE } from './format.js';

// The picture of the diff: per partition the total before and after, and every signed figure against the
// corrected one. Three steps, each a plain function: the report's facts become chart data (diffChartData),
// the data becomes geometry (diffChartLayout: every bar and label with its coordinates, which the tests read
// to know where to look in the picture), the geometry becomes an SVG string (diffChartSvg). renderChartPng turns
// the SVG into a PNG with resvg, from the font shipped in assets/fonts (never the system's, which a bare server
// may not have and which would make the picture differ from machine to machine).

/** One partition's pair of bars. Amounts are the report's decimal strings; geometry reads them as numbers. */
export interface PartitionFigures {
  /** "05:00": the x-axis label. */
  hour: string;
  /** "11-15" on the first partition of each day when the range spans more than one; otherwise undefined. */
  day: string | undefined;
  before: string;
  /** null while not recomputed, or when its source was missing (unavailable). */
  after: string | null;
  unavailable: boolean;
}

/** A signed figure the backfill touched: what finance signed, what the rebuilt report says now. */
interface SignedFigure {
  label: string;
  signed: string;
  corrected: string | null;
}

export interface DiffChartData {
  title: string;
  subtitle: string;
  partitions: PartitionFigures[];
  signed: SignedFigure[];
}

export type BarRole = 'before' | 'after' | 'signed' | 'corrected';

export interface ChartBar {
  role: BarRole;
  /** The partition's or the signed figure's position in the data. */
  index: number;
  x: number;
  y: number;
  width: number;
  height: number;
}

interface ChartText {
  x: number;
  y: number;
  text: string;
  size: number;
  fill: string;
  anchor: 'start' | 'middle' | 'end';
}

interface ChartLine {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
  stroke: string;
}

/** Everything the SVG draws, in SVG units (the PNG is CHART_SCALE times larger). */
export interface DiffChartLayout {
  width: number;
  height: number;
  bars: ChartBar[];
  texts: ChartText[];
  lines: ChartLine[];
}

/** The colour of each kind of bar; tests look for these in the PNG. */
export const BAR_COLOURS: Readonly<Record<BarRole, string>> = {
  before: '#9aa5b1',
  after: '#2f6fde',
  signed: '#5b6470',
  corrected: '#e8891c',
};

const INK = '#1f2328';
const MUTED = '#57606a';
const GRID = '#d0d7de';
const UP = '#1a7f37';
const DOWN = '#c62828';
const FONT_FAMILY = 'DejaVu Sans';

/**
 * 1000 units wide, drawn 1.5 times larger: 1500 px, which Slack shrinks to its preview width (a few hundred
 * pixels) and still shows labels of 18 units at a legible size, and shows whole when someone opens it.
 */
export const CHART_WIDTH = 1000;
export const CHART_SCALE = 1.5;
const MARGIN_LEFT = 110;
const MARGIN_RIGHT = 30;
const PLOT_TOP = 150;
const PLOT_HEIGHT = 300;
const SIGNED_ROW = 78;
/** DejaVu Sans averages a little under 0.6 em per character: enough to decide which labels fit. */
const CHAR_EM = 0.6;

// The project's assets/, from src/views/ when run from source and from dist/src/views/ once built (npm run build).
const FONT_FILE = fileURLToPath(new URL(`${import.meta.url.endsWith('.js') ? '../../../' : '../../'}assets/fonts/DejaVuSans.ttf`, import.meta.url));

/** The chart's facts, read from the backfill report: its targets and its signed figures. */
export function diffChartData(report: BackfillReport): DiffChartData {
  const { backfill } = report;
  const days = new Set(report.targets.map((t) => formatHour(t.partitionHour).slice(0, 10)));
  let previousDay = '';
  const partitions = report.targets.map((t): PartitionFigures => {
    const [day = '', hour = ''] = formatHour(t.partitionHour).split(' ');
    const firstOfDay = day !== previousDay;
    previousDay = day;
    return {
      hour,
      day: days.size > 1 && firstOfDay ? day.slice(5) : undefined,
      before: t.totalBefore,
      after: t.status === 'unavailable' ? null : t.totalAfter,
      unavailable: t.status === 'unavailable',
    };
  });
  const rolledBack = backfill.state === 'rolled_back' || backfill.state === 'rolling_back';
  return {
    title: `Backfill #${backfill.id} ${rolledBack ? 'rolled back' : 'diff'}: ${backfill.pipeline}, ${formatHourRange(backfill.firstHour, backfill.lastHour)}`,
    subtitle: `Total ${moneyOrNone(backfill.totalBefore)} → ${moneyOrNone(backfill.totalAfter)} (${backfill.diff === null ? NONE : formatSignedMoney(backfill.diff)})`,
    partitions,
    signed: report.signed.map((f) => ({ label: `${f.report} ${f.period}`, signed: f.signedTotal, corrected: f.reportAfter })),
  };
}

/** A round step near range / 4: 1, 2, 2.5 or 5 times a power of ten. */
function niceStep(range: number): number {
  const raw = range / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  return step ?? 10 * power;
}

/** 250000 → "250k", 1200000 → "1.2M", -5000 → "−5k": axis ticks, where exact amounts would crowd the plot. */
export function compactAmount(value: number): string {
  const abs = Math.abs(value);
  const sign = value < 0 ? '−' : '';
  const trim = (n: number) => String(Number(n.toFixed(1)));
  if (abs >= 1e6) return `${sign}${trim(abs / 1e6)}M`;
  if (abs >= 1e3) return `${sign}${trim(abs / 1e3)}k`;
  return `${sign}${trim(abs)}`;
}

const fits = (text: string, size: number, room: number): boolean => text.length * size * CHAR_EM <= room;

/** The y-axis: from the lowest to the highest total (zero always in view), in round steps. */
function valueAxis(partitions: PartitionFigures[]): { min: number; max: number; step: number } {
  const values = partitions.flatMap((p) => [Number(p.before), ...(p.after === null ? [] : [Number(p.after)])]);
  const low = Math.min(0, ...values);
  const high = Math.max(0, ...values);
  const step = niceStep(high - low || 1);
  return { min: Math.floor(low / step) * step, max: Math.ceil(high / step) * step || step, step };
}

function headerTexts(data: DiffChartData): ChartText[] {
  const legend = (x: number, text: string): ChartText => ({ x: x + 24, y: 122, text, size: 18, fill: MUTED, anchor: 'start' });
  return [
    { x: MARGIN_LEFT - 80, y: 44, text: data.title, size: 28, fill: INK, anchor: 'start' },
    { x: MARGIN_LEFT - 80, y: 80, text: data.subtitle, size: 20, fill: INK, anchor: 'start' },
    legend(MARGIN_LEFT, 'before'),
    legend(MARGIN_LEFT + 120, 'after (rebuilt)'),
  ];
}

/** The legend's colour swatches, beside headerTexts' legend words. */
function legendBars(): ChartBar[] {
  return [
    { role: 'before', index: -1, x: MARGIN_LEFT, y: 106, width: 18, height: 18 },
    { role: 'after', index: -1, x: MARGIN_LEFT + 120, y: 106, width: 18, height: 18 },
  ];
}

/** The grid lines and tick labels of the y-axis, and the zero line. */
function axisMarks(axis: { min: number; max: number; step: number }, yOf: (v: number) => number): { texts: ChartText[]; lines: ChartLine[] } {
  const texts: ChartText[] = [];
  const lines: ChartLine[] = [];
  for (let v = axis.min; v <= axis.max + axis.step / 2; v += axis.step) {
    const y = yOf(v);
    lines.push({ x1: MARGIN_LEFT, y1: y, x2: CHART_WIDTH - MARGIN_RIGHT, y2: y, stroke: v === 0 ? MUTED : GRID });
    texts.push({ x: MARGIN_LEFT - 10, y: y + 6, text: compactAmount(v), size: 16, fill: MUTED, anchor: 'end' });
  }
  return { texts, lines };
}

/** The before and after bars of every partition, with its hour below and its difference above. */
function partitionPanel(data: DiffChartData): { bars: ChartBar[]; texts: ChartText[]; lines: ChartLine[] } {
  const axis = valueAxis(data.partitions);
  const yOf = (v: number) => PLOT_TOP + ((axis.max - v) / (axis.max - axis.min)) * PLOT_HEIGHT;
  const zero = yOf(0);
  const group = (CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT) / Math.max(1, data.partitions.length);
  const barWidth = Math.max(1, Math.min(56, group * 0.38));
  const gap = Math.min(4, group * 0.04);
  // Every k-th hour is labelled, so that labels never run into each other however many partitions there are.
  const labelEvery = Math.max(1, Math.ceil((5 * 18 * CHAR_EM + 8) / group));
  const { texts, lines } = axisMarks(axis, yOf);
  const bars: ChartBar[] = [];
  const bar = (role: BarRole, index: number, x: number, value: number): ChartBar =>
    ({ role, index, x, y: Math.min(yOf(value), zero), width: barWidth, height: Math.abs(yOf(value) - zero) });
  data.partitions.forEach((p, index) => {
    const centre = MARGIN_LEFT + group * (index + 0.5);
    bars.push(bar('before', index, centre - gap / 2 - barWidth, Number(p.before)));
    if (p.after !== null) bars.push(bar('after', index, centre + gap / 2, Number(p.after)));
    const top = Math.min(yOf(Number(p.before)), yOf(Number(p.after ?? p.before)), zero);
    const note = p.unavailable ? 'unavailable' : p.after === null ? NONE : formatSignedMoney(subtractMoney(p.after, p.before));
    const colour = note.startsWith('+') ? UP : note.startsWith('−') ? DOWN : MUTED;
    if (fits(note, 16, group - 4)) texts.push({ x: centre, y: top - 8, text: note, size: 16, fill: colour, anchor: 'middle' });
    if (index % labelEvery === 0) texts.push({ x: centre, y: PLOT_TOP + PLOT_HEIGHT + 28, text: p.hour, size: 18, fill: INK, anchor: 'middle' });
    if (p.day) texts.push({ x: centre, y: PLOT_TOP + PLOT_HEIGHT + 52, text: p.day, size: 16, fill: MUTED, anchor: 'middle' });
  });
  return { bars, texts, lines };
}

/** Each signed figure: a line saying signed → corrected (difference), and the two amounts as bars. */
function signedPanel(data: DiffChartData, top: number): { bars: ChartBar[]; texts: ChartText[] } {
  const texts: ChartText[] = [{ x: MARGIN_LEFT - 80, y: top, text: 'Signed figures: the signed amount (upper bar), the corrected one (lower bar)', size: 20, fill: INK, anchor: 'start' }];
  if (data.signed.length === 0) {
    texts.push({ x: MARGIN_LEFT - 80, y: top + 34, text: 'No signed figure is touched by this backfill.', size: 18, fill: MUTED, anchor: 'start' });
    return { bars: [], texts };
  }
  const amounts = data.signed.flatMap((f) => [Math.abs(Number(f.signed)), Math.abs(Number(f.corrected ?? 0))]);
  const room = CHART_WIDTH - MARGIN_LEFT - MARGIN_RIGHT;
  const widthOf = (value: number) => (Math.abs(value) / Math.max(1, ...amounts)) * room;
  const bars: ChartBar[] = [];
  data.signed.forEach((f, index) => {
    const rowTop = top + 16 + index * SIGNED_ROW;
    const diff = f.corrected === null ? NONE : formatSignedMoney(subtractMoney(f.corrected, f.signed));
    const line = `${f.label}: signed ${formatMoney(f.signed)} → corrected ${moneyOrNone(f.corrected)} (${diff})`;
    texts.push({ x: MARGIN_LEFT - 80, y: rowTop + 20, text: line, size: 18, fill: INK, anchor: 'start' });
    bars.push({ role: 'signed', index, x: MARGIN_LEFT, y: rowTop + 30, width: widthOf(Number(f.signed)), height: 16 });
    if (f.corrected !== null) bars.push({ role: 'corrected', index, x: MARGIN_LEFT, y: rowTop + 50, width: widthOf(Number(f.corrected)), height: 16 });
  });
  return { bars, texts };
}

/** Where everything goes: the header, the partitions' panel, then the signed figures' panel. */
export function diffChartLayout(data: DiffChartData): DiffChartLayout {
  const partitions = partitionPanel(data);
  const signedTop = PLOT_TOP + PLOT_HEIGHT + 100;
  const signed = signedPanel(data, signedTop);
  const rows = Math.max(1, data.signed.length);
  return {
    width: CHART_WIDTH,
    height: Math.ceil(signedTop + 16 + rows * SIGNED_ROW + 10),
    bars: [...legendBars(), ...partitions.bars, ...signed.bars],
    texts: [...headerTexts(data), ...partitions.texts, ...signed.texts],
    lines: partitions.lines,
  };
}

const escapeXml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c] ?? c);
const n = (value: number): string => String(Math.round(value * 100) / 100);

/** The layout as SVG. Each data bar carries class="bar <role>" and data-index; the legend's swatches do not. */
export function diffChartSvg(layout: DiffChartLayout): string {
  const lines = layout.lines.map((l) => `<line x1="${n(l.x1)}" y1="${n(l.y1)}" x2="${n(l.x2)}" y2="${n(l.y2)}" stroke="${l.stroke}" stroke-width="1"/>`);
  const bars = layout.bars.map((b) => {
    const tag = b.index < 0 ? 'class="legend"' : `class="bar ${b.role}" data-index="${b.index}"`;
    return `<rect ${tag} x="${n(b.x)}" y="${n(b.y)}" width="${n(b.width)}" height="${n(b.height)}" fill="${BAR_COLOURS[b.role]}"/>`;
  });
  const texts = layout.texts.map((t) =>
    `<text x="${n(t.x)}" y="${n(t.y)}" font-size="${t.size}" fill="${t.fill}" text-anchor="${t.anchor}">${escapeXml(t.text)}</text>`);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${layout.width}" height="${layout.height}" viewBox="0 0 ${layout.width} ${layout.height}" font-family="${FONT_FAMILY}">`,
    `<rect width="${layout.width}" height="${layout.height}" fill="#ffffff"/>`,
    ...lines, ...bars, ...texts,
    '</svg>',
  ].join('\n');
}

/** The diff chart of a report, as PNG bytes, with the alt text Slack shows to screen readers and in search. */
export async function diffChartPng(report: BackfillReport): Promise<{ png: Buffer; altText: string; width: number; height: number }> {
  const data = diffChartData(report);
  const layout = diffChartLayout(data);
  const rendered = await renderChartPng(diffChartSvg(layout));
  const signed = data.signed.map((f) => `${f.label} signed ${formatMoney(f.signed)}, corrected ${moneyOrNone(f.corrected)}`);
  const altText = [`${data.title}. ${data.subtitle}.`, `${data.partitions.length} partitions, before and after.`, ...signed].join(' ');
  return { png: rendered.png, altText: altText.slice(0, 1000), width: rendered.width, height: rendered.height };
}

/**
 * SVG → PNG at CHART_SCALE, with the bundled DejaVu Sans only, so every machine draws the same pixels. Drawn
 * off the event loop (resvg's own thread): a worker's other steps and its job locks' renewals go on meanwhile.
 */
export async function renderChartPng(svg: string): Promise<{ png: Buffer; width: number; height: number }> {
  const image = await renderAsync(svg, {
    fitTo: { mode: 'zoom', value: CHART_SCALE },
    font: { fontFiles: [FONT_FILE], loadSystemFonts: false, defaultFontFamily: FONT_FAMILY },
    background: '#ffffff',
  });
  return { png: image.asPng(), width: image.width, height: image.height };
}
