import type { BackfillRow } from '../db/backfills.js';
import type { TimelineEvent } from '../db/events.js';
import type { People } from '../db/people.js';
import { subtractMoney } from '../core/money.js';
import type { Plan } from '../core/identify/plan.js';
import { sum, type PrunedBackfill, type RetentionReport, type StoredRows } from '../core/recovery/retention.js';
import { describeSecondApproval, describeSize, formatBytes, formatCount } from '../core/identify/sizing.js';
import type { PaidAgainstAnswer } from '../core/finance/paidAgainst.js';
import { describeState } from '../core/states.js';
import type { BackfillReport } from '../core/file/status.js';
import { waitingOn } from './waiting.js';
import type { TickResult } from '../core/recompute/tick.js';
import type { Notice } from '../core/notices.js';
import { noticeText } from './notices.js';
import { formatHour, formatHourRange, formatMoney, formatSignedMoney, formatTime, moneyOrNone, nameMentions, terminalPerson, timeOrNone } from './format.js';
import { terminalText, unescapeSlack } from '../markup.js';

// Plain-text views for the CLI and the demo. Pure: data in, text out. No Slack markup: people by the names
// they go by (backfill.people), else by their id; colour only when the caller says the output is a terminal.

/** How the text shows people, and whether it colours differences. */
export interface TextStyle {
  people: People;
  colour: boolean;
}

export const PLAIN: TextStyle = { people: new Map(), colour: false };

/**
 * The data a view renders with every string in it (a reason, a name, a failure, another system's answer) without
 * control characters: an ESC from outside must not move the cursor, recolour or hide what follows, and a bidi
 * override must not make a line read differently from what it holds. Cleaned as data, before the view adds its
 * own colours.
 */
function clean<T>(value: T): T {
  if (typeof value === 'string') return terminalText(value) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => clean(item)) as T;
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, clean(item)])) as T;
  }
  return value;
}

/** A person as a terminal shows them: "Settlement lead", or "@U07SETTLE" before the bot has learned a name. */
export function person(id: string, style: TextStyle): string {
  return terminalPerson(id, style.people);
}

/**
 * Text the core writes once in Slack's markup (an announcement, a refusal) as a terminal shows it: mentions as
 * names, channels as #name, links as "label (url)", *bold* bold on a colour terminal and plain otherwise.
 */
export function fromSlackMarkup(text: string, style: TextStyle): string {
  // The bot's own markup first; then the entities outside text was escaped with (src/markup.ts) become the
  // characters typed, which a terminal shows as they are, without control characters.
  const translated = nameMentions(text, (id) => person(id, style))
    .replace(/<#([CG][A-Z0-9]+)(?:\|([^>]*))?>/g, (_, id: string, name: string | undefined) => `#${name || id}`)
    .replace(/<(https?:\/\/[^|>]+)\|([^>]+)>/g, (_, url: string, label: string) => `${label} (${url})`);
  return terminalText(unescapeSlack(translated))
    .replace(/(^|[\s(])\*([^*\n]+)\*(?=[\s.,;:)]|$)/g, (_, before: string, bold: string) => `${before}${style.colour ? `\u001b[1m${bold}\u001b[22m` : bold}`);
}

/** What the core tells someone (src/core/notices.ts), as a terminal shows it: names, no Slack markup. */
export function terminalNoticeText(notice: Notice, style: TextStyle): string {
  if (notice.kind === 'recorded') return fromSlackMarkup(notice.text, style);
  return noticeText(clean(notice), (id) => person(id, style), terminalText, terminalText);
}

/** A signed difference, red when it went down and green when up, on a terminal. */
function difference(amount: string, style: TextStyle): string {
  const text = formatSignedMoney(amount);
  if (!style.colour || /^0(\.0+)?$/.test(amount.replace('-', ''))) return text;
  return `${text.startsWith('−') ? '\u001b[31m' : '\u001b[32m'}${text}\u001b[39m`;
}

const money = moneyOrNone;
const when = timeOrNone;

export function renderPlan(raw: Plan, style: TextStyle = PLAIN): string {
  const plan = clean(raw);
  const { identified } = plan;
  const lines = [
    `Plan: ${plan.pipeline.name}, ${identified.hours.length} partition(s), ${formatHourRange(identified.firstHour, identified.lastHour)}`,
    ...identified.hours.map((hour) => `  replace ${formatHour(hour)}`),
    ...identified.skipped.map((s) => `  leave   ${formatHour(s.hour)}: ${s.why}`),
    `Watermark: ${identified.watermarkBefore ? formatHour(identified.watermarkBefore) : 'none'} → ${formatHour(identified.watermarkResetTo)}`,
    `Total over ${plan.days.join(', ')}: ${formatMoney(plan.totalBefore)} now; expected direction: ${plan.direction}`,
    'Readers, in dependency order:',
    ...plan.readers.map((r) => `  ${r.dependencyRank}. ${r.consumer} (${r.kind}) owner ${person(r.owner, style)}, told ${r.notifyRule}` +
      `${r.readDirectly ? `, read ${r.partitionsRead}` : `, via ${r.dependsOn.join(', ')}`}`),
    'Signed figures affected:',
    ...(plan.signed.length ? plan.signed.map((f) => `  ${f.report} ${f.period}: ${formatMoney(f.total)} signed by ${person(f.signedBy, style)} at ${formatTime(f.signedAt)}`) : ['  none']),
    `Waits for acknowledgement from: ${plan.gateOwners.length ? plan.gateOwners.map((o) => `${person(o, style)}`).join(', ') : 'nobody (no reader asked to be told before)'}`,
    ...(plan.size ? [`Size: ${describeSize(plan.size, plan.pipeline.name)}`, `Second operator's approval: ${describeSecondApproval(plan.size)}`] : []),
  ];
  return lines.join('\n');
}

export function renderStatus(raw: BackfillReport, style: TextStyle = PLAIN): string {
  const report = clean(raw);
  const { backfill } = report;
  const lines = [
    `Backfill #${backfill.id} of ${backfill.pipeline}: ${describeState(backfill.state)}${backfill.failure ? ` (${backfill.failure})` : ''}`,
    `  partitions   ${backfill.partitionCount}, ${formatHourRange(backfill.firstHour, backfill.lastHour)}`,
    `  reason       ${backfill.reason}`,
    `  requested by ${person(backfill.requestedBy, style)}`,
    `  now          ${waitingOn(report, (id) => person(id, style), terminalText, terminalText)}`,
    '  gate:',
    ...report.consumers.map((c) => `    ${c.consumer} ${person(c.owner, style)} (${c.notifyRule}): ${gateWord(c, style)}`),
    ...(backfill.needsSecondApproval ? [`    second operator's approval (size): ${report.secondApproval
      ? `approved by ${person(report.secondApproval.operator, style)} at ${formatTime(report.secondApproval.at)}` : 'not given'}`] : []),
  ];
  const steps = report.steps;
  if (steps.length) {
    const done = (kind: string) => steps.filter((s) => s.kind === kind && s.status === 'done').length;
    const all = (kind: string) => steps.filter((s) => s.kind === kind).length;
    lines.push(`  progress     staged ${done('stage')} of ${all('stage')}, published ${done('publish')} of ${all('publish')}, replays ${done('replay')} of ${all('replay')}, compare ${done('compare') ? 'done' : 'pending'}`);
    if (backfill.pausedReason) lines.push(`  paused       ${backfill.pausedReason}`);
    if (backfill.stoppedBy) lines.push(`  stopped by   ${person(backfill.stoppedBy, style)}: ${backfill.stopReason ?? ''}`);
  }
  lines.push(renderLogRow(backfill, style));
  return lines.join('\n');
}

function gateWord(c: BackfillReport['consumers'][number], style: TextStyle): string {
  if (c.notifyRule === 'after') return 'told after the run';
  if (c.ackedAt) return `acknowledged ${formatTime(c.ackedAt)}`;
  if (c.overriddenBy) return `overridden by ${person(c.overriddenBy, style)}: ${c.overrideReason ?? ''}`;
  if (c.undeliverable) return `cannot be reached (Slack: ${c.undeliverable}); needs a delegate or an override`;
  return 'waiting';
}

/** The backfill log row, as finance reads it. */
function renderLogRow(raw: BackfillRow, style: TextStyle = PLAIN): string {
  const backfill = clean(raw);
  return [
    `  total before ${money(backfill.totalBefore)}`,
    `  total after  ${money(backfill.totalAfter)}`,
    `  difference   ${backfill.diff === null ? '—' : difference(backfill.diff, style)}`,
    `  announced at ${when(backfill.announcedAt)}`,
    `  ran at       ${when(backfill.ranAt)}${backfill.ranBy ? ` by ${person(backfill.ranBy, style)}` : ''}`,
    `  finished at  ${when(backfill.finishedAt)}`,
  ].join('\n');
}

export function renderDiff(raw: BackfillReport, style: TextStyle = PLAIN): string {
  const report = clean(raw);
  const { backfill } = report;
  const lines = [`Backfill #${backfill.id} diff (${backfill.pipeline}, ${formatHourRange(backfill.firstHour, backfill.lastHour)})`];
  for (const figure of report.signed) {
    lines.push(`  ${figure.report} ${figure.period}: signed ${money(figure.signedTotal)} (${person(figure.signedBy, style)}, ${formatTime(figure.signedAt)}) → now ${money(figure.reportAfter)}, difference ${figure.diff === null ? '—' : difference(figure.diff, style)}`);
  }
  lines.push(renderLogRow(backfill, style));
  const unavailable = report.targets.filter((t) => t.status === 'unavailable').map((t) => formatHour(t.partitionHour));
  if (unavailable.length) lines.push(`  unavailable  ${unavailable.join(', ')} (source missing; left as it was, nothing invented)`);
  lines.push('  replays in order:');
  for (const step of report.steps.filter((s) => s.kind === 'replay')) {
    lines.push(`    ${step.key}: ${step.status}${step.finishedAt ? ` at ${formatTime(step.finishedAt)}` : ''}${step.error ? ` (${step.error})` : ''}`);
  }
  lines.push('  partition            rows before → after   total before → after          difference');
  for (const t of report.targets) {
    const diff = t.totalAfter === null ? '—' : difference(subtractMoney(t.totalAfter, t.totalBefore), style);
    lines.push(`    ${formatHour(t.partitionHour)}   ${String(t.rowsBefore).padStart(5)} → ${String(t.rowsAfter ?? '—').padEnd(5)}   ` +
      `${money(t.totalBefore).padStart(12)} → ${money(t.totalAfter).padEnd(12)}   ${diff}`);
  }
  return lines.join('\n');
}

export function renderBackfillList(raw: BackfillRow[], style: TextStyle = PLAIN): string {
  const backfills = clean(raw);
  if (backfills.length === 0) return 'No backfills yet.';
  return backfills.map((b) => `#${b.id} ${b.pipeline} ${formatHourRange(b.firstHour, b.lastHour)} ${b.state}` +
    ` before ${money(b.totalBefore)} after ${money(b.totalAfter)} diff ${b.diff === null ? '—' : difference(b.diff, style)} by ${person(b.requestedBy, style)}`).join('\n');
}

/** Who did it: the actor, and when they used someone else's rights, for whom and why. */
function describeActor(raw: Pick<TimelineEvent, 'actor' | 'onBehalfOf' | 'onBehalfReason'>, style: TextStyle = PLAIN): string {
  const event = clean(raw);
  return event.onBehalfOf ? `${person(event.actor, style)} on behalf of ${person(event.onBehalfOf, style)} (${event.onBehalfReason ?? ''})` : person(event.actor, style);
}

export function renderTimeline(events: TimelineEvent[], style: TextStyle = PLAIN): string {
  // JSON escapes C0 controls but neither C1 nor the bidi overrides: the line is cleaned as a whole.
  return events.map((e) => `${formatTime(e.at)}  ${describeActor(e, style).padEnd(14)} ${terminalText(`${e.kind.padEnd(14)} ${JSON.stringify(e.detail)}`)}`).join('\n');
}

export function renderTick(raw: TickResult, style: TextStyle = PLAIN): string {
  const result = clean(raw);
  const lines = [
    result.processed.length
      ? `Processed ${result.processed.length} partition(s), ${formatHour(result.processed[0] as Date)} – ${formatHour(result.processed.at(-1) as Date)}.`
      : 'Nothing to process.',
    `Watermark: ${result.watermark ? formatHour(result.watermark) : 'none'} (stopped: ${result.stoppedBecause}).`,
  ];
  if (result.staleReaders.length) {
    const byConsumer = new Map<string, { owner: string; n: number }>();
    for (const r of result.staleReaders) {
      const entry = byConsumer.get(r.consumer) ?? { owner: r.owner, n: 0 };
      entry.n += 1;
      byConsumer.set(r.consumer, entry);
    }
    lines.push('Read these hours before they landed; to be told the numbers are now real:');
    for (const [consumer, { owner, n }] of byConsumer) lines.push(`  ${consumer} ${person(owner, style)} (${n} partition(s))`);
  }
  return lines.join('\n');
}

export function renderPaidAgainst(raw: PaidAgainstAnswer, style: TextStyle = PLAIN): string {
  const answer = clean(raw);
  const lines = [`What we paid against: ${answer.report} ${answer.period}`];
  for (const s of answer.signatures) lines.push(`  signed ${formatMoney(s.total)} by ${person(s.signedBy, style)} at ${formatTime(s.signedAt)}`);
  if (answer.corrections.length === 0) lines.push('  no corrections since');
  for (const c of answer.corrections) {
    lines.push(`  backfill #${c.backfillId} (${c.reason}): ${formatMoney(c.corrected)}, ${difference(c.diffFromSigned, style)} against the signed ${formatMoney(c.signedTotal)}; ` +
      `announced ${formatTime(c.announcedAt)}, ran ${c.ranAt ? formatTime(c.ranAt) : '—'} by ${person(c.ranBy ?? '?', style)}, ` +
      `acknowledged by ${c.acknowledgedBy.map((a) => `${person(a.owner, style)}`).join(', ') || 'nobody'}`);
  }
  lines.push(`  current: ${formatMoney(answer.current.total)} (${answer.current.source === 'signature' ? 'the latest signature' : `after backfill #${answer.current.backfillId ?? '?'}`})`);
  return lines.join('\n');
}

const storedRows = (tables: StoredRows[]) =>
  `${formatCount(sum(tables, 'rows'))} rows, ${formatBytes(sum(tables, 'bytes'))} (${tables.map((t) => `${t.table} ${formatCount(t.rows)}`).join(', ')})`;

/** What retention would drop, by backfill: what the job drops, and what only --prune does. */
export function renderRetention(raw: RetentionReport): string {
  const report = clean(raw);
  const lines = [`Retention (RETENTION_DAYS ${report.retentionDays}, as of ${formatTime(report.asOf)}):`];
  for (const item of report.items) {
    const verb = item.action === 'drop' ? 'drops' : 'keeps unless --prune';
    lines.push(`  #${item.backfillId} ${item.pipeline} (${item.state}): ${verb} ${item.kind} rows, ${storedRows(item.tables)}`, `      ${item.why}`);
  }
  if (report.items.length === 0) lines.push('  nothing to drop');
  lines.push(`${report.kept} other backfill(s) keep all their rows (in flight, or finished within ${report.retentionDays} days).`);
  const confirm = report.items.filter((item) => item.action === 'confirm').length;
  if (confirm > 0) lines.push(`\`backfill retention --prune\` drops all of the above, including the ${confirm} set(s) of rows a rollback still needs.`);
  return lines.join('\n');
}

export function renderPruned(raw: PrunedBackfill[]): string {
  const pruned = clean(raw);
  if (pruned.length === 0) return 'Nothing was dropped: no stored rows are past retention.';
  const all = pruned.flatMap((p) => p.tables);
  return [
    ...pruned.map((p) => `  #${p.backfillId} ${p.pipeline}: dropped ${p.kinds.join(' and ')} rows, ${storedRows(p.tables)}`),
    `Dropped ${formatCount(sum(all, 'rows'))} rows (${formatBytes(sum(all, 'bytes'))}) of ${pruned.length} backfill(s); each is in its timeline (pruned).`,
  ].join('\n');
}
