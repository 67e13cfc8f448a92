import type { DecisionResult } from '../core/lineage/proposals.js';
import type { LineageProposal } from '../db/lineageEvents.js';
import type { Message } from './blocks.js';
import { formatHourRange, formatTime, slackPerson } from './format.js';
import { slackText } from '../markup.js';
import { context, fit, limitBlocks, LIMITS, section, sections } from './layout.js';

// Lineage proposals in Slack, built by pure functions: the proposal posted to the operators, and the slash
// command's answers. A proposal is decided by a command, not a button: the decision needs the owner's id and the
// consumer's kind, which a button cannot carry, and the command goes through the command table's operator rule.

// A job's namespace and name are whatever the sender wrote: escaped, their backticks defused, and bounded (a
// name is shown in every line that lists the proposal).
const NAME_SHOWN = 200;

function job(proposal: LineageProposal): string {
  return `\`${slackText(fit(proposal.jobNamespace, NAME_SHOWN))}\` / \`${slackText(fit(proposal.jobName, NAME_SHOWN))}\``;
}

const plural = (count: number, word: string) => `${count} ${word}${count === 1 ? '' : 's'}`;

function readsLine(proposal: LineageProposal): string {
  const withHours = proposal.pending.map((p) => `${slackText(p.pipeline)}: ${plural(p.hours, 'hour')} (${formatHourRange(p.first, p.last)})`);
  const withoutHours = (proposal.withoutHours ?? []).map((w) => `${slackText(w.pipeline)}: ${plural(w.reads, 'run')} that named no hours`);
  const all = [...withHours, ...withoutHours];
  return all.length === 0 ? 'no reads pending' : all.join('; ');
}

/** What a read rule would do for the proposal's reads without hours, when it has some. */
function ruleHint(proposal: LineageProposal): string | undefined {
  if ((proposal.withoutHours ?? []).length === 0) return undefined;
  return 'Some of its runs named no hours (producers such as dbt, Spark and Flink send no nominal time): end the confirmation with ' +
    '`reads <N>h-to-watermark` to count each such run as reading the N hours up to the watermark at its time (marked inferred); without it they are dropped.';
}

/** The proposal as the operators see it: who the job is, what it read, and the commands that decide it. */
export function lineageProposalMessage(proposal: LineageProposal): Message {
  const intro = `:mag: *Lineage proposal #${proposal.id}*: an OpenLineage job the bot does not know read a pipeline's table: ${job(proposal)}.`;
  const held = `Read so far: ${readsLine(proposal)}. These reads are kept aside, not in the read log, until an operator says who the job is: ` +
    'until then no backfill announcement names it, and nobody becomes an owner because a job said so.';
  const how = [
    `• It is a registered consumer: \`/backfill lineage confirm ${proposal.id} as <consumer> [reads <N>h-to-watermark]\``,
    `• It is a new consumer: \`/backfill lineage confirm ${proposal.id} <owner member id> report|export|model [name] [reads <N>h-to-watermark]\` (name: \`${slackText(proposal.suggestedName)}\` unless you give one)`,
    `• It is nobody's business: \`/backfill lineage reject ${proposal.id} [reason]\``,
  ].join('\n');
  const hint = ruleHint(proposal);
  return {
    text: `Lineage proposal #${proposal.id}: unknown job ${slackText(fit(proposal.jobNamespace, NAME_SHOWN))}/${slackText(fit(proposal.jobName, NAME_SHOWN))} read ${readsLine(proposal)}`,
    blocks: limitBlocks([
      ...sections('', hint ? [intro, held, hint] : [intro, held]),
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
    return `Lineage proposal #${proposal.id} rejected: ${job(proposal)} adds nothing to the read log (${plural(result.dropped, 'pending read')} dropped; its later events are ignored).`;
  }
  const how = result.action === 'map' ? 'is now known as the consumer' : 'is registered as the new consumer';
  const inferred = result.inferred > 0 ? ` (${result.inferred} of them inferred by its read rule)` : '';
  const rule = result.readsHoursToWatermark === null
    ? (result.dropped > 0 ? ` ${plural(result.dropped, 'pending read')} that named no hours dropped: it has no read rule.` : '')
    : ` Read rule: a run that names no hours read the ${plural(result.readsHoursToWatermark, 'hour')} up to the watermark at its time.`;
  return `Lineage proposal #${proposal.id} confirmed: ${job(proposal)} ${how} *${slackText(result.consumer ?? '?')}*, owned by ${slackPerson(result.owner ?? '?')}. ` +
    `${plural(result.reads, 'pending read')} moved into the read log${inferred}; its next events go there directly.${rule}`;
}
