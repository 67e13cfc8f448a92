import { recordEvent } from '../../db/events.js';
import {
  dropPendingReads, findConsumerOwner, findProposal, insertJobMapping, insertLineageConsumer, listOpenProposals, movePendingReads,
  recordProposalDecision, type LineageProposal,
} from '../../db/lineageEvents.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { mention } from '../messenger.js';
import { typedText } from '../../markup.js';

// An operator's decision on a lineage proposal (an unknown job that read a pipeline's table). Who may decide is
// the command table's rule (operators, src/core/authorization.ts), applied by the front end before this runs.
// The decision is a timeline row first, then its effect, in one transaction with the proposal locked: a run
// event of the same job arriving meanwhile waits for it (src/core/lineage/ingest.ts).

export type ConsumerKind = 'report' | 'export' | 'model';

export type LineageDecision =
  /** The job is a consumer that does not exist yet: register it, owned by `owner`. */
  | { action: 'create'; proposalId: number; owner: string; consumerKind: ConsumerKind; name?: string | undefined }
  /** The job is a consumer already registered (its owner and re-trigger are the catalog's). */
  | { action: 'map'; proposalId: number; consumer: string }
  | { action: 'reject'; proposalId: number; reason?: string | undefined };

export interface DecisionResult {
  proposal: LineageProposal;
  action: LineageDecision['action'];
  consumer: string | null;
  owner: string | null;
  /** Read log rows written from the pending reads (0 on a rejection). */
  reads: number;
  /** Pending reads dropped (a rejection). */
  dropped: number;
}

/**
 * What a consumer registered from lineage is re-triggered with: nothing. The bot cannot re-run a job another
 * system schedules; the consumer is told before (notify_rule 'before') and its owner reruns it. An operator can
 * give it a real re-trigger in backfill.consumers afterwards.
 */
export const LINEAGE_RETRIGGER = {
  kind: 'sql',
  statements: ['-- registered from OpenLineage: the bot cannot re-run this job; its owner is told before a backfill and reruns it\nSELECT cardinality($1::timestamptz[])'],
} as const;

const CONSUMER_NAME = /^[a-z][a-z0-9_]{0,62}$/;

export async function decideProposal(ctx: EngineContext, actor: string, decision: LineageDecision): Promise<DecisionResult> {
  return withTransaction(ctx.pool, async (tx) => {
    const proposal = await findProposal(tx, decision.proposalId, { forUpdate: true });
    if (!proposal) throw new BackfillError(ErrorCode.BadInput, `There is no lineage proposal #${decision.proposalId}. \`/backfill lineage list\` shows the open ones.`);
    if (proposal.state !== 'proposed') {
      throw new BackfillError(ErrorCode.WrongState,
        `Lineage proposal #${proposal.id} was ${proposal.state} by ${mention(proposal.decidedBy ?? '?')}${proposal.consumer ? ` (as ${proposal.consumer})` : ''}; nothing changed.`);
    }
    if (decision.action === 'reject') return reject(tx, actor, proposal, decision.reason);
    const target = decision.action === 'map' ? await existingConsumer(tx, decision.consumer) : await newConsumer(tx, proposal, decision);
    const kind = decision.action === 'map' ? 'mapped to' : 'registered as';
    await recordEvent(tx, { actor, kind: 'lineage_confirmed', detail: { proposal: proposal.id, jobNamespace: proposal.jobNamespace, jobName: proposal.jobName, consumer: target.name, owner: target.owner, how: kind } });
    if (decision.action === 'create') await insertLineageConsumer(tx, { name: target.name, kind: decision.consumerKind, owner: target.owner, retrigger: LINEAGE_RETRIGGER });
    await insertJobMapping(tx, { jobNamespace: proposal.jobNamespace, jobName: proposal.jobName, consumer: target.name, confirmedBy: actor });
    await recordProposalDecision(tx, { id: proposal.id, state: 'confirmed', consumer: target.name, decidedBy: actor, note: null });
    const reads = await movePendingReads(tx, proposal.id, target.name);
    return { proposal, action: decision.action, consumer: target.name, owner: target.owner, reads, dropped: 0 };
  });
}

async function reject(tx: PoolClient, actor: string, proposal: LineageProposal, reason: string | undefined): Promise<DecisionResult> {
  await recordEvent(tx, { actor, kind: 'lineage_rejected', detail: { proposal: proposal.id, jobNamespace: proposal.jobNamespace, jobName: proposal.jobName, reason: reason ?? null } });
  await recordProposalDecision(tx, { id: proposal.id, state: 'rejected', consumer: null, decidedBy: actor, note: reason ?? null });
  const dropped = await dropPendingReads(tx, proposal.id);
  return { proposal, action: 'reject', consumer: null, owner: null, reads: 0, dropped };
}

async function existingConsumer(tx: PoolClient, name: string): Promise<{ name: string; owner: string }> {
  const owner = await findConsumerOwner(tx, name);
  if (!owner) {
    throw new BackfillError(ErrorCode.UnknownConsumer,
      `There is no consumer called "${typedText(name)}". To register the job as a new one, give its owner and kind instead: \`/backfill lineage confirm <id> @owner report|export|model [name]\`.`);
  }
  return { name, owner };
}

async function newConsumer(tx: PoolClient, proposal: LineageProposal, decision: Extract<LineageDecision, { action: 'create' }>): Promise<{ name: string; owner: string }> {
  const name = decision.name ?? proposal.suggestedName;
  if (!CONSUMER_NAME.test(name)) {
    throw new BackfillError(ErrorCode.BadInput, `"${typedText(name)}" cannot be a consumer name: lower-case letters, digits and _, starting with a letter (at most 63).`);
  }
  const owner = await findConsumerOwner(tx, name);
  if (owner) {
    throw new BackfillError(ErrorCode.BadInput,
      `There is already a consumer called ${name} (owned by ${mention(owner)}). If the job is that consumer: \`/backfill lineage confirm ${proposal.id} as ${name}\`; otherwise give another name.`);
  }
  return { name, owner: decision.owner };
}

export async function listProposals(ctx: EngineContext): Promise<LineageProposal[]> {
  return listOpenProposals(ctx.pool);
}
