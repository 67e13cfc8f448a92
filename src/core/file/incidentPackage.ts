import { listAcknowledgingOwners, listOverrideTimes } from '../../db/acknowledgements.js';
import { listEvents } from '../../db/events.js';
import type { Queryable } from '../../db/pool.js';
import { formatMoney, formatSignedMoney, subtractMoney } from '../money.js';
import type { BackfillState } from '../engine/stateMachine.js';
import { loadBackfillReport } from './status.js';
import { formatHour } from '../time.js';

// The incident package of one backfill: the record finance and the incident review keep, built from the
// database and nothing else. The JSON is the record; the Markdown is the same record for people to read.
// Times are ISO strings, money the decimal strings the database gives ('1284310.55', '-12408.45').

export const INCIDENT_PACKAGE_FORMAT = 'backfill-incident-package/1';

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

export interface IncidentLogRow {
  id: number;
  pipeline: string;
  reason: string;
  requestedBy: string;
  partitions: { firstHour: string; lastHour: string; count: number };
  watermarkBefore: string | null;
  watermarkResetTo: string;
  totalBefore: string;
  totalAfter: string | null;
  diff: string | null;
  announcedAt: string;
  ranAt: string | null;
  ranBy: string | null;
  finishedAt: string | null;
  state: BackfillState;
  failure: string | null;
  limitOverride: string | null;
}

export interface IncidentSignedFigure {
  report: string;
  /** The report's period, YYYY-MM-DD. */
  period: string;
  signedTotal: string;
  signedBy: string;
  signedAt: string;
  /** The table's total over the period when the backfill was announced. */
  tableTotalBefore: string;
  /** What the rebuilt report showed after the run; null until the compare step ran. */
  reportAfter: string | null;
  /** reportAfter − signedTotal. */
  diff: string | null;
}

export interface IncidentPartition {
  hour: string;
  rowsBefore: number;
  rowsAfter: number | null;
  totalBefore: string;
  totalAfter: string | null;
  /** totalAfter − totalBefore. */
  diff: string | null;
  checksumBefore: string;
  checksumAfter: string | null;
  recomputedAt: string | null;
}

export type ConsumerGate = 'acknowledged' | 'overridden' | 'waiting' | 'told_after';

export interface IncidentConsumer {
  name: string;
  kind: 'report' | 'export' | 'model';
  owner: string;
  rule: 'before' | 'after';
  dependencyRank: number;
  dependsOn: string[];
  readDirectly: boolean;
  partitionsRead: number;
  gate: ConsumerGate;
  acknowledgedAt: string | null;
  /** Who pressed the button: the owner, or a delegate acting for them. */
  acknowledgedBy: string | null;
  overriddenBy: string | null;
  overriddenAt: string | null;
  overrideReason: string | null;
}

export interface IncidentStep {
  kind: string;
  key: string;
  status: string;
  attempts: number;
  startedAt: string | null;
  finishedAt: string | null;
  error: string | null;
}

export interface IncidentEvent {
  id: number;
  at: string;
  actor: string;
  kind: string;
  detail: { [key: string]: JsonValue };
}

export interface IncidentPackage {
  format: typeof INCIDENT_PACKAGE_FORMAT;
  generatedAt: string;
  backfill: IncidentLogRow;
  signedFigures: IncidentSignedFigure[];
  partitions: IncidentPartition[];
  /** In dependency order: what a consumer reads is re-triggered before it. */
  consumers: IncidentConsumer[];
  steps: IncidentStep[];
  /** Every event recorded against the backfill, in the order it was written. */
  timeline: IncidentEvent[];
}

const iso = (at: Date): string => at.toISOString();
const isoOrNull = (at: Date | null): string | null => (at ? at.toISOString() : null);

/** Reads one backfill's whole record. Read-only; throws BackfillError unknown_backfill for a missing id. */
export async function buildIncidentPackage(db: Queryable, backfillId: number): Promise<IncidentPackage> {
  const report = await loadBackfillReport(db, backfillId);
  const events = await listEvents(db, backfillId);
  // Who acknowledged (an owner or a delegate) and when an override was given: listBackfillConsumers has neither.
  const acks = await listAcknowledgingOwners(db, backfillId);
  const overrides = await listOverrideTimes(db, backfillId);
  const ackedBy = new Map(acks.map((a) => [a.consumer, a.owner]));
  const overriddenAt = new Map(overrides.map((o) => [o.consumer, o.at]));

  const b = report.backfill;
  return {
    format: INCIDENT_PACKAGE_FORMAT,
    generatedAt: new Date().toISOString(),
    backfill: {
      id: Number(b.id),
      pipeline: b.pipeline,
      reason: b.reason,
      requestedBy: b.requestedBy,
      partitions: { firstHour: iso(b.firstHour), lastHour: iso(b.lastHour), count: b.partitionCount },
      watermarkBefore: isoOrNull(b.watermarkBefore),
      watermarkResetTo: iso(b.watermarkResetTo),
      totalBefore: b.totalBefore,
      totalAfter: b.totalAfter,
      diff: b.diff,
      announcedAt: iso(b.announcedAt),
      ranAt: isoOrNull(b.ranAt),
      ranBy: b.ranBy,
      finishedAt: isoOrNull(b.finishedAt),
      state: b.state,
      failure: b.failure,
      limitOverride: b.limitOverride,
    },
    signedFigures: report.signed.map((s) => ({
      report: s.report,
      period: s.period,
      signedTotal: s.signedTotal,
      signedBy: s.signedBy,
      signedAt: iso(s.signedAt),
      tableTotalBefore: s.totalBefore,
      reportAfter: s.reportAfter,
      diff: s.diff,
    })),
    partitions: report.targets.map((t) => ({
      hour: iso(t.partitionHour),
      rowsBefore: t.rowsBefore,
      rowsAfter: t.rowsAfter,
      totalBefore: t.totalBefore,
      totalAfter: t.totalAfter,
      diff: t.totalAfter === null ? null : subtractMoney(t.totalAfter, t.totalBefore),
      checksumBefore: t.checksumBefore,
      checksumAfter: t.checksumAfter,
      recomputedAt: isoOrNull(t.recomputedAt),
    })),
    consumers: report.consumers.map((c) => ({
      name: c.consumer,
      kind: c.kind,
      owner: c.owner,
      rule: c.notifyRule,
      dependencyRank: c.dependencyRank,
      dependsOn: [...c.dependsOn],
      readDirectly: c.readDirectly,
      partitionsRead: c.partitionsRead,
      gate: c.notifyRule === 'after' ? 'told_after' : c.ackedAt ? 'acknowledged' : c.overriddenBy ? 'overridden' : 'waiting',
      acknowledgedAt: isoOrNull(c.ackedAt),
      acknowledgedBy: ackedBy.get(c.consumer) ?? null,
      overriddenBy: c.overriddenBy,
      overriddenAt: isoOrNull(overriddenAt.get(c.consumer) ?? null),
      overrideReason: c.overrideReason,
    })),
    steps: report.steps.map((s) => ({
      kind: s.kind,
      key: s.key,
      status: s.status,
      attempts: s.attempts,
      startedAt: isoOrNull(s.startedAt),
      finishedAt: isoOrNull(s.finishedAt),
      error: s.error,
    })),
    timeline: events.map((e) => ({
      id: Number(e.id),
      at: iso(e.at),
      actor: e.actor,
      kind: e.kind,
      // jsonb from the database: JSON already, round-tripped so the package holds no shared references.
      detail: JSON.parse(JSON.stringify(e.detail)) as { [key: string]: JsonValue },
    })),
  };
}

/** The package as pretty JSON; `format` comes first so a reader knows what it holds before reading on. */
export function incidentPackageJson(p: IncidentPackage): string {
  const { format: _format, ...rest } = p;
  return `${JSON.stringify({ format: INCIDENT_PACKAGE_FORMAT, ...rest }, null, 2)}\n`;
}

// ---------------------------------------------------------------------------------------------------------
// Markdown

const NONE = '—';

/** An instant to the second: 2026-11-16 07:00:00 UTC. */
export function formatInstant(isoTime: string): string {
  const at = new Date(isoTime);
  return `${at.toISOString().slice(0, 10)} ${at.toISOString().slice(11, 19)} UTC`;
}

/** A partition hour: 2026-11-15 05:00. */
export function formatPartitionHour(isoTime: string): string {
  return formatHour(new Date(isoTime));
}

/** A table cell: `|` escaped, line breaks kept as <br>, empty shown as a dash. */
export function markdownCell(text: string): string {
  const escaped = text.replaceAll('|', '\\|').replace(/\r?\n/g, '<br>').trim();
  return escaped === '' ? NONE : escaped;
}

/** An event's detail on one line: `key: value; key: value`, nested objects as `{key: value, …}`. */
export function formatDetail(detail: { [key: string]: JsonValue }): string {
  const entries = Object.entries(detail);
  if (entries.length === 0) return NONE;
  return entries.map(([key, value]) => `${key}: ${formatJsonValue(value)}`).join('; ');
}

function formatJsonValue(value: JsonValue): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return `[${value.map(formatJsonValue).join(', ')}]`;
  if (typeof value === 'object') return `{${Object.entries(value).map(([k, v]) => `${k}: ${formatJsonValue(v)}`).join(', ')}}`;
  return String(value);
}

const money = (amount: string | null): string => (amount === null ? NONE : formatMoney(amount));
const signedMoney = (amount: string | null): string => (amount === null ? NONE : formatSignedMoney(amount));
const instant = (at: string | null): string => (at === null ? NONE : formatInstant(at));
const text = (value: string | number | null): string => (value === null ? NONE : String(value));

/** A GFM table; columns whose index is in `right` (amounts, counts) are right-aligned. */
function table(header: string[], rows: string[][], right: number[] = []): string[] {
  return [
    `| ${header.join(' | ')} |`,
    `| ${header.map((_, i) => (right.includes(i) ? '---:' : '---')).join(' | ')} |`,
    ...rows.map((row) => `| ${row.map(markdownCell).join(' | ')} |`),
  ];
}

export function incidentPackageMarkdown(p: IncidentPackage): string {
  const b = p.backfill;
  const lines: string[] = [
    `# Backfill #${b.id} incident package: ${b.pipeline}, ${formatPartitionHour(b.partitions.firstHour)} – ${formatPartitionHour(b.partitions.lastHour)}`,
    '',
    `Generated ${formatInstant(p.generatedAt)} from the backfill log and its timeline (${p.format}). All times UTC; ` +
      `money in the pipeline's base currency. The JSON file alongside holds the same record.`,
    '',
    '## Log row',
    '',
    ...table(['Field', 'Value'], [
      ['Backfill', `#${b.id}`],
      ['Pipeline', b.pipeline],
      ['Reason', b.reason],
      ['Requested by', b.requestedBy],
      ['First partition', formatPartitionHour(b.partitions.firstHour)],
      ['Last partition', formatPartitionHour(b.partitions.lastHour)],
      ['Partitions', String(b.partitions.count)],
      ['Watermark before', b.watermarkBefore === null ? NONE : formatPartitionHour(b.watermarkBefore)],
      ['Watermark reset to', formatPartitionHour(b.watermarkResetTo)],
      ['Total before', money(b.totalBefore)],
      ['Total after', money(b.totalAfter)],
      ['Difference', signedMoney(b.diff)],
      ['Announced at', instant(b.announcedAt)],
      ['Ran at', instant(b.ranAt)],
      ['Ran by', text(b.ranBy)],
      ['Finished at', instant(b.finishedAt)],
      ['State', b.state],
      ['Failure', text(b.failure)],
      ['Limit override', text(b.limitOverride)],
    ]),
    '',
    '## Signed figures touched',
    '',
  ];
  if (p.signedFigures.length === 0) {
    lines.push('No signed figure covers these partitions.');
  } else {
    lines.push(...table(
      ['Report', 'Period', 'Signed total', 'Signed by', 'Signed at', 'Table total before', 'Report after', 'Difference'],
      p.signedFigures.map((s) => [s.report, s.period, money(s.signedTotal), s.signedBy, instant(s.signedAt),
        money(s.tableTotalBefore), money(s.reportAfter), signedMoney(s.diff)]), [2, 5, 6, 7]));
  }
  lines.push(
    '',
    '## Partitions',
    '',
    ...table(
      ['Hour', 'Rows before', 'Rows after', 'Total before', 'Total after', 'Difference', 'Checksum before', 'Checksum after', 'Recomputed at'],
      p.partitions.map((t) => [formatPartitionHour(t.hour), String(t.rowsBefore), text(t.rowsAfter), money(t.totalBefore), money(t.totalAfter),
        signedMoney(t.diff), t.checksumBefore, text(t.checksumAfter), instant(t.recomputedAt)]), [1, 2, 3, 4, 5]),
    '',
    '## Consumers, in dependency order',
    '',
    ...table(
      ['Rank', 'Consumer', 'Kind', 'Owner', 'Rule', 'Depends on', 'Read directly', 'Partitions read', 'Gate', 'Acknowledged at', 'Acknowledged by',
        'Overridden by', 'Overridden at', 'Override reason'],
      p.consumers.map((c) => [String(c.dependencyRank), c.name, c.kind, c.owner, c.rule, c.dependsOn.join(', '), c.readDirectly ? 'yes' : 'no',
        String(c.partitionsRead), c.gate, instant(c.acknowledgedAt), text(c.acknowledgedBy), text(c.overriddenBy), instant(c.overriddenAt),
        text(c.overrideReason)]), [0, 7]),
    '',
    '## Steps',
    '',
  );
  if (p.steps.length === 0) {
    lines.push('No steps: the backfill never got past its gate.');
  } else {
    lines.push(...table(
      ['Step', 'Key', 'Status', 'Attempts', 'Started at', 'Finished at', 'Error'],
      p.steps.map((s) => [s.kind, s.key, s.status, String(s.attempts), instant(s.startedAt), instant(s.finishedAt), text(s.error)]), [3]));
  }
  lines.push(
    '',
    '## Timeline',
    '',
    ...table(['#', 'At', 'Actor', 'Kind', 'Detail'],
      p.timeline.map((e) => [String(e.id), formatInstant(e.at), e.actor, e.kind, formatDetail(e.detail)]), [0]),
    '',
  );
  return lines.join('\n');
}

export function incidentPackageFiles(p: IncidentPackage): { filename: string; title: string; content: string }[] {
  const title = `Backfill #${p.backfill.id} incident package (${p.backfill.pipeline})`;
  return [
    { filename: `backfill-${p.backfill.id}-incident.md`, title, content: incidentPackageMarkdown(p) },
    { filename: `backfill-${p.backfill.id}-incident.json`, title: `${title}, JSON`, content: incidentPackageJson(p) },
  ];
}
