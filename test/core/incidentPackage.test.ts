import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acknowledge, overrideGate } from '../../src/core/announce/gate.js';
import { buildIncidentPackage, type IncidentPackage } from '../../src/core/file/incidentPackage.js';
import { incidentPackageFiles, incidentPackageJson, incidentPackageMarkdown } from '../../src/views/incidentPackage.js';
import { formatMoney, formatSignedMoney, toCents } from '../../src/core/money.js';
import { recordingRefusals } from '../../src/core/refusals.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { formatHour } from '../../src/core/time.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { ErrorCode } from '../../src/errors.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';
const INTRUDER = 'U07INTRUDER';

// ---------------------------------------------------------------------------------------------------------
// "The Markdown and the JSON say the same thing", checked mechanically: every fact in the parsed JSON is
// rendered the product's way (formatMoney, formatSignedMoney, formatHour, seconds-precise UTC instants) and
// must be found in the Markdown, a list's i-th item in the i-th row of its table.

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

const MONEY_KEYS = new Set(['totalBefore', 'totalAfter', 'signedTotal', 'tableTotalBefore', 'reportAfter']);
const SIGNED_MONEY_KEYS = new Set(['diff']);
const HOUR_KEYS = new Set(['hour', 'firstHour', 'lastHour', 'watermarkBefore', 'watermarkResetTo']);
const isInstantKey = (key: string) => key.endsWith('At');

/** 2026-11-16T07:00:00.000Z → 2026-11-16 07:00:00 UTC, written out here rather than borrowed from the module. */
function instant(iso: string): string {
  expect(iso).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

/** Every fact a JSON object holds, as the Markdown must show it. null is the absence of a fact. */
function facts(value: Json, key = ''): string[] {
  if (value === null) return [];
  if (Array.isArray(value)) return value.flatMap((item) => facts(item, key));
  if (typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => facts(v, k));
  if (typeof value === 'boolean') return [value ? 'yes' : 'no'];
  if (typeof value === 'number') return [String(value)];
  if (MONEY_KEYS.has(key)) return [formatMoney(value)];
  if (SIGNED_MONEY_KEYS.has(key)) return [formatSignedMoney(value)];
  if (HOUR_KEYS.has(key)) return [formatHour(new Date(value))];
  if (isInstantKey(key)) return [instant(value)];
  return [value.trim()];
}

/** An event's detail is shown as `key: value` pairs: every key and every leaf value must be in its cell. */
function detailFacts(detail: Json, key?: string): string[] {
  if (detail === null) return key === undefined ? [] : [`${key}: `];
  if (Array.isArray(detail)) return [...(key === undefined ? [] : [`${key}: `]), ...detail.flatMap((item) => detailFacts(item))];
  if (typeof detail === 'object') {
    return [...(key === undefined ? [] : [`${key}: `]), ...Object.entries(detail).flatMap(([k, v]) => detailFacts(v, k))];
  }
  return [...(key === undefined ? [] : [`${key}: `]), String(detail)];
}

/** Splits a table row on unescaped pipes and undoes the cell escaping. */
function cells(line: string): string[] {
  return line.slice(1, -1).split(/(?<!\\)\|/).map((cell) => cell.trim().replaceAll('\\|', '|').replaceAll('<br>', '\n'));
}

/** The body rows of the (first) table under a `## heading`. */
function tableUnder(markdown: string, heading: string): string[][] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((line) => line.startsWith(`## ${heading}`));
  expect(start, `section "${heading}"`).toBeGreaterThanOrEqual(0);
  const rows: string[][] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.startsWith('## ')) break;
    if (line.startsWith('|')) rows.push(cells(line));
  }
  const [header, separator, ...body] = rows;
  expect(separator?.every((cell) => /^-+:?$/.test(cell))).toBe(true);
  for (const row of body) expect(row, 'a row with as many cells as the header').toHaveLength(header?.length ?? -1);
  return body;
}

function expectRowHolds(row: string[] | undefined, wanted: string[], what: string): void {
  expect(row, what).toBeDefined();
  const text = (row ?? []).join('\n');
  for (const fact of wanted) expect(text, `${what} shows ${JSON.stringify(fact)}`).toContain(fact);
}

function expectMarkdownSaysWhatJsonSays(markdown: string, json: string): void {
  const parsed = JSON.parse(json) as { [key: string]: Json };
  const p = parsed as unknown as IncidentPackage;
  expect(markdown).toContain(p.format);
  expect(markdown).toContain(instant(p.generatedAt));
  expect(markdown).toContain(`# Backfill #${p.backfill.id} incident package`);

  const logRow = tableUnder(markdown, 'Log row');
  expectRowHolds(logRow.map((row) => row[1] ?? '').filter(Boolean), facts(parsed.backfill ?? null), 'the log row');

  const lists: [keyof IncidentPackage, string][] = [
    ['signedFigures', 'Signed figures'], ['partitions', 'Partitions'], ['consumers', 'Consumers'], ['steps', 'Steps'],
  ];
  for (const [key, heading] of lists) {
    const items = parsed[key] as Json[];
    if (items.length === 0) continue;
    const rows = tableUnder(markdown, heading);
    expect(rows, `${heading}: one row per item`).toHaveLength(items.length);
    // A consumer's announcement (told) has a section of its own, checked below.
    const tabled = (item: Json) => (key === 'consumers' && item !== null && typeof item === 'object' && !Array.isArray(item) ? { ...item, told: null } : item);
    items.forEach((item, i) => expectRowHolds(rows[i], facts(tabled(item)), `${heading} row ${i + 1}`));
  }

  const timeline = tableUnder(markdown, 'Timeline');
  expect(timeline, 'one timeline row per event').toHaveLength(p.timeline.length);
  p.timeline.forEach((event, i) => {
    const row = timeline[i];
    expect([row?.[0], row?.[1], row?.[3]], `timeline row ${i + 1}`).toEqual([String(event.id), instant(event.at), event.kind]);
    // The actor by id, with the name the bot knows them by, and the person acted for and why when there was one.
    const named = (id: string) => (p.people[id] === undefined ? id : `${p.people[id]} (${id})`);
    const actor = event.onBehalfOf === null ? named(event.actor) : `${named(event.actor)} on behalf of ${named(event.onBehalfOf)}: ${event.onBehalfReason ?? ''}`;
    expect(row?.[2], `timeline row ${i + 1} actor`).toBe(actor);
    expectRowHolds(row?.slice(4), detailFacts(event.detail as Json), `timeline row ${i + 1} (${event.kind}) detail`);
  });
}

/** Whether `kinds` appear in this order (each one's first occurrence after the previous one's). */
function firstIndexes(timeline: { kind: string }[], kinds: string[]): number[] {
  return kinds.map((kind) => timeline.findIndex((e) => e.kind === kind));
}

// ---------------------------------------------------------------------------------------------------------

describe('the incident package of the night-15 backfill', () => {
  let engine: TestEngine;
  let backfillId: number;
  let pkg: IncidentPackage;
  let json: string;
  let markdown: string;

  beforeAll(async () => {
    engine = await createTestEngine();
    const started = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    backfillId = started.backfill.id;
    await acknowledge(engine.ctx, { backfillId, actor: OWNERS.settlementLead });
    const last = await acknowledge(engine.ctx, { backfillId, actor: OWNERS.payouts });
    expect(last.approved).toBe(true);
    const settled = await runUntilSettled(engine.ctx, backfillId, () => undefined, engine.notifier);
    expect(settled.backfill.state).toBe('done');
    pkg = await buildIncidentPackage(engine.ctx.pool, backfillId);
    json = incidentPackageJson(pkg);
    markdown = incidentPackageMarkdown(pkg);
  });
  afterAll(async () => engine.close());

  it('is JSON with the format first, and holds the log row with the totals as the database gives them', () => {
    const parsed = JSON.parse(json) as IncidentPackage;
    expect(Object.keys(parsed)[0]).toBe('format');
    expect(parsed.format).toBe('backfill-incident-package/1');
    expect(parsed).toEqual(JSON.parse(JSON.stringify(pkg)));
    expect(parsed.backfill).toMatchObject({
      id: backfillId, pipeline: 'orders', reason: 'currency parsed as text', requestedBy: OPERATOR,
      partitions: { firstHour: '2026-11-15T05:00:00.000Z', lastHour: '2026-11-15T10:00:00.000Z', count: 6 },
      watermarkResetTo: '2026-11-15T04:00:00.000Z',
      totalBefore: NIGHT_15.signedTotal, totalAfter: NIGHT_15.correctedTotal, diff: NIGHT_15.diff,
      ranBy: OPERATOR, state: 'done', failure: null,
    });
    expect(parsed.backfill.totalBefore).toBe(NIGHT_15.signedTotal);
    expect(parsed.backfill.totalAfter).toBe(NIGHT_15.correctedTotal);
    expect(parsed.backfill.diff).toBe(NIGHT_15.diff);
    const { announcedAt, ranAt, finishedAt } = parsed.backfill;
    expect(Date.parse(announcedAt)).toBeLessThan(Date.parse(ranAt ?? ''));
    expect(Date.parse(ranAt ?? '')).toBeLessThanOrEqual(Date.parse(finishedAt ?? ''));
  });

  it('holds the signed figure it touched: who signed it, when, and what the rebuilt report shows', () => {
    expect(pkg.signedFigures).toEqual([{
      report: 'settlement_report', period: '2026-11-15', signedTotal: NIGHT_15.signedTotal, signedBy: 'U07SETTLE',
      signedAt: '2026-11-16T07:00:00.000Z', tableTotalBefore: NIGHT_15.signedTotal, reportAfter: NIGHT_15.correctedTotal, diff: NIGHT_15.diff,
    }]);
  });

  it('holds the six partitions with rows, totals and checksums before and after', () => {
    expect(pkg.partitions.map((t) => t.hour)).toEqual(['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00:00.000Z`));
    for (const t of pkg.partitions) {
      expect(t.rowsAfter).toBe(t.rowsBefore);
      expect(t.checksumAfter).not.toBeNull();
      expect(t.checksumAfter).not.toBe(t.checksumBefore);
      expect(t.recomputedAt).not.toBeNull();
    }
    expect(pkg.partitions.reduce((sum, t) => sum + toCents(t.diff ?? 'x'), 0n)).toBe(toCents(NIGHT_15.diff));
  });

  it('holds the consumers in dependency order with the two acknowledgements', () => {
    expect(pkg.consumers.map((c) => [c.name, c.owner, c.rule, c.gate])).toEqual([
      ['settlement_report', OWNERS.settlementLead, 'before', 'acknowledged'],
      ['demand_forecast', OWNERS.forecast, 'after', 'told_after'],
      ['payout_export', OWNERS.payouts, 'before', 'acknowledged'],
    ]);
    const acked = pkg.consumers.filter((c) => c.acknowledgedAt !== null);
    expect(acked.map((c) => [c.name, c.acknowledgedBy])).toEqual([['settlement_report', OWNERS.settlementLead], ['payout_export', OWNERS.payouts]]);
    for (const c of acked) {
      expect(Date.parse(c.acknowledgedAt ?? '')).toBeGreaterThanOrEqual(Date.parse(pkg.backfill.announcedAt));
      expect(Date.parse(c.acknowledgedAt ?? '')).toBeLessThanOrEqual(Date.parse(pkg.backfill.ranAt ?? ''));
    }
    expect(pkg.consumers.every((c) => c.overriddenBy === null)).toBe(true);
  });

  it('holds what each owner was told, as the facts stored when the backfill was created, worded with names in the Markdown', () => {
    const settlement = pkg.consumers.find((c) => c.name === 'settlement_report');
    expect(settlement?.told).toMatchObject({
      kind: 'announcement',
      facts: { backfillId, totalBefore: NIGHT_15.signedTotal, expectedTotalAfter: NIGHT_15.correctedTotal, signed: [{ report: 'settlement_report', signedBy: OWNERS.settlementLead }] },
    });
    const section = markdown.slice(markdown.indexOf('## What each owner was told'), markdown.indexOf('## Steps'));
    expect(section).toMatch(/### settlement_report: .*U07SETTLE.*, told before the run/);
    expect(section).toMatch(/> Signed figure: settlement_report for 2026-11-15 = 1,284,310\.55, signed by .*U07SETTLE.* at 2026-11-16 07:00 UTC\./);
    expect(section).toContain('### demand_forecast:');
    expect(section).not.toContain('<@');
  });

  it('holds the whole timeline in order, from the request to the finish', () => {
    const order = ['requested', 'announced', 'acknowledged', 'approved', 'recomputed', 'watermark_moved', 'replayed', 'compared', 'finished'];
    const indexes = firstIndexes(pkg.timeline, order);
    expect(indexes.every((i) => i >= 0), `all of ${order.join(', ')} in ${pkg.timeline.map((e) => e.kind).join(', ')}`).toBe(true);
    expect([...indexes].sort((a, b) => a - b)).toEqual(indexes);
    expect(pkg.timeline.filter((e) => e.kind === 'recomputed')).toHaveLength(6);
    expect(pkg.timeline.filter((e) => e.kind === 'acknowledged').map((e) => e.actor)).toEqual([OWNERS.settlementLead, OWNERS.payouts]);
    expect(pkg.timeline.find((e) => e.kind === 'watermark_moved')?.detail).toEqual({ from: '2026-11-30 23:00', to: '2026-11-15 04:00' });
    const ids = pkg.timeline.map((e) => e.id);
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
  });

  it('holds every event recorded against the backfill, and nothing else', async () => {
    const { rows } = await engine.ctx.pool.query<{ id: number }>('SELECT id FROM backfill.events WHERE backfill_id = $1 ORDER BY id', [backfillId]);
    expect(pkg.timeline.map((e) => e.id)).toEqual(rows.map((r) => Number(r.id)));
  });

  it('says in Markdown exactly what the JSON says', () => {
    expectMarkdownSaysWhatJsonSays(markdown, json);
    // The headline figures, as finance reads them.
    expect(markdown).toContain('| Total before | 1,284,310.55 |');
    expect(markdown).toContain('| Total after | 1,271,902.10 |');
    expect(markdown).toContain('| Difference | −12,408.45 |');
    expect(markdown).toMatch(/\| settlement_report \| 2026-11-15 \| 1,284,310\.55 \| Settlement lead \(U07SETTLE\) \| 2026-11-16 07:00:00 UTC \| 1,284,310\.55 \| 1,271,902\.10 \| −12,408\.45 \|/);
    expect(markdown).toContain('| 2026-11-15 05:00 |');
    // jsonb keeps its own key order; the pairs are what matters.
    expect(markdown).toMatch(/\| watermark_moved \| (from: 2026-11-30 23:00; to: 2026-11-15 04:00|to: 2026-11-15 04:00; from: 2026-11-30 23:00) \|/);
  });

  it('gives the two files named after the backfill', () => {
    const files = incidentPackageFiles(pkg);
    expect(files.map((f) => f.filename)).toEqual([`backfill-${backfillId}-incident.md`, `backfill-${backfillId}-incident.json`]);
    expect(files[0]?.content).toBe(markdown);
    expect(files[1]?.content).toBe(json);
    for (const file of files) expect(file.title).toContain(`#${backfillId}`);
  });

  it('refuses an unknown backfill with unknown_backfill', async () => {
    await expect(buildIncidentPackage(engine.ctx.pool, 987_654)).rejects.toMatchObject({ name: 'BackfillError', code: ErrorCode.UnknownBackfill });
    await expect(buildIncidentPackage(engine.ctx.pool, 987_654)).rejects.toMatchObject({ code: 'unknown_backfill' });
  });
});

describe('the incident package of a backfill with a refusal and an override', () => {
  let engine: TestEngine;
  let backfillId: number;
  let pkg: IncidentPackage;
  const REASON = 'owners on a flight | finance lead agreed by phone';

  beforeAll(async () => {
    engine = await createTestEngine();
    const started = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    backfillId = started.backfill.id;
    const attempt = recordingRefusals(engine.ctx, { actor: INTRUDER, action: 'acknowledge', backfillId },
      () => acknowledge(engine.ctx, { backfillId, actor: INTRUDER }));
    await expect(attempt).rejects.toMatchObject({ code: ErrorCode.NotAllowed });
    const overridden = await overrideGate(engine.ctx, { backfillId, actor: OPERATOR, reason: REASON });
    expect(overridden.approved).toBe(true);
    pkg = await buildIncidentPackage(engine.ctx.pool, backfillId);
  });
  afterAll(async () => engine.close());

  it('keeps the refusal and the override in the JSON timeline and on the consumers', () => {
    const parsed = JSON.parse(incidentPackageJson(pkg)) as IncidentPackage;
    const refused = parsed.timeline.filter((e) => e.kind === 'refused');
    expect(refused).toEqual([expect.objectContaining({ actor: INTRUDER, detail: expect.objectContaining({ action: 'acknowledge', code: 'not_allowed' }) })]);
    const overrides = parsed.timeline.filter((e) => e.kind === 'overridden');
    expect(overrides.map((e) => [e.actor, e.detail.consumer, e.detail.reason])).toEqual([
      [OPERATOR, 'settlement_report', REASON], [OPERATOR, 'payout_export', REASON],
    ]);
    const kinds = parsed.timeline.map((e) => e.kind);
    expect(kinds.indexOf('refused')).toBeLessThan(kinds.indexOf('overridden'));
    expect(kinds.indexOf('overridden')).toBeLessThan(kinds.indexOf('approved'));
    expect(parsed.consumers.filter((c) => c.rule === 'before').map((c) => [c.name, c.gate, c.overriddenBy, c.overrideReason, c.acknowledgedAt])).toEqual([
      ['settlement_report', 'overridden', OPERATOR, REASON, null],
      ['payout_export', 'overridden', OPERATOR, REASON, null],
    ]);
    expect(parsed.consumers.every((c) => c.rule === 'after' || c.overriddenAt !== null)).toBe(true);
    expect(parsed.backfill).toMatchObject({ state: 'approved', totalAfter: null, diff: null, ranAt: null });
  });

  it('shows the same refusal and override in the Markdown, with the | in the reason escaped', () => {
    const markdown = incidentPackageMarkdown(pkg);
    expectMarkdownSaysWhatJsonSays(markdown, incidentPackageJson(pkg));
    expect(markdown).toMatch(new RegExp(`\\| ${INTRUDER} \\| refused \\| .*code: not_allowed`));
    expect(markdown).toContain('owners on a flight \\| finance lead agreed by phone');
    expect(markdown).not.toContain('owners on a flight | finance');
    // Nothing ran: the log row says so rather than inventing figures.
    expect(markdown).toContain('| Total after | — |');
    expect(markdown).toContain('| Difference | — |');
  });
});
