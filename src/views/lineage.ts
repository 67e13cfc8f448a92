import type { DecisionResult } from '../core/lineage/proposals.js';
import type { LineageProposal } from '../db/lineageEvents.js';
import type { Message } from './blocks.js';
import { formatHourRange, formatTime, slackPerson } from './format.js';
import { slackCode, slackText } from '../markup.js';
import { context, fit, limitBlocks, LIMITS, section, sections } from './layout.js';

// Lineage proposals in Slack, built by pure functions: the proposal posted to the operators, and the slash
// command's answers. A proposal is decided by a command, not a button: the decision needs the owner's id and the
// consumer's kind, which a button cannot carry, and the command goes through the command table's operator rule.

// A job's namespace and name are whatever the sender wrote: escaped, their backticks defused, and bounded (a
// name is shown in every line that lists the proposal).
const NAME_SHOWN = 200;

function job(proposal: LineageProposal): string {
  return `\`${slackCode(fit(proposal.jobNamespace, NAME_SHOWN))}\` / \`${slackCode(fit(proposal.jobName, NAME_SHOWN))}\``;
}

function readsLine(proposal: LineageProposal): string {
  if (proposal.pending.length === 0) return 'no reads pending';
  return proposal.pending.map((p) => `${slackText(p.pipeline)}: ${p.hours} hour${p.hours === 1 ? '' : 's'} (${formatHourRange(p.first, p.last)})`).join('; ');
}

/** The proposal as the operators see it: who the job is, what it read, and the commands that decide it. */
export function lineageProposalMessage(proposal: LineageProposal): Message {
  const intro = `:mag: *Lineage proposal #${proposal.id}*: an OpenLineage job the bot does not know read a pipeline's table: ${job(proposal)}.`;
  const held = `Read so far: ${readsLine(proposal)}. These reads are kept aside, not in the read log, until an operator says who the job is: ` +
    'until then no backfill announcement names it, and nobody becomes an owner because a job said so.';
  const how = [
    `• It is a registered consumer: \`/backfill lineage confirm ${proposal.id} as <consumer>\``,
    `• It is a new consumer: \`/backfill lineage confirm ${proposal.id} <owner member id> report|export|model [name]\` (name: \`${slackCode(proposal.suggestedName)}\` unless you give one)`,
    `• It is nobody's business: \`/backfill lineage reject ${proposal.id} [reason]\``,
  ].join('\n');
  return {
    text: `Lineage proposal #${proposal.id}: unknown job ${slackText(fit(proposal.jobNamespace, NAME_SHOWN))}/${slackText(fit(proposal.jobName, NAME_SHOWN))} read ${readsLine(proposal)}`,
    blocks: limitBlocks([
      ...sections('', [intro, held]),
      section(how),
      context(`Proposed ${formatTime(proposal.proposedAt)}. Operators only.`),
    ], LIMITS.messageBlocks, `\`/backfill lineage list\` shows the proposal again.`),
  };
}

export function lineageProposalsReply(proposals: LineageProposal[]): string {
  if (proposals.length === 0) return 'No lineage proposals are waiting.';
  return ['Lineage proposals waiting for an operator:', ...proposals.map((p) => `• #${p.id} ${job(p)}: ${readsLine(p)}`)].join('\n');
}

export function lineageDecisionReply(result: DecisionResult): string {
  const { proposal } = result;
  if (result.action === 'reject') {
    return `Lineage proposal #${proposal.id} rejected: ${job(proposal)} adds nothing to the read log (${result.dropped} pending read${result.dropped === 1 ? '' : 's'} dropped; its later events are ignored).`;
  }
  const how = result.action === 'map' ? 'is now known as the consumer' : 'is registered as the new consumer';
  return `Lineage proposal #${proposal.id} confirmed: ${job(proposal)} ${how} *${slackText(result.consumer ?? '?')}*, owned by ${slackPerson(result.owner ?? '?')}. ` +
    `${result.reads} pending read${result.reads === 1 ? '' : 's'} moved into the read log; its next events go there directly.`;
}
