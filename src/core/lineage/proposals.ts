import { recordEvent } from '../../db/events.js';
import {
  dropPendingReads, findConsumerOwner, findProposal, insertJobMapping, insertLineageConsumer, listOpenProposals, movePendingReads,
  recordProposalDecision, resolvePendingReadsWithoutHours, type LineageProposal,
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

type ConsumerKind = 'report' | 'export' | 'model';

/**
 * The job's read rule, given with a confirmation: a run of it that names no hours (no partitions facet, no
 * nominal time, no subset facet the bot can read) read the `hoursToWatermark` hours up to its pipeline's
 * watermark at the event's time. Those reads are marked inferred in the read log.
 */
interface ReadRule {
  hoursToWatermark?: number | undefined;
}

export type LineageDecision =
  /** The job is a consumer that does not exist yet: register it, owned by `owner`. */
  | ({ action: 'create'; proposalId: number; owner: string; consumerKind: ConsumerKind; name?: string | undefined } & ReadRule)
  /** The job is a consumer already registered (its owner and re-trigger are the catalog's). */
  | ({ action: 'map'; proposalId: number; consumer: string } & ReadRule)
  | { action: 'reject'; proposalId: number; reason?: string | undefined };

export interface DecisionResult {
  proposal: LineageProposal;
  action: LineageDecision['action'];
  consumer: string | null;
  owner: string | null;
  /** Read log rows written from the pending reads (0 on a rejection), the inferred ones included. */
  reads: number;
  /** Of those, the rows the read rule inferred from pending reads whose runs named no hours. */
  inferred: number;
  /** The job's read rule as confirmed (null: none). */
  readsHoursToWatermark: number | null;
  /** Pending reads dropped: all of them on a rejection; those without hours on a confirmation without a read rule. */
  dropped: number;
}

/**
 * What a consumer registered from lineage is re-triggered with: nothing. The bot cannot re-run a job another
 * system schedules; the consumer is told before (notify_rule 'before') and its owner reruns it. An operator can
 * give it a real re-trigger in backfill.consumers afterwards.
 */
const LINEAGE_RETRIGGER = {
  kind: 'sql',
  statements: ['-- registered from OpenLineage: the bot cannot re-run this job; its owner is told before a backfill and reruns it\nSELECT cardinality($1::timestamptz[])'],
} as const;

const CONSUMER_NAME = /^[a-z][a-z0-9_]{0,62}$/;
/** backfill.lineage_jobs.reads_hours_to_watermark's own bound (a month), whatever MAX_PARTITIONS says. */
const MAX_RULE_HOURS = 744;

export async function decideProposal(ctx: EngineContext, actor: string, decision: LineageDecision): Promise<DecisionResult> {
  return withTransaction(ctx.pool, async (tx) => {
    const proposal = await findProposal(tx, decision.proposalId, { forUpdate: true });
    if (!proposal) throw new BackfillError(ErrorCode.BadInput, `There is no lineage proposal #${decision.proposalId}. \`/backfill lineage list\` shows the open ones.`);
    if (proposal.state !== 'proposed') {
      throw new BackfillError(ErrorCode.WrongState,
        `Lineage proposal #${proposal.id} was ${proposal.state} by ${mention(proposal.decidedBy ?? '?')}${proposal.consumer ? ` (as ${proposal.consumer})` : ''}; nothing changed.`);
    }
    if (decision.action === 'reject') return reject(tx, actor, proposal, decision.reason);
    const rule = decision.hoursToWatermark ?? null;
    const mostHours = Math.min(ctx.config.MAX_PARTITIONS, MAX_RULE_HOURS);
    if (rule !== null && rule > mostHours) {
      throw new BackfillError(ErrorCode.BadInput,
        `A read rule of ${rule} hours is more than one read may name (MAX_PARTITIONS, ${mostHours}); give at most \`reads ${mostHours}h-to-watermark\`. Nothing changed.`);
    }
    const target = decision.action === 'map' ? await existingConsumer(tx, decision.consumer) : await newConsumer(tx, proposal, decision);
    const kind = decision.action === 'map' ? 'mapped to' : 'registered as';
    await recordEvent(tx, {
      actor, kind: 'lineage_confirmed',
      detail: { proposal: proposal.id, jobNamespace: proposal.jobNamespace, jobName: proposal.jobName, consumer: target.name, owner: target.owner, how: kind, readsHoursToWatermark: rule },
    });
    if (decision.action === 'create') await insertLineageConsumer(tx, { name: target.name, kind: decision.consumerKind, owner: target.owner, retrigger: LINEAGE_RETRIGGER });
    await insertJobMapping(tx, { jobNamespace: proposal.jobNamespace, jobName: proposal.jobName, consumer: target.name, confirmedBy: actor, readsHoursToWatermark: rule });
    await recordProposalDecision(tx, { id: proposal.id, state: 'confirmed', consumer: target.name, decidedBy: actor, note: null });
    const moved = await movePendingReads(tx, proposal.id, target.name);
    const withoutHours = await resolvePendingReadsWithoutHours(tx, proposal.id, target.name, rule);
    return {
      proposal, action: decision.action, consumer: target.name, owner: target.owner, reads: moved + withoutHours.inferred, inferred: withoutHours.inferred,
      readsHoursToWatermark: rule, dropped: rule === null ? withoutHours.taken : 0,
    };
  });
}

async function reject(tx: PoolClient, actor: string, proposal: LineageProposal, reason: string | undefined): Promise<DecisionResult> {
  await recordEvent(tx, { actor, kind: 'lineage_rejected', detail: { proposal: proposal.id, jobNamespace: proposal.jobNamespace, jobName: proposal.jobName, reason: reason ?? null } });
  await recordProposalDecision(tx, { id: proposal.id, state: 'rejected', consumer: null, decidedBy: actor, note: reason ?? null });
  const dropped = await dropPendingReads(tx, proposal.id);
  return { proposal, action: 'reject', consumer: null, owner: null, reads: 0, inferred: 0, readsHoursToWatermark: null, dropped };
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
