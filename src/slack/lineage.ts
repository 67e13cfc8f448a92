import type { webApi } from '@slack/bolt';
import type { Config } from '../config.js';
import type { EngineContext } from '../core/context.js';
import { decideProposal, listProposals } from '../core/lineage/proposals.js';
import { findProposal } from '../db/lineageEvents.js';
import type { Pool } from '../db/pool.js';
import { lineageDecisionReply, lineageProposalMessage, lineageProposalsReply } from '../views/lineage.js';
import type { Command } from '../commands/arguments.js';

// Lineage proposals on Slack: posted to the operators when POST /lineage creates one, and decided by
// `/backfill lineage …` (the command table's operator rule is applied before runLineageCommand runs).

export type LineageCommand = Extract<Command, { kind: 'lineage' }>;

/**
 * Where a proposal goes: the first of BACKFILL_CHANNELS (where operators run backfills, and so where they can
 * answer it), or, when no channel is configured, a DM to each of BACKFILL_OPERATORS. Posted once, by the request
 * that created the proposal; `/backfill lineage list` shows it again whenever needed.
 */
export async function postLineageProposal(client: webApi.WebClient, pool: Pool, config: Config, proposalId: number): Promise<void> {
  const proposal = await findProposal(pool, proposalId);
  if (!proposal) return;
  const message = lineageProposalMessage(proposal);
  const channel = config.BACKFILL_CHANNELS[0];
  if (channel) {
    await client.chat.postMessage({ channel, ...message });
    return;
  }
  for (const operator of config.BACKFILL_OPERATORS) {
    const opened = await client.conversations.open({ users: operator });
    if (opened.channel?.id) await client.chat.postMessage({ channel: opened.channel.id, ...message });
  }
}

/** The text a lineage command answers with (ephemeral on Slack, a line on the CLI). */
export async function runLineageCommand(ctx: EngineContext, actor: string, command: LineageCommand): Promise<string> {
  if (command.action === 'list') return lineageProposalsReply(await listProposals(ctx));
  return lineageDecisionReply(await decideProposal(ctx, actor, command));
}
