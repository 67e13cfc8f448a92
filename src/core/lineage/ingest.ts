import { recordEvent } from '../../db/events.js';
import {
  findJobConsumer, insertPendingReads, insertReads, insertSeenEvent, listPipelineTables, lockOrCreateProposal,
  lockProposal, recordSeenOutcome, type LineageRead,
} from '../../db/lineageEvents.js';
import { countOpenProposals, lockSenderProposals, takeReadAllowance } from '../../db/lineageLimits.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { LineageSender } from '../../config.js';
import type { EngineContext } from '../context.js';
import { hoursRead, namesTable, parseRunEvent, suggestConsumerName, type RunEvent } from './runEvent.js';

/*
 * A run event in (POST /lineage, src/http/lineage.ts), as a state of the job it names:
 *
 *   mapped job (backfill.lineage_jobs)        its reads go straight into backfill.read_log as its consumer's
 *   unknown job, first event                  a proposal is created and the reads kept pending on it
 *   proposed job                              the reads are kept pending on its proposal
 *   confirmed (an operator chose a consumer)  = mapped; the pending reads moved into the read log then
 *   rejected                                  the event is kept as seen and adds nothing
 *
 * Only a COMPLETE event says the job read what it names; the others are answered and ignored. An event whose
 * inputs name no pipeline's table is none of the bot's business and is ignored too. A (runId, eventType) seen
 * before adds nothing: its key is inserted in the same transaction as the rows, so two copies arriving together
 * serialize on it.
 *
 * Each event comes from a sender (a token, src/http/lineage.ts), bounded three ways: it may name only jobs of
 * its namespaces (403); one input may name at most MAX_PARTITIONS hours (400); the read rows it writes come out
 * of its LINEAGE_READS_PER_HOUR bucket, and it may hold at most LINEAGE_MAX_OPEN_PROPOSALS open proposals (429).
 * The bucket and the proposal count are taken inside the event's transaction: a refusal writes nothing.
 */

export type IngestOutcome =
  | { kind: 'ignored'; reason: string }
  | { kind: 'duplicate' }
  | { kind: 'recorded'; consumer: string; reads: number }
  | { kind: 'pending'; proposalId: number; created: boolean; reads: number }
  | { kind: 'rejected_job'; proposalId: number };

const ACTOR = 'openlineage';
/** What a 429 for too many open proposals suggests waiting: they wait for an operator, not for a clock. */
const PROPOSALS_RETRY_AFTER_SECONDS = 3600;

/** Who sent the event: the sender's name and the job namespaces its token may post (null: every one). */
export type LineageSenderScope = Pick<LineageSender, 'name' | 'namespaces'>;

type Limits = Pick<EngineContext['config'], 'MAX_PARTITIONS' | 'LINEAGE_READS_PER_HOUR' | 'LINEAGE_MAX_OPEN_PROPOSALS'>;

/**
 * Checks the body, then records what it says. Throws BadInput (the HTTP 400's text) for a malformed event,
 * NotAllowed (403) for a job outside the sender's namespaces, RateLimited (429) past a sender's bound.
 */
export async function ingestRunEvent(ctx: EngineContext, body: unknown, sender: LineageSenderScope): Promise<IngestOutcome> {
  const event = parseRunEvent(body);
  if (sender.namespaces && !sender.namespaces.includes(event.job.namespace)) {
    throw new BackfillError(ErrorCode.NotAllowed,
      `The token of ${sender.name} may post events of the job namespaces ${sender.namespaces.join(', ')} only, and job.namespace is ${JSON.stringify(event.job.namespace)}; nothing was recorded. ` +
      'An operator can add the namespace to its entry in LINEAGE_TOKENS.');
  }
  if (event.eventType !== 'COMPLETE') {
    return { kind: 'ignored', reason: `a ${event.eventType ?? 'untyped'} event records nothing; only COMPLETE says what a run read` };
  }
  const reads = await pipelineReads(ctx, event);
  if (reads.length === 0) return { kind: 'ignored', reason: "none of its inputs is a pipeline's table" };
  if (reads.length > ctx.config.LINEAGE_READS_PER_HOUR) {
    throw new BackfillError(ErrorCode.BadInput,
      `The event names ${reads.length} read rows, more than a sender may write in an hour (LINEAGE_READS_PER_HOUR, ${ctx.config.LINEAGE_READS_PER_HOUR}); send one event per run, or fewer inputs.`);
  }
  return withTransaction(ctx.pool, (tx) => recordReads(tx, ctx.config, sender.name, event, reads));
}

/**
 * The reads of the inputs that are pipelines' tables, at the event's time. Hours are checked here (400s): at
 * most MAX_PARTITIONS per input, the most a backfill may span, so one small request cannot write a month of rows.
 */
async function pipelineReads(ctx: EngineContext, event: RunEvent): Promise<LineageRead[]> {
  const tables = await listPipelineTables(ctx.pool);
  const readAt = new Date(event.eventTime);
  return event.inputs.flatMap((input, index) => {
    const table = tables.find((t) => namesTable(input.name, t.targetTable));
    if (!table) return [];
    return hoursRead(event, index, ctx.config.MAX_PARTITIONS).map((partitionHour) => ({ pipeline: table.pipeline, partitionHour, readAt }));
  });
}

async function recordReads(tx: PoolClient, limits: Limits, sender: string, event: RunEvent, reads: LineageRead[]): Promise<IngestOutcome> {
  const job = { jobNamespace: event.job.namespace, jobName: event.job.name };
  const eventType = event.eventType ?? 'OTHER';
  const fresh = await insertSeenEvent(tx, { runId: event.run.runId, eventType, ...job, eventTime: new Date(event.eventTime) });
  if (!fresh) return { kind: 'duplicate' };
  const mapped = await findJobConsumer(tx, job.jobNamespace, job.jobName);
  if (mapped) {
    await takeReads(tx, limits, sender, reads.length);
    return recorded(tx, event, mapped, reads);
  }
  const existing = await lockProposal(tx, job);
  const proposal = existing ? { ...existing, created: false } : await newProposal(tx, limits, sender, job);
  if (proposal.state === 'rejected') {
    await recordSeenOutcome(tx, event.run.runId, eventType, 'rejected_job', 0);
    return { kind: 'rejected_job', proposalId: proposal.id };
  }
  await takeReads(tx, limits, sender, reads.length);
  if (proposal.state === 'confirmed' && proposal.consumer) return recorded(tx, event, proposal.consumer, reads);
  const pending = await insertPendingReads(tx, proposal.id, reads);
  await recordSeenOutcome(tx, event.run.runId, eventType, 'pending', pending);
  if (proposal.created) {
    await recordEvent(tx, { actor: ACTOR, kind: 'lineage_proposed', detail: { proposal: proposal.id, ...job, runId: event.run.runId } });
  }
  return { kind: 'pending', proposalId: proposal.id, created: proposal.created, reads: pending };
}

async function recorded(tx: PoolClient, event: RunEvent, consumer: string, reads: LineageRead[]): Promise<IngestOutcome> {
  const written = await insertReads(tx, consumer, reads);
  await recordSeenOutcome(tx, event.run.runId, event.eventType ?? 'OTHER', 'recorded', written);
  return { kind: 'recorded', consumer, reads: written };
}

/** A proposal for a job nobody has proposed yet, unless the sender has as many open as it may (429). */
async function newProposal(tx: PoolClient, limits: Limits, sender: string, job: { jobNamespace: string; jobName: string }): Promise<Awaited<ReturnType<typeof lockOrCreateProposal>>> {
  await lockSenderProposals(tx, sender);
  const open = await countOpenProposals(tx, sender);
  if (open >= limits.LINEAGE_MAX_OPEN_PROPOSALS) {
    throw new BackfillError(ErrorCode.RateLimited,
      `${sender} has ${open} lineage proposals waiting for an operator, as many as a sender may (LINEAGE_MAX_OPEN_PROPOSALS); this event of an unknown job was not recorded. ` +
      'Send it again once an operator has confirmed or rejected some (`/backfill lineage list`).',
      { details: { retryAfterSeconds: PROPOSALS_RETRY_AFTER_SECONDS } });
  }
  return lockOrCreateProposal(tx, { ...job, suggestedName: suggestConsumerName(job.jobName), proposedBy: sender });
}

/** The event's read rows out of the sender's hourly bucket, or a 429 saying when they fit again. */
async function takeReads(tx: PoolClient, limits: Limits, sender: string, count: number): Promise<void> {
  const retryAfterSeconds = await takeReadAllowance(tx, sender, count, limits.LINEAGE_READS_PER_HOUR);
  if (retryAfterSeconds > 0) {
    throw new BackfillError(ErrorCode.RateLimited,
      `${sender} has written as many read rows as it may in an hour (LINEAGE_READS_PER_HOUR, ${limits.LINEAGE_READS_PER_HOUR}); this event's ${count} were not recorded. Send it again in ${retryAfterSeconds} s.`,
      { details: { retryAfterSeconds } });
  }
}
