import type { webApi } from '@slack/bolt';
import type { Config } from '../../config.js';
import { findProposal } from '../../db/lineageEvents.js';
import type { Pool } from '../../db/pool.js';
import { lineageProposalMessage } from '../../views/lineage.js';

// Lineage proposals on Slack: posted to the operators when POST /lineage creates one; decided by
// `/backfill lineage …` (src/commands/run.ts).

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
