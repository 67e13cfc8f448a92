import { listRecentBackfills } from '../db/backfills.js';
import { approveCapacity, cancelBackfill, overrideGate } from '../core/announce/gate.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../core/recovery/recovery.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { planBackfill } from '../core/identify/plan.js';
import { recordingRefusals } from '../core/refusals.js';
import { startBackfill } from '../core/announce/start.js';
import { loadBackfillReport } from '../core/file/status.js';
import { paidAgainstMessage, planMessage, statusMessage, textMessage, type Message } from '../views/blocks.js';
import { storableText } from '../markup.js';
import {
  approvedNotice, approvedReply, cancelledNotice, continuedNotice, incidentPackageReply, overriddenNotice, overrideReply, recentBackfillsReply,
  rolledBackNotice, signedReply, startedFromPlanReply, startedReply, stoppedNotice,
} from '../views/replies.js';
import { answerPaidAgainst } from '../core/finance/paidAgainst.js';
import { signReport } from '../core/finance/signing.js';
import { findCommand, slackHelp } from '../commands/table.js';
import { rememberPeople } from '../db/people.js';
import { findPlan } from '../db/plans.js';
import { parseBackfillCommand, type BackfillCommand } from './commandText.js';
import type { SlackDeps } from './deps.js';
import { runLineageCommand } from './lineage.js';

export interface CommandInput {
  user: string;
  /** The name Slack sends with the command: kept in backfill.people, so a terminal can say who did what. */
  userName?: string | undefined;
  channel: string;
  text: string;
}

const plain = textMessage;

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
    return plain(startedReply(backfill, plan.gateOwners));
  },
  'start-plan': async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const frozen = await findPlan(ctx.pool, command.planId);
    if (!frozen) throw new BackfillError(ErrorCode.BadInput, `There is no plan #${command.planId}. \`/backfill plan\` makes one and shows its id.`);
    const { backfill } = await startBackfill(ctx, { pipeline: frozen.pipeline, target: frozen.target, reason: command.reason, actor, incidentChannel: input.channel, planId: command.planId });
    await deps.kick(backfill.id);
    await deps.messenger.changed(backfill.id);
    return plain(startedFromPlanReply(backfill, command.planId));
  },
  approve: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const result = await approveCapacity(ctx, { backfillId: command.backfillId, actor });
    await deps.messenger.postToIncident(command.backfillId, approvedNotice(actor, command.backfillId));
    if (result.approved) await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(approvedReply(command.backfillId, result));
  },
  stop: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    await stopBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    const removed = await deps.dequeue(command.backfillId);
    await deps.messenger.postToIncident(command.backfillId, stoppedNotice(actor, command.backfillId, command.reason, removed));
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} stopped and fenced.`);
  },
  continue: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const { accepted } = await continueBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason, partitions: command.partitions });
    await deps.messenger.postToIncident(command.backfillId, continuedNotice(actor, command.backfillId, accepted, command.reason));
    await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} continues.`);
  },
  rollback: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const { restored } = await rollbackBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    await deps.messenger.postToIncident(command.backfillId, rolledBackNotice(actor, command.backfillId, restored.length));
    await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(`Backfill #${command.backfillId} rolled back: ${restored.length} partition(s) restored.`);
  },
  status: async (deps, _input, command) => {
    const { ctx } = deps;
    if (command.backfillId !== undefined) return statusMessage(await loadBackfillReport(ctx.pool, command.backfillId));
    return plain(recentBackfillsReply(await listRecentBackfills(ctx.pool, 10)));
  },
  override: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    const result = await overrideGate(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    await deps.messenger.postToIncident(command.backfillId, overriddenNotice(actor, command.backfillId, command.reason));
    await deps.kick(command.backfillId);
    await deps.messenger.changed(command.backfillId);
    return plain(overrideReply(command.backfillId, result.approved));
  },
  cancel: async (deps, input, command) => {
    const { ctx } = deps;
    const actor = input.user;
    await cancelBackfill(ctx, { backfillId: command.backfillId, actor, reason: command.reason });
    await deps.messenger.postToIncident(command.backfillId, cancelledNotice(actor, command.backfillId, command.reason));
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
    return plain(signedReply(signed));
  },
  log: async (deps, _input, command) => {
    const id = command.backfillId;
    // The CLI's log lists recent backfills without an id; here the package goes to one backfill's thread.
    if (id === undefined) throw new BackfillError(ErrorCode.BadInput, 'Which backfill? Usage: `/backfill log <id>`; `/backfill status` lists the recent ones.');
    const where = await deps.messenger.uploadIncidentPackage(id);
    return plain(incidentPackageReply(id, where));
  },
  lineage: async (deps, input, command) => plain(await runLineageCommand(deps.ctx, input.user, command)),
};

/**
 * Runs one /backfill invocation and returns the ephemeral reply. Refusals throw a BackfillError (recorded
 * in the timeline); the listener turns it into an ephemeral message.
 */
export async function runBackfillCommand(deps: SlackDeps, input: CommandInput): Promise<Message> {
  const { ctx, policy } = deps;
  const actor = input.user;
  if (input.userName) await rememberPeople(ctx.pool, [{ slackId: input.user, name: input.userName }]);
  // Recorded as it can be stored: a NUL in what was typed is refused by the parser, and its refusal is kept too.
  const typed = storableText(input.text);
  return recordingRefusals(ctx, { actor, action: `/backfill ${typed.trim().split(/\s+/)[0] ?? ''}`.trim(), input: { text: typed, channel: input.channel } }, async () => {
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
