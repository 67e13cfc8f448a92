// The diff chart from known data: the SVG has one before and one after bar per partition and a signed and a
// corrected bar per signed figure; the PNG decodes to the layout's size times the scale, and its pixels show
// each bar where the layout put it, in its colour, with the text drawn in the bundled font.

import { describe, expect, it } from 'vitest';
import {
  BAR_COLOURS, CHART_SCALE, CHART_WIDTH, compactAmount, diffChartLayout, diffChartSvg, renderChartPng,
  type ChartBar, type DiffChartData, type PartitionFigures,
} from '../../src/views/diffChart.js';
import { decodePng, type DecodedPng } from '../support/png.js';

const hours = (totals: [string, string | null][]): PartitionFigures[] =>
  totals.map(([before, after], i) => ({ hour: `${String(5 + (i % 19)).padStart(2, '0')}:00`, day: undefined, before, after, unavailable: false }));

const NIGHT_15: DiffChartData = {
  title: 'Backfill #1 diff: orders, 05:00–10:00 on 2026-11-15',
  subtitle: 'Total 1,284,310.55 → 1,271,902.10 (−12,408.45)',
  partitions: hours([
    ['210000.10', '208100.10'], ['220500.00', '219000.00'], ['230100.55', '226000.00'],
    ['205000.00', '205000.00'], ['209710.00', '206000.00'], ['209000.90', '206802.00'],
  ]),
  signed: [
    { label: 'settlement_report 2026-11-15', signed: '1284310.55', corrected: '1271902.10' },
    { label: 'payout_export 2026-11-15', signed: '990000.00', corrected: '985000.00' },
  ],
};

const hex = (colour: string): [number, number, number] =>
  [Number.parseInt(colour.slice(1, 3), 16), Number.parseInt(colour.slice(3, 5), 16), Number.parseInt(colour.slice(5, 7), 16)];
const near = (pixel: readonly number[], colour: string) => hex(colour).every((c, i) => Math.abs(c - (pixel[i] ?? -99)) <= 8);
const dataBars = (bars: ChartBar[], role: ChartBar['role']) => bars.filter((b) => b.role === role && b.index >= 0);
const count = (svg: string, pattern: RegExp) => svg.match(pattern)?.length ?? 0;

/** Runs of `colour` along one row of pixels, from `fromX` on: how many separate bars a horizontal line crosses. */
function runsAlongRow(png: DecodedPng, y: number, colour: string, fromX: number): number {
  let runs = 0;
  let inside = false;
  for (let x = Math.round(fromX); x < png.width; x += 1) {
    const hit = near(png.pixel(x, y), colour);
    if (hit && !inside) runs += 1;
    inside = hit;
  }
  return runs;
}

describe('the diff chart', () => {
  it('draws one before and one after bar per partition, and a signed and a corrected bar per signed figure', () => {
    const layout = diffChartLayout(NIGHT_15);
    const svg = diffChartSvg(layout);
    expect(count(svg, /class="bar before"/g)).toBe(6);
    expect(count(svg, /class="bar after"/g)).toBe(6);
    expect(count(svg, /class="bar signed"/g)).toBe(2);
    expect(count(svg, /class="bar corrected"/g)).toBe(2);
    expect([...svg.matchAll(/class="bar after" data-index="(\d+)"/g)].map((m) => Number(m[1]))).toEqual([0, 1, 2, 3, 4, 5]);
    // Each partition's difference over its pair, signed, and every hour under it.
    expect(svg).toContain('>−1,900.00<');
    expect(svg).toContain('>0.00<');
    expect(svg).toContain('>10:00<');
    expect(svg).toContain('settlement_report 2026-11-15: signed 1,284,310.55 → corrected 1,271,902.10 (−12,408.45)');
    // The after bar of the 07:00 partition (the largest drop) is shorter than its before bar.
    const [before, after] = [dataBars(layout.bars, 'before')[2], dataBars(layout.bars, 'after')[2]];
    expect(after?.height).toBeLessThan(before?.height ?? 0);
  });

  it('renders a PNG of the layout times the scale, with each bar where the layout put it', async () => {
    const layout = diffChartLayout(NIGHT_15);
    const { png, width, height } = await renderChartPng(diffChartSvg(layout));
    const decoded = decodePng(png);
    expect([decoded.width, decoded.height]).toEqual([width, height]);
    expect(decoded.width).toBe(CHART_WIDTH * CHART_SCALE);
    expect(decoded.height).toBe(Math.round(layout.height * CHART_SCALE));
    // A row just above the zero line crosses every bar: six grey, six blue. It starts right of the y-axis's
    // labels, whose smoothed edges can take any grey.
    const baseline = Math.max(...dataBars(layout.bars, 'before').map((b) => b.y + b.height));
    const row = Math.round((baseline - 4) * CHART_SCALE);
    const plotLeft = (Math.min(...dataBars(layout.bars, 'before').map((b) => b.x)) - 5) * CHART_SCALE;
    expect(runsAlongRow(decoded, row, BAR_COLOURS.before, plotLeft)).toBe(6);
    expect(runsAlongRow(decoded, row, BAR_COLOURS.after, plotLeft)).toBe(6);
    // The column through the middle of each bar has the bar's colour halfway up it.
    for (const bar of layout.bars.filter((b) => b.index >= 0)) {
      const pixel = decoded.pixel((bar.x + bar.width / 2) * CHART_SCALE, (bar.y + bar.height / 2) * CHART_SCALE);
      expect(near(pixel, BAR_COLOURS[bar.role]), `${bar.role} bar ${bar.index}: ${pixel.join(',')}`).toBe(true);
    }
    // Between two partitions' pairs there is white: the bars are separate.
    const [afterFirst, beforeSecond] = [dataBars(layout.bars, 'after')[0], dataBars(layout.bars, 'before')[1]];
    const gapX = ((afterFirst?.x ?? 0) + (afterFirst?.width ?? 0) + (beforeSecond?.x ?? 0)) / 2;
    expect(near(decoded.pixel(gapX * CHART_SCALE, row), '#ffffff')).toBe(true);
  });

  it('draws its text in the bundled font, the same bytes every time', async () => {
    const svg = diffChartSvg(diffChartLayout(NIGHT_15));
    const first = (await renderChartPng(svg)).png;
    expect((await renderChartPng(svg)).png.equals(first)).toBe(true);
    // The title's band holds dark ink: without a font (system fonts are not loaded) it would be blank.
    const decoded = decodePng(first);
    let ink = 0;
    for (let x = 0; x < decoded.width; x += 2) {
      for (let y = Math.round(20 * CHART_SCALE); y < Math.round(52 * CHART_SCALE); y += 2) if ((decoded.pixel(x, y)[0]) < 100) ink += 1;
    }
    expect(ink).toBeGreaterThan(500);
  });

  it('leaves out the after bar of an unavailable partition, and says so over it', () => {
    const data: DiffChartData = {
      ...NIGHT_15,
      partitions: NIGHT_15.partitions.map((p, i) => (i === 1 ? { ...p, after: null, unavailable: true } : p)),
    };
    const layout = diffChartLayout(data);
    expect(dataBars(layout.bars, 'before')).toHaveLength(6);
    expect(dataBars(layout.bars, 'after').map((b) => b.index)).toEqual([0, 2, 3, 4, 5]);
    expect(diffChartSvg(layout)).toContain('>unavailable<');
  });

  it('hangs negative totals below the zero line and keeps zero on the axis', () => {
    const layout = diffChartLayout({ ...NIGHT_15, partitions: hours([['-5000.00', '-7500.00'], ['12000.00', '11000.00']]), signed: [] });
    const svg = diffChartSvg(layout);
    const [negative, positive] = dataBars(layout.bars, 'after');
    expect((negative?.y ?? 0)).toBeGreaterThanOrEqual((positive?.y ?? 0) + (positive?.height ?? 0));
    expect(svg).toMatch(/>−10k</);
    expect(svg).toMatch(/>0</);
    expect(svg).toContain('No signed figure is touched by this backfill.');
  });

  it('labels fewer hours when there are many partitions, so that no two labels overlap', () => {
    const many = hours(Array.from({ length: 48 }, (_, i): [string, string] => [`${1000 + i}.00`, `${990 + i}.00`]));
    const layout = diffChartLayout({ ...NIGHT_15, partitions: many });
    expect(dataBars(layout.bars, 'after')).toHaveLength(48);
    const labels = layout.texts.filter((t) => /^\d\d:00$/.test(t.text)).map((t) => t.x);
    expect(labels.length).toBeGreaterThan(4);
    expect(labels.length).toBeLessThan(48);
    const spacing = Math.min(...labels.slice(1).map((x, i) => x - (labels[i] ?? 0)));
    // "05:00" at 18 units is about 5 × 18 × 0.6 = 54 units wide.
    expect(spacing).toBeGreaterThan(54);
  });

  it('writes axis amounts short', () => {
    expect([compactAmount(250_000), compactAmount(1_200_000), compactAmount(-5_000), compactAmount(0), compactAmount(750)]).toEqual(['250k', '1.2M', '−5k', '0', '750']);
  });
});
