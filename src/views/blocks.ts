import type { types } from '@slack/bolt';
import type { Notice } from '../core/notices.js';
import { backticks, slackNoticeText } from './notices.js';
import type { BackfillConsumerRow, BackfillRow } from '../db/backfills.js';
import type { PaidAgainstAnswer } from '../core/finance/paidAgainst.js';
import type { ReconciliationRow } from '../db/reconciliations.js';
import { subtractMoney } from '../core/money.js';
import type { Plan } from '../core/identify/plan.js';
import { describeSecondApproval, describeSize } from '../core/identify/sizing.js';
import { describeState } from '../core/engine/stateMachine.js';
import type { BackfillReport } from '../core/file/status.js';
import { waitingOn } from './waiting.js';
import { backfillProgress, slackProgress } from './progress.js';
import { formatHour, formatHourRange, formatMoney, formatSignedMoney, formatTime, moneyOrNone, slackPerson } from './format.js';
import type { CostSummary } from '../core/file/costs.js';
import { costsBlocks } from './costs.js';

// Block Kit, built by pure functions: data in, blocks out. Listeners and the messenger never inline JSON.

type Block = types.KnownBlock;

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
const mrkdwn = (text: string): types.MrkdwnElement => ({ type: 'mrkdwn', text });
const section = (text: string): Block => ({ type: 'section', text: mrkdwn(text.slice(0, 3000)) });
const context = (text: string): Block => ({ type: 'context', elements: [mrkdwn(text.slice(0, 3000))] });
const header = (text: string): Block => ({ type: 'header', text: { type: 'plain_text', text: text.slice(0, 150) } });

export interface Message {
  text: string;
  blocks: Block[];
}

/** The DM an owner gets: the generated announcement with Acknowledge and Hold. */
export function announcementMessage(reference: ButtonReference, notice: Notice, options: { reminder?: boolean } = {}): Message {
  const value = encodeButtonValue(reference);
  const lead = options.reminder ? '*Reminder: still waiting for your acknowledgement.*\n' : '';
  return {
    text: `${options.reminder ? 'Reminder: ' : ''}backfill #${reference.backfillId} needs your acknowledgement (${reference.consumer})`,
    blocks: [
      header(`Backfill #${reference.backfillId}: please acknowledge`),
      section(`${lead}${slackNoticeText(notice)}`),
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
    ],
  };
}

/** The announcement after the owner answered: the buttons give way to what they did. */
export function answeredAnnouncementMessage(reference: ButtonReference, notice: Notice, answer: string): Message {
  return {
    text: `backfill #${reference.backfillId}: ${answer}`,
    blocks: [header(`Backfill #${reference.backfillId}`), section(slackNoticeText(notice)), context(answer)],
  };
}

function gateLine(c: BackfillConsumerRow): string {
  if (c.notifyRule === 'after') return `${c.consumer} ${slackPerson(c.owner)}: told after the run`;
  if (c.ackedAt) return `:white_check_mark: ${c.consumer} ${slackPerson(c.owner)}: acknowledged ${formatTime(c.ackedAt)}`;
  if (c.overriddenBy) return `:warning: ${c.consumer} ${slackPerson(c.owner)}: overridden by ${slackPerson(c.overriddenBy)} (${c.overrideReason ?? ''})`;
  if (c.undeliverable) return `:no_entry: ${c.consumer} ${slackPerson(c.owner)}: cannot be reached (Slack: ${c.undeliverable}); needs a delegate or an override`;
  return `:hourglass: ${c.consumer} ${slackPerson(c.owner)}: waiting`;
}

/**
 * The one status message in the incident channel, re-rendered from the database on every change. `now` is
 * when it is rendered: the time left is estimated against it.
 */
export function statusMessage(report: BackfillReport, now: Date = new Date()): Message {
  const { backfill } = report;
  const progress = slackProgress(backfillProgress(report, now));
  const why = [
    backfill.failure ? `:x: ${backfill.failure}` : '',
    backfill.pausedReason ? `:octagonal_sign: paused: ${backfill.pausedReason}` : '',
    backfill.stoppedBy ? `:stop_sign: stopped by ${slackPerson(backfill.stoppedBy)}: ${backfill.stopReason ?? ''}` : '',
    backfill.rolledBackBy ? `:rewind: rolled back by ${slackPerson(backfill.rolledBackBy)}` : '',
  ].filter(Boolean).join('\n');
  const blocks: Block[] = [
    header(`Backfill #${backfill.id} of ${backfill.pipeline}: ${describeState(backfill.state)}`),
    section(`*${backfill.partitionCount} partitions*, ${formatHourRange(backfill.firstHour, backfill.lastHour)}\n*Why:* ${backfill.reason}\n*Asked by* ${slackPerson(backfill.requestedBy)}`),
    section(`*Gate*\n${report.consumers.map(gateLine).join('\n') || 'no readers'}`),
    section(`*Progress:* ${progress}${why ? `\n${why}` : ''}\n${waitingOn(report, slackPerson, backticks)}`),
    context(`total before ${money(backfill.totalBefore)} · announced ${formatTime(backfill.announcedAt)}${backfill.ranAt ? ` · ran ${formatTime(backfill.ranAt)}` : ''}`),
  ];
  return { text: `Backfill #${backfill.id} of ${backfill.pipeline}: ${describeState(backfill.state)}`, blocks };
}

/** The diff posted when the compare is done: what finance asks for, next to every correction. */
export function diffMessage(report: BackfillReport): Message {
  const { backfill } = report;
  const figures = report.signed.map((f) =>
    `*${f.report} ${f.period}*: signed *${money(f.signedTotal)}* by ${slackPerson(f.signedBy)} at ${formatTime(f.signedAt)} → now *${money(f.reportAfter)}*, difference *${f.diff === null ? '—' : formatSignedMoney(f.diff)}*`);
  const replays = report.steps.filter((s) => s.kind === 'replay').map((s, i) =>
    `${i + 1}. ${s.key}: ${s.status}${s.finishedAt ? ` at ${formatTime(s.finishedAt)}` : ''}`);
  const rows = report.targets.map((t) => {
    const diff = t.totalAfter === null ? '—' : formatSignedMoney(subtractMoney(t.totalAfter, t.totalBefore));
    return `${formatHour(t.partitionHour)}  ${String(t.rowsBefore).padStart(4)} → ${String(t.rowsAfter ?? '—').padEnd(4)}  ${money(t.totalBefore).padStart(11)} → ${money(t.totalAfter).padStart(11)}  ${diff}`;
  });
  const unavailable = report.targets.filter((t) => t.status === 'unavailable').map((t) => formatHour(t.partitionHour));
  const restored = report.targets.filter((t) => t.status === 'restored').map((t) => formatHour(t.partitionHour));
  const notes = [
    ...(unavailable.length ? [`:warning: *Unavailable* (source missing; left as it was, nothing invented): ${unavailable.join(', ')}`] : []),
    ...(backfill.state === 'rolled_back' || backfill.state === 'rolling_back'
      ? [`:rewind: *Rolled back* by ${slackPerson(backfill.rolledBackBy ?? '?')} at ${backfill.rolledBackAt ? formatTime(backfill.rolledBackAt) : '—'}: ${restored.join(', ')} hold their prior rows again; consumers replayed on them.`]
      : []),
  ];
  const title = backfill.state === 'rolled_back' ? 'rolled back' : 'diff';
  return {
    text: `Backfill #${backfill.id} ${title}: total ${money(backfill.totalBefore)} → ${money(backfill.totalAfter)} (${backfill.diff === null ? '—' : formatSignedMoney(backfill.diff)})`,
    blocks: [
      header(`Backfill #${backfill.id} ${title}: ${backfill.pipeline}, ${formatHourRange(backfill.firstHour, backfill.lastHour)}`),
      ...(notes.length ? [section(notes.join('\n'))] : []),
      ...(figures.length ? [section(figures.join('\n'))] : []),
      section([
        `*Partitions:* ${backfill.partitionCount}`,
        `*Total before:* ${money(backfill.totalBefore)}`,
        `*Total after:* ${money(backfill.totalAfter)}`,
        `*Difference:* ${backfill.diff === null ? '—' : formatSignedMoney(backfill.diff)}`,
        `*Announced at:* ${formatTime(backfill.announcedAt)}`,
        `*Ran at:* ${backfill.ranAt ? formatTime(backfill.ranAt) : '—'} by ${slackPerson(backfill.ranBy ?? backfill.requestedBy)}`,
        `*Finished at:* ${backfill.finishedAt ? formatTime(backfill.finishedAt) : '—'}`,
      ].join('\n')),
      section(`*Consumers re-triggered, in order*\n${replays.join('\n') || 'none'}`),
      section(`*Per partition* (rows, total)\n\`\`\`${['partition          rows          before →       after  difference', ...rows].join('\n')}\`\`\``),
    ],
  };
}

export function planMessage(plan: Plan): Message {
  const { identified } = plan;
  const readers = plan.readers.map((r) => `${r.dependencyRank}. ${r.consumer} (${r.kind}), ${slackPerson(r.owner)}, told ${r.notifyRule}${r.readDirectly ? '' : `, via ${r.dependsOn.join(', ')}`}`);
  const signed = plan.signed.map((f) => `${f.report} ${f.period}: *${formatMoney(f.total)}* signed by ${slackPerson(f.signedBy)} at ${formatTime(f.signedAt)}`);
  const skipped = identified.skipped.map((s) => `${formatHour(s.hour)}: ${s.why}`);
  return {
    text: `Plan: ${plan.pipeline.name}, ${identified.hours.length} partitions`,
    blocks: [
      header(`Plan (dry run): ${plan.pipeline.name}`),
      section(`*${identified.hours.length} partitions*, ${formatHourRange(identified.firstHour, identified.lastHour)}` +
        `${skipped.length ? `\n_left alone:_\n${skipped.join('\n')}` : ''}`),
      section(`*Readers, in dependency order*\n${readers.join('\n') || 'none'}`),
      section(`*Signed figures affected*\n${signed.join('\n') || 'none'}`),
      section(`*Watermark:* ${identified.watermarkBefore ? formatHour(identified.watermarkBefore) : 'none'} → ${formatHour(identified.watermarkResetTo)}\n` +
        `*Expected:* ${formatMoney(plan.totalBefore)} → ${formatMoney(plan.expectedTotalAfter)} (${plan.direction}) · *waits for:* ${plan.gateOwners.map((o) => `${slackPerson(o)}`).join(', ') || 'nobody'}`),
      ...(plan.size ? [section(`*Size:* ${describeSize(plan.size, plan.pipeline.name)}\n*Second operator's approval:* ${describeSecondApproval(plan.size)}`)] : []),
      context(`Plan #${plan.planId ?? '?'} (inputs ${plan.inputsHash.slice(0, 12)}). Nothing was written but the plan and an audit event. ` +
        `\`/backfill start plan ${plan.planId ?? '<id>'} <reason>\` runs exactly this, or refuses if its inputs change.`),
    ],
  };
}

/** "What did we pay against?": the signed figure first, then every correction, then what stands now. */
export function paidAgainstMessage(answer: PaidAgainstAnswer): Message {
  const signatures = answer.signatures.map((s, i) =>
    `${answer.signatures.length > 1 ? `${i + 1}. ` : ''}*${formatMoney(s.total)}*, signed by ${slackPerson(s.signedBy)} at ${formatTime(s.signedAt)}`);
  const corrections = answer.corrections.map((c) => [
    `• *Backfill #${c.backfillId}* (${c.reason}): corrected to *${formatMoney(c.corrected)}*, ${formatSignedMoney(c.diffFromSigned)} against the signed ${formatMoney(c.signedTotal)}`,
    `   announced ${formatTime(c.announcedAt)}, ran ${c.ranAt ? formatTime(c.ranAt) : '—'} by ${slackPerson(c.ranBy ?? '?')}, finished ${formatTime(c.finishedAt)}`,
    `   acknowledged by ${c.acknowledgedBy.map((a) => `${slackPerson(a.owner)} (${a.consumer}, ${formatTime(a.at)})`).join(', ') || 'nobody'}` +
      `${c.overriddenBy.length ? `; overridden by ${c.overriddenBy.map((o) => `${slackPerson(o.operator)} for ${o.consumer}: ${o.reason}`).join(', ')}` : ''}`,
  ].join('\n'));
  const current = answer.current.source === 'signature'
    ? `*Current figure:* ${formatMoney(answer.current.total)} (the latest signature)`
    : `*Current figure:* ${formatMoney(answer.current.total)} (after backfill #${answer.current.backfillId ?? '?'}; not signed again since)`;
  return {
    text: `${answer.report} ${answer.period}: paid against ${formatMoney(answer.signatures[0]?.total ?? '0')}; current ${formatMoney(answer.current.total)}`,
    blocks: [
      header(`What we paid against: ${answer.report}, ${answer.period}`),
      section(`*Signed*\n${signatures.join('\n')}`),
      section(`*Corrections since*\n${corrections.join('\n') || 'none: the signed figure stands'}`),
      section(current),
    ],
  };
}

export interface HomeData {
  inFlight: BackfillReport[];
  recent: BackfillRow[];
  /** What the backfills of the last quarters cost (src/views/costs.ts renders it). */
  costs?: CostSummary;
}

/** The App Home tab: backfills in flight with their gate, and the latest log rows with their differences. */
export function homeView(data: HomeData): types.HomeView {
  const inFlight = data.inFlight.flatMap((report): Block[] => [
    section(`*#${report.backfill.id} ${report.backfill.pipeline}*, ${formatHourRange(report.backfill.firstHour, report.backfill.lastHour)}: ${describeState(report.backfill.state)}\n` +
      `${report.consumers.map(gateLine).join('\n') || 'no readers'}`),
  ]);
  const recent = data.recent.map((b) =>
    `#${b.id} ${b.pipeline} ${formatHourRange(b.firstHour, b.lastHour)}: ${b.state} · before ${money(b.totalBefore)} · after ${money(b.totalAfter)} · ` +
    `difference ${b.diff === null ? '—' : formatSignedMoney(b.diff)}`);
  return {
    type: 'home',
    blocks: [
      header('Backfills in flight'),
      ...(inFlight.length ? inFlight : [section('None right now.')]),
      { type: 'divider' },
      header('Backfill log'),
      section(recent.join('\n') || 'No backfills yet.'),
      context('Ask "what did we pay against on YYYY-MM-DD?" by mentioning the bot or in a DM, or use `/backfill paid-against <report> <date>`.'),
      ...(data.costs ? [{ type: 'divider' } as const, ...costsBlocks(data.costs)] : []),
    ].slice(0, 100),
  };
}

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
  return { ...view, blocks: [...view.blocks.slice(0, at), ...chartBlocks, ...view.blocks.slice(at)].slice(0, 100) };
}

/** The reconciliation by key, partition by partition: staged against live, then published against preserved. */
export function reconciliationMessage(backfill: BackfillRow, rows: ReconciliationRow[]): Message {
  const lines = rows.map((r) => r.status === 'unavailable'
    ? `${formatHour(r.partitionHour)}  unavailable: the source is missing, the partition was left as it was`
    : `${formatHour(r.partitionHour)}  ${r.phase.padEnd(9)} missing ${r.keysMissing}  added ${r.keysAdded}  duplicated ${r.keysDuplicated}  changed ${r.keysChanged}` +
      `${r.lateRows ? `  late rows kept ${r.lateRows}` : ''}  total ${money(r.totalBefore)} → ${money(r.totalAfter)}`);
  const lead = backfill.state === 'paused'
    ? `:octagonal_sign: *The expansion stopped:* ${backfill.pausedReason ?? ''}\nBoth generations are kept. \`/backfill continue ${backfill.id} <reason>\` accepts the difference; \`/backfill rollback ${backfill.id}\` restores the prior rows.`
    : `Reconciliation by key of backfill #${backfill.id} (generation ${backfill.generation}).`;
  return {
    text: `Backfill #${backfill.id} reconciliation${backfill.state === 'paused' ? ': paused' : ''}`,
    blocks: [section(lead), section(`\`\`\`${lines.join('\n') || 'nothing staged'}\`\`\``)],
  };
}
