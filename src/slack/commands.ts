import { backfillOf, rememberName, runCommand, type CommandFacts } from '../commands/run.js';
import { findCommand, slackHelp } from '../commands/table.js';
import { recordingRefusals } from '../core/refusals.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { storableText } from '../markup.js';
import { lineageDecisionReply, lineageProposalsReply } from '../views/lineage.js';
import { paidAgainstMessage, planMessage, statusMessage, textMessage, type Message } from '../views/blocks.js';
import {
  approvedReply, incidentPackageReply, overrideReply, recentBackfillsReply, signedReply, startedFromPlanReply, startedReply,
} from '../views/replies.js';
import { parseBackfillCommand } from './commandText.js';
import { slackEffects, type SlackDeps } from './deps.js';

// /backfill: parse the text, check the person against the command table's rule, run the use case
// (src/commands/run.ts) and word its facts as the ephemeral reply. The decisions it tells the incident channel
// are the use case's effects (slackEffects).

export interface CommandInput {
  user: string;
  /** The name Slack sends with the command: kept in backfill.people, so a terminal can say who did what. */
  userName?: string | undefined;
  channel: string;
  text: string;
}

/**
 * Runs one /backfill invocation and returns the ephemeral reply. Refusals throw a BackfillError (recorded
 * in the timeline); the listener turns it into an ephemeral message.
 */
export async function runBackfillCommand(deps: SlackDeps, input: CommandInput): Promise<Message> {
  const { ctx, policy } = deps;
  const actor = input.user;
  if (input.userName) await rememberName(ctx, input.user, input.userName);
  // Recorded as it can be stored: a NUL in what was typed is refused by the parser, and its refusal is kept too.
  const typed = storableText(input.text);
  return recordingRefusals(ctx, { actor, action: `/backfill ${typed.trim().split(/\s+/)[0] ?? ''}`.trim(), input: { text: typed, channel: input.channel } }, async () => {
    const command = parseBackfillCommand(input.text);
    const spec = findCommand(command.kind === 'start-plan' ? 'start' : command.kind, 'slack');
    if (spec) await policy.authorize(actor, input.channel, spec);
    // The CLI's log prints the backfill log without an id; here the package goes to one backfill's thread.
    if (command.kind === 'log' && backfillOf(command) === undefined) {
      throw new BackfillError(ErrorCode.BadInput, 'Which backfill? Usage: `/backfill log <id>`; `/backfill status` lists the recent ones.');
    }
    return reply(await runCommand(ctx, slackEffects(deps), command, actor, { incidentChannel: input.channel }));
  });
}

/** The ephemeral reply to what the command did. */
function reply(facts: CommandFacts): Message {
  const plain = textMessage;
  switch (facts.kind) {
    case 'help': return plain(slackHelp());
    case 'plan': return planMessage(facts.plan);
    case 'start': return plain(facts.planId === undefined ? startedReply(facts.started.backfill, facts.started.plan.gateOwners) : startedFromPlanReply(facts.started.backfill, facts.planId));
    case 'approve': return plain(approvedReply(facts.backfillId, facts.result));
    case 'stop': return plain(`Backfill #${facts.backfillId} stopped and fenced.`);
    case 'continue': return plain(`Backfill #${facts.backfillId} continues.`);
    case 'rollback': return plain(`Backfill #${facts.backfillId} rolled back: ${facts.restored} partition(s) restored.`);
    case 'status': return statusMessage(facts.report);
    case 'recent': return plain(recentBackfillsReply(facts.backfills));
    case 'override': return plain(overrideReply(facts.backfillId, facts.approved));
    case 'cancel': return plain(`Backfill #${facts.backfillId} cancelled.`);
    case 'paid-against': return paidAgainstMessage(facts.answer);
    case 'sign': return plain(signedReply(facts.signed));
    case 'shared': return plain(incidentPackageReply(facts.backfillId, facts.where));
    case 'lineage-list': return plain(lineageProposalsReply(facts.proposals));
    case 'lineage-decided': return plain(lineageDecisionReply(facts.decision));
    default:
      // The slash command offers none of the others (src/slack/commandText.ts SLACK_KINDS).
      throw new Error(`/backfill has no reply for ${facts.kind}`);
  }
}
