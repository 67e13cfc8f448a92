import type { IncidentEvent, IncidentPackage, JsonValue } from '../core/file/incidentPackage.js';
import { INCIDENT_PACKAGE_FORMAT } from '../core/file/incidentPackage.js';
import { formatHour, moneyOrNone, nameMentions, NONE, recordPerson, signedMoneyOrNone } from './format.js';
import { formatDuration } from './costs.js';
import { noticeText } from './notices.js';
import { redact, redactDeep } from '../redaction.js';
import { terminalText } from '../markup.js';

// The incident package rendered: JSON, the record itself, and Markdown, the same record for people to read
// (GitHub-flavoured tables; people by name and id; times to the second, UTC).
//
// Both are redacted as rendered (src/redaction.ts): the package is a file that leaves, to Slack or to whoever
// the CLI's output is given, and it gathers every stored text of a backfill in one place.

/** The package as pretty JSON; `format` comes first so a reader knows what it holds before reading on. */
export function incidentPackageJson(p: IncidentPackage): string {
  const { format: _format, ...rest } = p;
  // Redacted string by string, so the file stays JSON. JSON escapes C0 controls but not DEL, C1 or the bidi
  // overrides: those are written as \u escapes too, the same JSON, and nothing a terminal acts on when printed.
  const json = JSON.stringify(redactDeep({ format: INCIDENT_PACKAGE_FORMAT, ...rest }), null, 2)
    .replace(/[\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return `${json}\n`;
}

// ---------------------------------------------------------------------------------------------------------
// Markdown

/** An instant to the second: 2026-11-16 07:00:00 UTC. */
function formatInstant(isoTime: string): string {
  const at = new Date(isoTime);
  return `${at.toISOString().slice(0, 10)} ${at.toISOString().slice(11, 19)} UTC`;
}

/** A partition hour: 2026-11-15 05:00. */
function formatPartitionHour(isoTime: string): string {
  return formatHour(new Date(isoTime));
}

/**
 * Outside text (a reason, a name, another system's answer) in the Markdown: what could make it a link, an image,
 * HTML or code backslash-escaped (`[`, `]`, a backtick, a backslash, and a `<` that would open a tag, a comment
 * or an autolink), so a reader's viewer shows it as typed; the bot's own `<@U…>` mentions stay as they are. No
 * control characters either: the file is also printed on a terminal (`backfill export`).
 */
function markdownText(text: string): string {
  return terminalText(text).replace(/[\\`[\]]|<(?=[A-Za-z/!?])/g, (c) => `\\${c}`);
}

/** A table cell: outside text escaped (markdownText), `|` escaped, line breaks kept as <br>, empty shown as a dash. */
function markdownCell(text: string): string {
  const escaped = markdownText(text).replaceAll('|', '\\|').replace(/\r?\n/g, '<br>').trim();
  return escaped === '' ? NONE : escaped;
}

/** An event's detail on one line: `key: value; key: value`, nested objects as `{key: value, …}`. */
function formatDetail(detail: { [key: string]: JsonValue }): string {
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

const money = moneyOrNone;
const signedMoney = signedMoneyOrNone;
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

/** A person as the record names them: "Settlement lead (U07SETTLE)" when the bot knows the name, else the id. */
function who(p: IncidentPackage, id: string | null): string {
  return id === null ? NONE : recordPerson(id, new Map(Object.entries(p.people)));
}

/** The timeline's actor: who did it and, when they used someone else's rights, for whom and why. */
function eventActor(p: IncidentPackage, e: IncidentEvent): string {
  return e.onBehalfOf === null ? who(p, e.actor) : `${who(p, e.actor)} on behalf of ${who(p, e.onBehalfOf)}: ${e.onBehalfReason ?? ''}`;
}

export function incidentPackageMarkdown(record: IncidentPackage): string {
  // The record redacted before it is escaped (an escaped secret is no longer the value to look for), and the
  // page again after, for what the rendering put together.
  const p = redactDeep(record);
  const b = p.backfill;
  return redact([
    `# Backfill #${b.id} incident package: ${markdownText(b.pipeline)}, ${formatPartitionHour(b.partitions.firstHour)} – ${formatPartitionHour(b.partitions.lastHour)}`,
    '',
    `Generated ${formatInstant(p.generatedAt)} from the backfill log and its timeline (${p.format}). All times UTC; ` +
      `money in the pipeline's base currency. The JSON file alongside holds the same record.`,
    '',
    ...logRowSection(p),
    ...costSection(p),
    ...signedSection(p),
    ...partitionsSection(p),
    ...consumersSection(p),
    ...toldSection(p),
    ...stepsSection(p),
    ...timelineSection(p),
  ].join('\n'));
}

function logRowSection(p: IncidentPackage): string[] {
  const b = p.backfill;
  return ['## Log row', '', ...table(['Field', 'Value'], [
    ['Backfill', `#${b.id}`],
    ['Pipeline', b.pipeline],
    ['Reason', b.reason],
    ['Requested by', who(p, b.requestedBy)],
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
    ['Ran by', who(p, b.ranBy)],
    ['Finished at', instant(b.finishedAt)],
    ['State', b.state],
    ['Failure', text(b.failure)],
    ['Limit override', text(b.limitOverride)],
  ]), ''];
}

/** What the backfill cost, as filed with its log row; durations also in milliseconds, as the JSON holds them. */
function costSection(p: IncidentPackage): string[] {
  const c = p.cost;
  if (c === null) return ['## Cost', '', 'Not filed yet: the cost is filed when the backfill finishes.', ''];
  const duration = (ms: number) => `${formatDuration(ms)} (${ms} ms)`;
  return ['## Cost', '', ...table(['Spent', 'Amount'], [
    ['Rows rewritten', String(c.rowsRewritten)],
    ['Partitions published', String(c.partitions)],
    ['Replays run', String(c.replays)],
    ['People told', String(c.peopleTold)],
    ['Waited for acknowledgements', duration(c.ackWaitMs)],
    ['Compute time', duration(c.computeMs)],
    ['Signed figures moved', String(c.signedFiguresMoved)],
    ['Filed at', formatInstant(c.filedAt)],
  ], [1]), ''];
}

function signedSection(p: IncidentPackage): string[] {
  if (p.signedFigures.length === 0) return ['## Signed figures touched', '', 'No signed figure covers these partitions.', ''];
  return ['## Signed figures touched', '', ...table(
    ['Report', 'Period', 'Signed total', 'Signed by', 'Signed at', 'Table total before', 'Report after', 'Difference'],
    p.signedFigures.map((s) => [s.report, s.period, money(s.signedTotal), who(p, s.signedBy), instant(s.signedAt),
      money(s.tableTotalBefore), money(s.reportAfter), signedMoney(s.diff)]), [2, 5, 6, 7]), ''];
}

function partitionsSection(p: IncidentPackage): string[] {
  return ['## Partitions', '', ...table(
    ['Hour', 'Rows before', 'Rows after', 'Total before', 'Total after', 'Difference', 'Checksum before', 'Checksum after', 'Recomputed at'],
    p.partitions.map((t) => [formatPartitionHour(t.hour), String(t.rowsBefore), text(t.rowsAfter), money(t.totalBefore), money(t.totalAfter),
      signedMoney(t.diff), t.checksumBefore, text(t.checksumAfter), instant(t.recomputedAt)]), [1, 2, 3, 4, 5]), ''];
}

/** How long the owner took: "45 min 00 s (2700 s)", counted from when their announcement went out. */
function waited(c: IncidentPackage['consumers'][number]): string {
  return c.acknowledgedAfterSeconds === null ? NONE : `${formatDuration(c.acknowledgedAfterSeconds * 1000)} (${c.acknowledgedAfterSeconds} s)`;
}

/** The owner's escalation path, one line per step: whom it named, when it was due, and what came of it. */
function escalationLines(p: IncidentPackage, c: IncidentPackage['consumers'][number]): string {
  if (c.escalation.length === 0) return NONE;
  return c.escalation.map((e) => {
    const outcome = e.status === 'sent' ? `sent at ${instant(e.sentAt)} to ${e.reached.map((id) => who(p, id)).join(', ')}`
      : e.status === 'stopped' ? `stopped (${e.stopReason ?? ''}) at ${instant(e.stoppedAt)}` : e.status;
    return `#${e.step} after ${e.after} to ${e.to}${e.names === null ? '' : ` ${e.names}`}: ${outcome}; due ${instant(e.dueAt)}${e.note === null ? '' : `; ${e.note}`}`;
  }).join('\n');
}

function consumersSection(p: IncidentPackage): string[] {
  return ['## Consumers, in dependency order', '', ...table(
    ['Rank', 'Consumer', 'Kind', 'Owner', 'Rule', 'Depends on', 'Read directly', 'Partitions read', 'Gate', 'Announcement went out', 'Acknowledged at', 'Acknowledged by',
      'Acknowledged after', 'Overridden by', 'Overridden at', 'Override reason', 'Escalation'],
    p.consumers.map((c) => [String(c.dependencyRank), c.name, c.kind, who(p, c.owner), c.rule, c.dependsOn.join(', '), c.readDirectly ? 'yes' : 'no',
      String(c.partitionsRead), c.gate, instant(c.announcementSentAt), instant(c.acknowledgedAt), who(p, c.acknowledgedBy), waited(c), who(p, c.overriddenBy),
      instant(c.overriddenAt), text(c.overrideReason), escalationLines(p, c)]), [0, 7]), ''];
}

/** Each owner's announcement, worded from the facts stored when the backfill was created, people by name and id. */
function toldSection(p: IncidentPackage): string[] {
  // A name from the people table is Slack's display name: outside text too.
  const name = (id: string) => markdownText(who(p, id));
  const words = (c: IncidentPackage['consumers'][number]) => (c.told.kind === 'recorded'
    ? markdownText(nameMentions(c.told.text, name))
    : noticeText(c.told, name, markdownText, markdownText));
  return ['## What each owner was told', '', ...p.consumers.flatMap((c) => [
    `### ${markdownText(c.name)}: ${name(c.owner)}, told ${c.rule === 'before' ? 'before the run' : 'after the run'}`, '',
    ...words(c).split('\n').map((line) => `> ${line}`), '',
  ])];
}

function stepsSection(p: IncidentPackage): string[] {
  if (p.steps.length === 0) return ['## Steps', '', 'No steps: the backfill never got past its gate.', ''];
  return ['## Steps', '', ...table(
    ['Step', 'Key', 'Status', 'Attempts', 'Started at', 'Finished at', 'Error'],
    p.steps.map((s) => [s.kind, s.key, s.status, String(s.attempts), instant(s.startedAt), instant(s.finishedAt), text(s.error)]), [3]), ''];
}

function timelineSection(p: IncidentPackage): string[] {
  return ['## Timeline', '', ...table(['#', 'At', 'Actor', 'Kind', 'Detail'],
    p.timeline.map((e) => [String(e.id), formatInstant(e.at), eventActor(p, e), e.kind, formatDetail(e.detail)]), [0]), ''];
}

export function incidentPackageFiles(p: IncidentPackage): { filename: string; title: string; content: string }[] {
  const title = `Backfill #${p.backfill.id} incident package (${p.backfill.pipeline})`;
  return [
    { filename: `backfill-${p.backfill.id}-incident.md`, title, content: incidentPackageMarkdown(p) },
    { filename: `backfill-${p.backfill.id}-incident.json`, title: `${title}, JSON`, content: incidentPackageJson(p) },
  ];
}
