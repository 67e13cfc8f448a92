import { listRecentBackfills } from '../db/backfills.js';
import { approveCapacity, cancelBackfill, overrideGate } from '../core/announce/gate.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../core/recovery/recovery.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { planBackfill } from '../core/identify/plan.js';
import { recordingRefusals } from '../core/refusals.js';
import { startBackfill } from '../core/announce/start.js';
import { loadBackfillReport } from '../core/file/status.js';
import { formatMoney, formatSignedMoney } from '../core/money.js';
import { formatHour, formatHourRange } from '../core/time.js';
import { paidAgainstMessage, planMessage, statusMessage, type Message } from '../views/blocks.js';
import { answerPaidAgainst } from '../core/finance/paidAgainst.js';
import { signReport } from '../core/finance/signing.js';
import { formatTime } from '../core/time.js';
import { findCommand, slackHelp } from '../commands/table.js';
import { rememberPeople } from '../db/people.js';
import { findPlan } from '../db/plans.js';
import { parseBackfillCommand, type BackfillCommand } from './commandText.js';
import type { SlackDeps } from './deps.js';

export interface CommandInput {
  user: string;
  /** The name Slack sends with the command: kept in backfill.people, so a terminal can say who did what. */
  userName?: string | undefined;
  channel: string;
  text: string;
}

const plain = (text: string): Message => ({ text, blocks: [{ type: 'section', text: { type: 'mrkdwn', text } }] });

type Handler<K extends BackfillCommand['kind']> = (deps: SlackDeps, input: CommandInput, command: Extract<BackfillCommand, { kind: K }>) => Promise<Message>;

/** What each slash command does; src/commands/table.ts says who may give it and how it is written. */
const HANDLERS: { [K in BackfillCommand['kind']]: Handler<K> } = {
  help: async () => plain(slackHelp()),
  plan: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    return planMessage(await planBackfill(ctx, { ...command, actor }));
  },
  start: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const { backfill, plan } = await startBackfill(ctx, { ...command, actor, incidentChannel: input.channel });
    await deps.kick(backfill.id);
    await deps.messenger.changed(backfill.id);
    const owners = plan.gateOwners.map((o) => `<@${o}>`).join(', ');
    return plain(`Backfill #${backfill.id} created: ${backfill.partitionCount} partitions, ${formatHourRange(backfill.firstHour, backfill.lastHour)}, ` +
      `total before ${formatMoney(backfill.totalBefore)}. ${owners ? `Announced; it runs once ${owners} acknowledge.` : 'Nobody must acknowledge first: it runs now.'}`);
  },
  'start-plan': async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const frozen = await findPlan(ctx.pool, command.planId);
    if (!frozen) throw new BackfillError(ErrorCode.BadInput, `There is no plan #${command.planId}. \`/backfill plan\` makes one and shows its id.`);
    const { backfill } = await startBackfill(ctx, { pipeline: frozen.pipeline, target: frozen.target, reason: command.reason, actor, incidentChannel: input.channel, planId: command.planId });
    await deps.kick(backfill.id);
    await deps.messenger.changed(backfill.id);
    return plain(`Backfill #${backfill.id} created from plan #${command.planId}, exactly as previewed: ${backfill.partitionCount} partitions, ` +
      `${formatHourRange(backfill.firstHour, backfill.lastHour)}, total before ${formatMoney(backfill.totalBefore)}.`);
  },
  approve: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const result = await approveCapacity(ctx, { backfillId: command.backfillId, actor });
    await deps.messenger.postToIncident(command.backfillId, `:ballot_box_with_check: <@${actor}> approved the size of backfill #${command.backfillId} as the second operator.`);
    if (result.approved) await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(result.approved ? `Approved; every gate is open and backfill #${command.backfillId} runs.` :
      `Approved. Still waiting for: ${result.waitingFor.map((w) => `${w.consumer} (${w.owner.startsWith('U') ? `<@${w.owner}>` : w.owner})`).join(', ')}.`);
  },
  stop: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const stopped = await stopBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    const removed = await deps.dequeue(command.backfillId);
    await deps.messenger.postToIncident(command.backfillId, `:stop_sign: <@${actor}> stopped backfill #${command.backfillId}: ${command.reason}. ` +
      `Generation ${stopped.generation} is fenced: no write of it commits any more; ${removed} queued job(s) removed. The prior rows of what was published are kept.`);
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} stopped and fenced.`);
  },
  continue: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const { accepted } = await continueBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason, partitions: command.partitions });
    await deps.messenger.postToIncident(command.backfillId,
      `:arrow_forward: <@${actor}> accepted the difference of ${accepted.map(formatHour).join(', ')} and continued backfill #${command.backfillId}: ${command.reason}. Any other partition outside its envelope pauses it again.`);
    await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} continues.`);
  },
  rollback: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const { restored } = await rollbackBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    await deps.messenger.postToIncident(command.backfillId, `:rewind: <@${actor}> rolled back backfill #${command.backfillId}: ${restored.length} partition(s) hold their prior rows again; consumers replay now.`);
    await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} rolled back: ${restored.length} partition(s) restored.`);
  },
  status: async (deps, _input, command) => {
    const { ctx } = deps;
    if (command.backfillId !== undefined) return statusMessage(await loadBackfillReport(ctx.pool, command.backfillId));
    const recent = await listRecentBackfills(ctx.pool, 10);
    return plain(recent.length === 0 ? 'No backfills yet.' : recent.map((b) =>
      `#${b.id} ${b.pipeline} ${formatHourRange(b.firstHour, b.lastHour)}: *${b.state}*${b.diff === null ? '' : `, difference ${formatSignedMoney(b.diff)}`}`).join('\n'));
  },
  override: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const result = await overrideGate(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    await deps.messenger.postToIncident(command.backfillId, `:warning: <@${actor}> overrode the missing acknowledgements of backfill #${command.backfillId}: ${command.reason}`);
    await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(result.approved ? `Backfill #${command.backfillId} proceeds without the missing acknowledgements; the timeline keeps your reason.` : 'Nothing was missing: nothing changed.');
  },
  cancel: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    await cancelBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    await deps.messenger.postToIncident(command.backfillId, `:no_entry: <@${actor}> cancelled backfill #${command.backfillId}${command.reason ? `: ${command.reason}` : ''}. Nothing was changed.`);
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} cancelled.`);
  },
  'paid-against': async (deps, _input, command) => {
    const { ctx } = deps;
    return paidAgainstMessage(await answerPaidAgainst(ctx.pool, { report: command.report, date: command.date }));
  },
  sign: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const signed = await signReport(ctx, { report: command.report, period: command.date, actor });
    return plain(`Signed: ${signed.report} for ${signed.period} = *${formatMoney(signed.total)}* by <@${signed.signedBy}> at ${formatTime(signed.signedAt)}` +
      `${signed.signatureNumber > 1 ? ` (signature ${signed.signatureNumber}; the earlier ones are kept)` : ''}.`);
  },
  log: async (deps, _input, command) => {
    const id = command.backfillId;
    // The CLI's log lists recent backfills without an id; here the package goes to one backfill's thread.
    if (id === undefined) throw new BackfillError(ErrorCode.BadInput, 'Which backfill? Usage: `/backfill log <id>`; `/backfill status` lists the recent ones.');
    const where = await deps.messenger.uploadIncidentPackage(id);
    return plain(where ? `The incident package of backfill #${id} (Markdown and JSON) is in <#${where}>'s incident thread.`
      : `Backfill #${id} has no incident channel (it was started from the CLI); export it with \`backfill export ${id}\`.`);
  },
};

/**
 * Runs one /backfill invocation and returns the ephemeral reply. Refusals throw a BackfillError (recorded
 * in the timeline); the listener turns it into an ephemeral message.
 */
export async function runBackfillCommand(deps: SlackDeps, input: CommandInput): Promise<Message> {
  const { ctx, policy } = deps;
  const actor = input.user;
  if (input.userName) await rememberPeople(ctx.pool, [{ slackId: input.user, name: input.userName }]);
  return recordingRefusals(ctx, { actor, action: `/backfill ${input.text.trim().split(/\s+/)[0] ?? ''}`.trim(), input: { text: input.text, channel: input.channel } }, async () => {
    const command = parseBackfillCommand(input.text);
    const spec = findCommand(command.kind === 'start-plan' ? 'start' : command.kind, 'slack');
    if (spec) await policy.authorize(actor, input.channel, spec);
    return dispatch(deps, input, command);
  });
}

function dispatch<K extends BackfillCommand['kind']>(deps: SlackDeps, input: CommandInput, command: Extract<BackfillCommand, { kind: K }>): Promise<Message> {
  const handler: Handler<K> = HANDLERS[command.kind];
  return handler(deps, input, command);
}
