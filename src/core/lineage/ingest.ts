import { recordEvent } from '../../db/events.js';
import {
  findJobConsumer, insertPendingReads, insertReads, insertSeenEvent, listPipelineTables, lockOrCreateProposal,
  recordSeenOutcome, type LineageRead,
} from '../../db/lineageEvents.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
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
 */

export type IngestOutcome =
  | { kind: 'ignored'; reason: string }
  | { kind: 'duplicate' }
  | { kind: 'recorded'; consumer: string; reads: number }
  | { kind: 'pending'; proposalId: number; created: boolean; reads: number }
  | { kind: 'rejected_job'; proposalId: number };

const ACTOR = 'openlineage';

/** Checks the body, then records what it says. Throws BadInput (the HTTP 400's text) for a malformed event. */
export async function ingestRunEvent(ctx: EngineContext, body: unknown): Promise<IngestOutcome> {
  const event = parseRunEvent(body);
  if (event.eventType !== 'COMPLETE') {
    return { kind: 'ignored', reason: `a ${event.eventType ?? 'untyped'} event records nothing; only COMPLETE says what a run read` };
  }
  const reads = await pipelineReads(ctx, event);
  if (reads.length === 0) return { kind: 'ignored', reason: "none of its inputs is a pipeline's table" };
  return withTransaction(ctx.pool, (tx) => recordReads(tx, event, reads));
}

/** The reads of the inputs that are pipelines' tables, at the event's time. Hours are checked here (400s). */
async function pipelineReads(ctx: EngineContext, event: RunEvent): Promise<LineageRead[]> {
  const tables = await listPipelineTables(ctx.pool);
  const readAt = new Date(event.eventTime);
  return event.inputs.flatMap((input, index) => {
    const table = tables.find((t) => namesTable(input.name, t.targetTable));
    if (!table) return [];
    return hoursRead(event, index).map((partitionHour) => ({ pipeline: table.pipeline, partitionHour, readAt }));
  });
}

async function recordReads(tx: PoolClient, event: RunEvent, reads: LineageRead[]): Promise<IngestOutcome> {
  const job = { jobNamespace: event.job.namespace, jobName: event.job.name };
  const eventType = event.eventType ?? 'OTHER';
  const fresh = await insertSeenEvent(tx, { runId: event.run.runId, eventType, ...job, eventTime: new Date(event.eventTime) });
  if (!fresh) return { kind: 'duplicate' };
  const mapped = await findJobConsumer(tx, job.jobNamespace, job.jobName);
  if (mapped) return recorded(tx, event, mapped, reads);
  const proposal = await lockOrCreateProposal(tx, { ...job, suggestedName: suggestConsumerName(job.jobName) });
  if (proposal.state === 'confirmed' && proposal.consumer) return recorded(tx, event, proposal.consumer, reads);
  if (proposal.state === 'rejected') {
    await recordSeenOutcome(tx, event.run.runId, eventType, 'rejected_job', 0);
    return { kind: 'rejected_job', proposalId: proposal.id };
  }
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
