import type { types } from '@slack/bolt';
import type { Notice } from '../core/notices.js';
import { announcementParts, backticks, slackNoticeText } from './notices.js';
import type { BackfillConsumerRow, BackfillRow } from '../db/backfills.js';
import type { PaidAgainstAnswer } from '../core/finance/paidAgainst.js';
import type { ReconciliationRow } from '../db/reconciliations.js';
import { subtractMoney } from '../core/money.js';
import type { Plan } from '../core/identify/plan.js';
import { describeSecondApproval, describeSize } from '../core/identify/sizing.js';
import { describeState } from '../core/states.js';
import { isCatalogPause } from '../core/catalog/catalogPause.js';
import type { BackfillReport } from '../core/file/status.js';
import { waitingOn } from './waiting.js';
import { backfillProgress, slackProgress } from './progress.js';
import { formatHour, formatHourRange, formatMoney, formatSignedMoney, formatTime, moneyOrNone, slackPerson } from './format.js';
import type { CostSummary } from '../core/file/costs.js';
import { costsBlocks } from './costs.js';
import { statusActionsBlocks } from './statusActions.js';
import { slackText } from '../markup.js';
import { codeSections, context, fit, header, limitBlocks, LIMITS, messageText, mrkdwn, section, sections, type Block } from './layout.js';

// Block Kit, built by pure functions: data in, blocks out. Listeners and the messenger never inline JSON.

export const ActionId = {
  Acknowledge: 'backfill_acknowledge',
  Hold: 'backfill_hold',
} as const;

/** What a button carries: an opaque reference. Who pressed it and what they may do is checked on the server. */
export interface ButtonReference {
  backfillId: number;
  consumer: string;
}

export function encodeButtonValue(reference: ButtonReference): string {
  return JSON.stringify({ b: reference.backfillId, c: reference.consumer });
}

const money = moneyOrNone;
/** Outside text in a sentence: escaped, so nothing in it becomes a broadcast, a mention or a link. */
const outside = slackText;

export interface Message {
  text: string;
  blocks: Block[];
}

/**
 * Longest a reason is shown in a gate line: an override's reason is repeated for every consumer it opened, so
 * there it is bounded (the whole is in the timeline and the incident package).
 */
const GATE_REASON_SHOWN = 300;
/** Longest a failure, paused or stopped reason is shown in the status message; the whole is in `status` and the package. */
const WHY_SHOWN = 1000;

/**
 * A notice in blocks. An announcement is laid out in its parts: what is replaced, the reason in a block of its
 * own (bounded, saying how much was left out, if it could ever be longer than a section), then the facts and the
 * ask, so that no reason, however long, can push the signed figures, the expected total or "Please acknowledge
 * or hold" out of the message.
 */
function noticeBlocks(notice: Notice, lead = ''): Block[] {
  if (notice.kind !== 'announcement') return sections(lead, slackNoticeText(notice).split('\n'));
  const parts = announcementParts(notice.facts, slackPerson, slackText);
  return [section(`${lead}${parts.title}`), section(parts.why), ...sections('', parts.facts), ...sections('', parts.ask)];
}

/** The DM an owner gets: the generated announcement with Acknowledge and Hold. */
export function announcementMessage(reference: ButtonReference, notice: Notice, options: { reminder?: boolean } = {}): Message {
  const value = encodeButtonValue(reference);
  const lead = options.reminder ? '*Reminder: still waiting for your acknowledgement.*\n' : '';
  return {
    text: `${options.reminder ? 'Reminder: ' : ''}backfill #${reference.backfillId} needs your acknowledgement (${outside(reference.consumer)})`,
    blocks: limitBlocks([
      header(`Backfill #${reference.backfillId}: please acknowledge`),
      ...noticeBlocks(notice, lead),
      {
        type: 'actions',
        block_id: `announce_${reference.backfillId}_${reference.consumer}`.slice(0, 255),
        elements: [
          { type: 'button', action_id: ActionId.Acknowledge, style: 'primary', value, text: { type: 'plain_text', text: 'Acknowledge' } },
          {
            type: 'button', action_id: ActionId.Hold, style: 'danger', value, text: { type: 'plain_text', text: 'Hold' },
            confirm: {
              title: { type: 'plain_text', text: 'Hold this backfill?' },
              text: mrkdwn('Nothing runs until you acknowledge. The incident channel is told you asked to wait.'),
              confirm: { type: 'plain_text', text: 'Hold' },
              deny: { type: 'plain_text', text: 'Cancel' },
            },
          },
        ],
      },
    ], LIMITS.messageBlocks, `\`/backfill status ${reference.backfillId}\` shows the whole backfill.`),
  };
}

/**
 * A delegate's DM when the owner has not answered (src/views/waiting.ts words `why`): the owner's announcement,
 * with its Acknowledge and Hold, which answer in the owner's place.
 */
export function escalationMessage(reference: ButtonReference, notice: Notice, why: string): Message {
  const announcement = announcementMessage(reference, notice);
  return { text: fit(why, LIMITS.sectionText), blocks: limitBlocks([section(why), ...announcement.blocks], LIMITS.messageBlocks, `\`/backfill status ${reference.backfillId}\` shows the whole backfill.`) };
}

/** The announcement after the owner answered: the buttons give way to what they did. */
export function answeredAnnouncementMessage(reference: ButtonReference, notice: Notice, answer: string): Message {
  return {
    text: `backfill #${reference.backfillId}: ${answer}`,
    blocks: limitBlocks([header(`Backfill #${reference.backfillId}`), ...noticeBlocks(notice), context(answer)], LIMITS.messageBlocks,
      `\`/backfill status ${reference.backfillId}\` shows the whole backfill.`),
  };
}

/** "next try in 3 s" (or "trying again now" once that time has come), against when the view is rendered. */
function nextTry(retryAt: Date, now: Date): string {
  const seconds = Math.ceil((retryAt.getTime() - now.getTime()) / 1000);
  return seconds > 0 ? `next try in ${seconds} s` : 'trying again now';
}

function gateLine(c: BackfillConsumerRow, now: Date): string {
  const who = `${outside(c.consumer)} ${slackPerson(c.owner)}`;
  if (c.notifyRule === 'after') return `${who}: told after the run`;
  if (c.ackedAt) return `:white_check_mark: ${who}: acknowledged ${formatTime(c.ackedAt)}`;
  if (c.overriddenBy) return `:warning: ${who}: overridden by ${slackPerson(c.overriddenBy)} (${outside(fit(c.overrideReason ?? '', GATE_REASON_SHOWN))})`;
  if (c.undeliverable) return `:no_entry: ${who}: cannot be reached (Slack: ${outside(c.undeliverable)}); needs a delegate or an override`;
  if (c.announceRetryAt && !c.messageTs) return `:hourglass: ${who}: being told: Slack is rate-limiting, ${nextTry(c.announceRetryAt, now)}`;
  return `:hourglass: ${who}: waiting`;
}

/**
 * The second operator's approval, for a backfill whose size needs one: who gave it and when, where the Approve
 * button stood; while nobody has, that it is still needed (the button offers it).
 */
function approvalLine(report: BackfillReport): string[] {
  const { backfill, secondApproval } = report;
  if (!backfill.needsSecondApproval) return [];
  const what = 'second operator\'s approval (size over the capacity limits)';
  if (secondApproval) return [`:white_check_mark: ${what}: approved by ${slackPerson(secondApproval.operator)} at ${formatTime(secondApproval.at)}`];
  return [backfill.state === 'announced' || backfill.state === 'held' ? `:hourglass: ${what}: waiting` : `${what}: not given`];
}

/** The gate, line by line: each reader's answer, then the second operator's approval when the size needs one. */
function gateLines(report: BackfillReport, now: Date): string[] {
  const lines = [...report.consumers.map((c) => gateLine(c, now)), ...approvalLine(report)];
  return report.consumers.length ? lines : ['no readers', ...lines];
}

/**
 * The one status message in the incident channel, re-rendered from the database on every change. `now` is
 * when it is rendered: the time left is estimated against it.
 */
export function statusMessage(report: BackfillReport, now: Date = new Date()): Message {
  const { backfill } = report;
  const progress = slackProgress(backfillProgress(report, now));
  const why = [
    backfill.failure ? `:x: ${outside(fit(backfill.failure, WHY_SHOWN))}` : '',
    backfill.pausedReason ? `:octagonal_sign: paused: ${outside(fit(backfill.pausedReason, WHY_SHOWN))}` : '',
    backfill.stoppedBy ? `:stop_sign: stopped by ${slackPerson(backfill.stoppedBy)}: ${outside(fit(backfill.stopReason ?? '', WHY_SHOWN))}` : '',
    backfill.rolledBackBy ? `:rewind: rolled back by ${slackPerson(backfill.rolledBackBy)}` : '',
  ].filter(Boolean);
  const title = `Backfill #${backfill.id} of ${backfill.pipeline}: ${describeState(backfill.state)}`;
  const blocks: Block[] = [
    header(title),
    section(`*${backfill.partitionCount} partitions*, ${formatHourRange(backfill.firstHour, backfill.lastHour)}\n*Asked by* ${slackPerson(backfill.requestedBy)}`),
    section(`*Why:* ${outside(backfill.reason)}`),
    ...sections('*Gate*', gateLines(report, now)),
    ...sections(`*Progress:* ${progress}`, [...why, waitingOn(report, slackPerson, backticks, outside)]),
    context(`total before ${money(backfill.totalBefore)} · announced ${formatTime(backfill.announcedAt)}${backfill.ranAt ? ` · ran ${formatTime(backfill.ranAt)}` : ''}`),
  ];
  // The actions possible now close the message, and never give way to a long gate (src/views/statusActions.ts).
  const actions = statusActionsBlocks(report);
  return {
    text: outside(title),
    blocks: [...limitBlocks(blocks, LIMITS.messageBlocks - actions.length, `\`/backfill log ${backfill.id}\` puts the whole backfill in the incident thread.`), ...actions],
  };
}

/**
 * How much of a message a per-partition listing in code blocks may take (the reconciliation's): Slack has refused
 * messages well below the documented per-block limits (`msg_blocks_too_long` at about 13,000 characters in all),
 * so the listing keeps to this and the rest of the message to what is left; what does not fit says where the whole is.
 */
const DIFF_TABLE_CHARS = 9000;

/**
 * Slack's table block has room for 100 rows, its column heads among them; Slack is known to show one table per
 * message, after the message's other blocks, whatever its place among them. Its cells are raw text (no markup, no mentions), so they hold
 * the bot's own hours and figures only; what people wrote stays in the sections around it.
 */
const TABLE_ROWS = 100;

/** A table block over the first rows that fit, and how many those are. */
interface Table {
  block: Block;
  shown: number;
}

function tableBlock(head: readonly string[], rows: readonly (readonly string[])[], align: readonly ('left' | 'right')[]): Table {
  const shown = rows.slice(0, TABLE_ROWS - 1);
  return {
    // A raw_text cell must hold a character: a missing value shows as the dash it shows as everywhere.
    block: { type: 'table', column_settings: align.map((side) => ({ align: side })), rows: [head, ...shown].map((row) => row.map((text) => ({ type: 'raw_text' as const, text: text || '—' }))) },
    shown: shown.length,
  };
}

/** What a message with a table shows: the table (last, where Slack shows it), the note when it cannot hold every row, and the rows as text. */
interface Tabled {
  table: Block | undefined;
  note: Block[];
  /** The rows as the message's top-level text lists them, for a client that does not render the table. */
  lines: string[];
}

/**
 * The per-partition diff: in the blocks, Slack's table alone (the same rows as code-fenced text beside it made
 * people read every figure twice), with a note when it cannot hold every partition; as text, for the message's
 * top-level text (notifications, screen readers, a client without tables), the fixed-width rows.
 */
function perPartition(report: BackfillReport, where: string): Tabled {
  const { backfill, targets } = report;
  if (targets.length === 0) return { table: undefined, note: [], lines: [] };
  const diffOf = (t: BackfillReport['targets'][number]) => (t.totalAfter === null ? '—' : formatSignedMoney(subtractMoney(t.totalAfter, t.totalBefore)));
  const grid = tableBlock(['Partition', 'Rows before', 'Rows after', 'Total before', 'Total after', 'Difference'],
    targets.map((t) => [formatHour(t.partitionHour), String(t.rowsBefore), t.rowsAfter === null ? '—' : String(t.rowsAfter), money(t.totalBefore), money(t.totalAfter), diffOf(t)]),
    ['left', 'right', 'right', 'right', 'right', 'right']);
  const note = grid.shown < targets.length
    ? [context(`:page_facing_up: The table holds the first ${grid.shown} of the ${targets.length} partitions (${formatHourRange(targets[0]?.partitionHour ?? backfill.firstHour, targets[grid.shown - 1]?.partitionHour ?? backfill.lastHour)}): ` +
      `a Slack table has room for ${TABLE_ROWS - 1}; ${where}.`)]
    : [];
  const lines = targets.map((t) =>
    `${formatHour(t.partitionHour)}  ${String(t.rowsBefore).padStart(4)} → ${String(t.rowsAfter ?? '—').padEnd(4)}  ${money(t.totalBefore).padStart(11)} → ${money(t.totalAfter).padStart(11)}  ${diffOf(t)}`);
  return { table: grid.block, note, lines };
}

/** The diff posted when the compare is done: what finance asks for, next to every correction. */
export function diffMessage(report: BackfillReport): Message {
  const { backfill } = report;
  const figures = report.signed.map((f) =>
    `*${outside(f.report)} ${outside(f.period)}*: signed *${money(f.signedTotal)}* by ${slackPerson(f.signedBy)} at ${formatTime(f.signedAt)} → now *${money(f.reportAfter)}*, difference *${f.diff === null ? '—' : formatSignedMoney(f.diff)}*`);
  const replays = report.steps.filter((s) => s.kind === 'replay').map((s, i) =>
    `${i + 1}. ${outside(s.key)}: ${s.status}${s.finishedAt ? ` at ${formatTime(s.finishedAt)}` : ''}`);
  const unavailable = report.targets.filter((t) => t.status === 'unavailable').map((t) => formatHour(t.partitionHour));
  const restored = report.targets.filter((t) => t.status === 'restored').map((t) => formatHour(t.partitionHour));
  const notes = [
    ...(unavailable.length ? [`:warning: *Unavailable* (source missing; left as it was, nothing invented): ${unavailable.join(', ')}`] : []),
    ...(backfill.state === 'rolled_back' || backfill.state === 'rolling_back'
      ? [`:rewind: *Rolled back* by ${slackPerson(backfill.rolledBackBy ?? '?')} at ${backfill.rolledBackAt ? formatTime(backfill.rolledBackAt) : '—'}: ${restored.join(', ')} hold their prior rows again; consumers replayed on them.`]
      : []),
  ];
  const title = backfill.state === 'rolled_back' ? 'rolled back' : 'diff';
  const lead: Block[] = [
    header(`Backfill #${backfill.id} ${title}: ${backfill.pipeline}, ${formatHourRange(backfill.firstHour, backfill.lastHour)}`),
    ...sections('', notes),
    ...sections('', figures),
    section([
      `*Partitions:* ${backfill.partitionCount}`,
      `*Total before:* ${money(backfill.totalBefore)}`,
      `*Total after:* ${money(backfill.totalAfter)}`,
      `*Difference:* ${backfill.diff === null ? '—' : formatSignedMoney(backfill.diff)}`,
      `*Announced at:* ${formatTime(backfill.announcedAt)}`,
      `*Ran at:* ${backfill.ranAt ? formatTime(backfill.ranAt) : '—'} by ${slackPerson(backfill.ranBy ?? backfill.requestedBy)}`,
      `*Finished at:* ${backfill.finishedAt ? formatTime(backfill.finishedAt) : '—'}`,
    ].join('\n')),
    ...sections('*Consumers re-triggered, in order*', replays.length ? replays : ['none']),
  ];
  const where = `the incident package has every one (\`/backfill log ${backfill.id}\` puts it in the incident thread)`;
  const partitions = perPartition(report, where);
  const summary = `Backfill #${backfill.id} ${title}: total ${money(backfill.totalBefore)} → ${money(backfill.totalAfter)} (${backfill.diff === null ? '—' : formatSignedMoney(backfill.diff)})`;
  const left = (count: number) => {
    const rest = report.targets.slice(report.targets.length - count);
    const inTable = report.targets.length <= TABLE_ROWS - 1 ? 'the table in the message holds them, and ' : '';
    return `${count} more partition(s), ${formatHourRange(rest[0]?.partitionHour ?? backfill.firstHour, rest.at(-1)?.partitionHour ?? backfill.lastHour)}, are not listed here: ${inTable}${where}.`;
  };
  return {
    text: messageText(summary, partitions.lines, left, { title: '*Per partition* (rows, total)', head: 'partition          rows          before →       after  difference' }),
    blocks: [
      ...limitBlocks([...lead, ...partitions.note], LIMITS.messageBlocks - (partitions.table ? 1 : 0), `the whole diff is in the incident package (\`/backfill log ${backfill.id}\`).`),
      ...(partitions.table ? [partitions.table] : []),
    ],
  };
}

export function planMessage(plan: Plan): Message {
  const { identified } = plan;
  const readers = plan.readers.map((r) => `${r.dependencyRank}. ${outside(r.consumer)} (${outside(r.kind)}), ${slackPerson(r.owner)}, told ${r.notifyRule}${r.readDirectly ? '' : `, via ${r.dependsOn.map(outside).join(', ')}`}`);
  const signed = plan.signed.map((f) => `${outside(f.report)} ${outside(f.period)}: *${formatMoney(f.total)}* signed by ${slackPerson(f.signedBy)} at ${formatTime(f.signedAt)}`);
  const skipped = identified.skipped.map((s) => `${formatHour(s.hour)}: ${outside(s.why)}`);
  const name = outside(plan.pipeline.name);
  return {
    text: `Plan: ${name}, ${identified.hours.length} partitions`,
    blocks: limitBlocks([
      header(`Plan (dry run): ${plan.pipeline.name}`),
      ...sections(`*${identified.hours.length} partitions*, ${formatHourRange(identified.firstHour, identified.lastHour)}`, skipped.length ? ['_left alone:_', ...skipped] : []),
      ...sections('*Readers, in dependency order*', readers.length ? readers : ['none']),
      ...sections('*Signed figures affected*', signed.length ? signed : ['none']),
      section(`*Watermark:* ${identified.watermarkBefore ? formatHour(identified.watermarkBefore) : 'none'} → ${formatHour(identified.watermarkResetTo)}\n` +
        `*Expected:* ${formatMoney(plan.totalBefore)} → ${formatMoney(plan.expectedTotalAfter)} (${plan.direction})`),
      ...sections('*Waits for:*', [plan.gateOwners.map((o) => `${slackPerson(o)}`).join(', ') || 'nobody']),
      ...(plan.size ? [section(`*Size:* ${outside(describeSize(plan.size, plan.pipeline.name))}\n*Second operator's approval:* ${outside(describeSecondApproval(plan.size))}`)] : []),
      context(`Plan #${plan.planId ?? '?'} (inputs ${plan.inputsHash.slice(0, 12)}). Nothing was written but the plan and an audit event. ` +
        `\`/backfill start plan ${plan.planId ?? '&lt;id&gt;'} &lt;reason&gt;\` runs exactly this, or refuses if its inputs change.`),
    ], LIMITS.messageBlocks, `the CLI's \`backfill plan\` shows the whole plan.`),
  };
}

/** "What did we pay against?": the signed figure first, then every correction, then what stands now. */
export function paidAgainstMessage(answer: PaidAgainstAnswer): Message {
  const signatures = answer.signatures.map((s, i) =>
    `${answer.signatures.length > 1 ? `${i + 1}. ` : ''}*${formatMoney(s.total)}*, signed by ${slackPerson(s.signedBy)} at ${formatTime(s.signedAt)}`);
  const people = (c: PaidAgainstAnswer['corrections'][number]) =>
    `   acknowledged by ${c.acknowledgedBy.map((a) => `${slackPerson(a.owner)} (${outside(a.consumer)}, ${formatTime(a.at)})`).join(', ') || 'nobody'}` +
    `${c.overriddenBy.length ? `; overridden by ${c.overriddenBy.map((o) => `${slackPerson(o.operator)} for ${outside(o.consumer)}: ${outside(fit(o.reason, GATE_REASON_SHOWN))}`).join(', ')}` : ''}`;
  // One correction is one entry: its lines stay together in one block. In words, whole: its figures, when, and who.
  const inWords = (c: PaidAgainstAnswer['corrections'][number]) => [
    `• *Backfill #${c.backfillId}* (${outside(c.reason)}): corrected to *${formatMoney(c.corrected)}*, ${formatSignedMoney(c.diffFromSigned)} against the signed ${formatMoney(c.signedTotal)}`,
    `   announced ${formatTime(c.announcedAt)}, ran ${c.ranAt ? formatTime(c.ranAt) : '—'} by ${slackPerson(c.ranBy ?? '?')}, finished ${formatTime(c.finishedAt)}`,
    people(c),
  ].join('\n');
  // Beside the table, which holds its figures and times: what the cells cannot (the reason, the people), once.
  const besideTable = (c: PaidAgainstAnswer['corrections'][number]) => [
    `• *Backfill #${c.backfillId}* (${outside(c.reason)}): against the signed ${formatMoney(c.signedTotal)}, ran by ${slackPerson(c.ranBy ?? '?')}`,
    people(c),
  ].join('\n');
  const current = answer.current.source === 'signature'
    ? `*Current figure:* ${formatMoney(answer.current.total)} (the latest signature)`
    : `*Current figure:* ${formatMoney(answer.current.total)} (after backfill #${answer.current.backfillId ?? '?'}; not signed again since)`;
  // The signed figure and the current one lead: however many corrections there are, those two are always shown.
  const report = outside(answer.report);
  const whole = `\`backfill paid-against ${report} ${outside(answer.period)}\` on the CLI lists every correction.`;
  const table = correctionsTable(answer, whole);
  const corrections = answer.corrections.map((c, i) => (i < table.shown ? besideTable(c) : inWords(c)));
  const summary = `${report} ${outside(answer.period)}: paid against ${formatMoney(answer.signatures[0]?.total ?? '0')}; current ${formatMoney(answer.current.total)}`;
  return {
    text: messageText(summary, answer.corrections.map(inWords), (left) => `${left} more correction(s) are not listed here: ${whole}`),
    blocks: [
      ...limitBlocks([
        header(`What we paid against: ${answer.report}, ${answer.period}`),
        ...sections('*Signed*', signatures),
        section(current),
        ...sections(table.shown ? '*Corrections since* (their figures in the table)' : '*Corrections since*', corrections.length ? corrections : ['none: the signed figure stands']),
        ...table.note,
      ], LIMITS.messageBlocks - table.blocks.length, whole),
      ...table.blocks,
    ],
  };
}

/**
 * The corrections' figures as Slack's table, beside the sections that give the people and the reasons (which a
 * table's raw cells cannot hold as Slack's markup); none when nothing was corrected. `shown`: how many it holds.
 */
function correctionsTable(answer: PaidAgainstAnswer, whole: string): { blocks: Block[]; note: Block[]; shown: number } {
  if (answer.corrections.length === 0) return { blocks: [], note: [], shown: 0 };
  const grid = tableBlock(['Backfill', 'Corrected to', 'Against signed', 'Announced', 'Ran', 'Finished'],
    answer.corrections.map((c) => [`#${c.backfillId}`, formatMoney(c.corrected), formatSignedMoney(c.diffFromSigned), formatTime(c.announcedAt), c.ranAt ? formatTime(c.ranAt) : '—', formatTime(c.finishedAt)]),
    ['left', 'right', 'right', 'left', 'left', 'left']);
  const note = grid.shown < answer.corrections.length
    ? [context(`:page_facing_up: The table holds the first ${grid.shown} of the ${answer.corrections.length} corrections: a Slack table has room for ${TABLE_ROWS - 1}; ` +
      `the others are in words, with their figures, as far as the message has room; ${whole}`)]
    : [];
  return { blocks: [grid.block], note, shown: grid.shown };
}

export interface HomeData {
  inFlight: BackfillReport[];
  recent: BackfillRow[];
  /** What the backfills of the last quarters cost (src/views/costs.ts renders it). */
  costs?: CostSummary;
  /** The permalink of each backfill's status message (the head of its incident thread), by backfill id, where Slack gave one. */
  threadLinks?: ReadonlyMap<number, string>;
}

/** The action id of the Home tab's "Start a backfill" button: it opens the start form (src/views/startModal.ts). */
export const START_FORM_ACTION = 'backfill_start_form';

/** Where a backfill in flight is followed: its incident thread, else its channel; one started on the CLI has neither. */
function incidentLine(backfill: BackfillRow, link: string | undefined): string {
  if (!backfill.incidentChannel) return '_No incident channel: started from the CLI._';
  // The link is Slack's own permalink; escaped so that nothing in it can end the link early.
  if (link) return `<${outside(link).replaceAll('|', '%7C')}|Incident thread> in <#${backfill.incidentChannel}>`;
  return `Incident channel: <#${backfill.incidentChannel}>`;
}

/** The App Home tab: a "Start a backfill" button, backfills in flight with their gate and actions, and the latest log rows with their differences. */
export function homeView(data: HomeData, now: Date = new Date()): types.HomeView {
  const inFlight = data.inFlight.flatMap((report): Block[] => sections(
    `*#${report.backfill.id} ${outside(report.backfill.pipeline)}*, ${formatHourRange(report.backfill.firstHour, report.backfill.lastHour)}: ${describeState(report.backfill.state)}`,
    [incidentLine(report.backfill, data.threadLinks?.get(report.backfill.id)), ...gateLines(report, now)])
    // The status message's own buttons, under the same rules: a press acts for the backfill's incident channel.
    .concat(statusActionsBlocks(report)));
  const start: Block = {
    type: 'actions',
    block_id: 'home_start',
    elements: [{ type: 'button', action_id: START_FORM_ACTION, style: 'primary', text: { type: 'plain_text', text: 'Start a backfill' } }],
  };
  const recent = data.recent.map((b) =>
    `#${b.id} ${outside(b.pipeline)} ${formatHourRange(b.firstHour, b.lastHour)}: ${b.state} · before ${money(b.totalBefore)} · after ${money(b.totalAfter)} · ` +
    `difference ${b.diff === null ? '—' : formatSignedMoney(b.diff)}`);
  // The log and the costs first in the budget: the in-flight backfills give way, saying so, when there are too many.
  const after: Block[] = [
    { type: 'divider' },
    header('Backfill log'),
    ...sections('', recent.length ? recent : ['No backfills yet.']),
    context('Ask "what did we pay against on YYYY-MM-DD?" by mentioning the bot or in a DM, or use `/backfill paid-against &lt;report&gt; &lt;date&gt;`.'),
    ...(data.costs ? [{ type: 'divider' } as const, ...costsBlocks(data.costs)] : []),
  ];
  // The button and the header come first, whatever gives way.
  const room = Math.max(2, LIMITS.viewBlocks - CHART_BLOCKS - after.length - 2);
  return {
    type: 'home',
    blocks: limitBlocks([
      start,
      header('Backfills in flight'),
      ...limitBlocks(inFlight.length ? inFlight : [section('None right now.')], room, '`/backfill status` lists the recent backfills.'),
      ...after,
    ], LIMITS.viewBlocks - CHART_BLOCKS, '`/backfill status` lists the recent backfills.'),
  };
}

/** The blocks withLatestDiffChart adds to the Home tab: the image and where it was shared. */
const CHART_BLOCKS = 2;

/** The latest diff chart uploaded to an incident thread: the Slack file and where it was shared. */
export interface DiffChartRef {
  backfillId: number;
  fileId: string;
  channel: string;
}

/**
 * The Home tab with the latest diff chart under the backfill log. The image is the Slack file itself
 * (slack_file), so it needs no public URL; Slack shows it to whoever can see the channel it was shared in.
 */
export function withLatestDiffChart(view: types.HomeView, chart: DiffChartRef | undefined): types.HomeView {
  if (!chart) return view;
  const chartBlocks: Block[] = [
    {
      type: 'image',
      slack_file: { id: chart.fileId },
      alt_text: `Diff chart of backfill #${chart.backfillId}: per partition the total before and after, and each signed figure against the corrected one`,
      title: { type: 'plain_text', text: `Latest diff: backfill #${chart.backfillId}` },
    },
    context(`Shared in <#${chart.channel}>, in the backfill's incident thread.`),
  ];
  const log = view.blocks.findIndex((b) => b.type === 'header' && 'text' in b && b.text.text === 'Backfill log');
  const at = log < 0 ? view.blocks.length : log + 2;
  // homeView keeps CHART_BLOCKS free for these.
  return { ...view, blocks: limitBlocks([...view.blocks.slice(0, at), ...chartBlocks, ...view.blocks.slice(at)], LIMITS.viewBlocks, '`/backfill status` lists the recent backfills.') };
}

/** The reconciliation by key, partition by partition: staged against live, then published against preserved. */
export function reconciliationMessage(backfill: BackfillRow, rows: ReconciliationRow[]): Message {
  const lines = rows.map((r) => r.status === 'unavailable'
    ? `${formatHour(r.partitionHour)}  unavailable: the source is missing, the partition was left as it was`
    : `${formatHour(r.partitionHour)}  ${r.phase.padEnd(9)} missing ${r.keysMissing}  added ${r.keysAdded}  duplicated ${r.keysDuplicated}  changed ${r.keysChanged}` +
      `${r.lateRows ? `  late rows kept ${r.lateRows}` : ''}  total ${money(r.totalBefore)} → ${money(r.totalAfter)}`);
  // Sent as a catalog pause begins, while the catalog differs: a continue is refused until it is put back, and has no difference to accept.
  const onward = isCatalogPause(backfill)
    ? `Once the catalog is back as announced, \`/backfill continue ${backfill.id} &lt;reason&gt;\` runs it on`
    : `\`/backfill continue ${backfill.id} &lt;reason&gt;\` accepts the difference`;
  const lead = backfill.state === 'paused'
    ? `:octagonal_sign: *${isCatalogPause(backfill) ? 'Paused' : 'The expansion stopped'}:* ${outside(fit(backfill.pausedReason ?? '', WHY_SHOWN))}\nBoth generations are kept. ${onward}; \`/backfill rollback ${backfill.id}\` restores the prior rows.`
    : `Reconciliation by key of backfill #${backfill.id}.`;
  // Split across blocks, every fence closed; what does not fit in one message says where the whole is.
  const table = codeSections('*By partition*', '', lines.length ? lines : ['nothing staged'], LIMITS.messageBlocks - 2, DIFF_TABLE_CHARS);
  const left = lines.length - table.shown;
  return {
    text: `Backfill #${backfill.id} reconciliation${backfill.state === 'paused' ? ': paused' : ''}`,
    blocks: [section(lead), ...table.blocks,
      ...(left > 0 ? [section(`:page_facing_up: ${left} more partition(s) are not shown here: the incident package has them all (\`/backfill log ${backfill.id}\`).`)] : [])],
  };
}

/**
 * A reply that is text (a refusal, a list): in as many sections as its lines need, never cut unseen; the
 * notification text bounded with a note.
 */
export function textMessage(text: string): Message {
  return { text: fit(text, LIMITS.sectionText), blocks: limitBlocks(sections('', text.split('\n')), LIMITS.messageBlocks, 'the CLI shows the whole answer.') };
}
