import { redact } from '../redaction.js';
import type { Queryable } from './pool.js';

// OpenLineage in and out (migrations/0012_lineage.sql): the job → consumer mapping, proposals for unknown jobs
// and their pending reads, the run events acted on (the dedupe key), and the bot's own emitted events.
// (src/db/lineage.ts is something else: a backfill's rollback generations.)

export type LineageEventType = 'START' | 'RUNNING' | 'COMPLETE' | 'ABORT' | 'FAIL' | 'OTHER';
export type EmittedEventType = 'START' | 'COMPLETE' | 'ABORT' | 'FAIL';
export type ProposalState = 'proposed' | 'confirmed' | 'rejected';

/** One read: a pipeline's partition hour, read at the event's time. */
export interface LineageRead {
  pipeline: string;
  partitionHour: Date;
  readAt: Date;
}

export interface LineageProposal {
  id: number;
  jobNamespace: string;
  jobName: string;
  suggestedName: string;
  state: ProposalState;
  proposedAt: Date;
  consumer: string | null;
  decidedBy: string | null;
  decidedAt: Date | null;
  /** Reads waiting for the decision, per pipeline: hours, first and last. */
  pending: { pipeline: string; hours: number; first: Date; last: Date }[];
}

/** The pipelines' target tables, which an input dataset's name is matched against. */
export async function listPipelineTables(db: Queryable): Promise<{ pipeline: string; targetTable: string }[]> {
  const { rows } = await db.query<{ pipeline: string; targetTable: string }>(
    'SELECT name AS pipeline, target_table AS "targetTable" FROM backfill.pipelines ORDER BY name');
  return rows;
}

/**
 * Marks a run event as seen. False when it was seen before (or is being recorded by a concurrent request, which
 * this insert waits for): the caller then writes nothing.
 */
export async function insertSeenEvent(tx: Queryable, event: {
  runId: string; eventType: LineageEventType; jobNamespace: string; jobName: string; eventTime: Date;
}): Promise<boolean> {
  const { rowCount } = await tx.query(
    `INSERT INTO backfill.lineage_events (run_id, event_type, job_namespace, job_name, event_time, outcome)
     VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz, 'recorded')
     ON CONFLICT (run_id, event_type) DO NOTHING`,
    [event.runId, event.eventType, event.jobNamespace, event.jobName, event.eventTime]);
  return rowCount === 1;
}

export async function recordSeenOutcome(tx: Queryable, runId: string, eventType: LineageEventType, outcome: 'recorded' | 'pending' | 'rejected_job', reads: number): Promise<void> {
  await tx.query('UPDATE backfill.lineage_events SET outcome = $3::text, reads = $4::int WHERE run_id = $1::uuid AND event_type = $2::text',
    [runId, eventType, outcome, reads]);
}

/** The consumer an operator confirmed this job to be, if any. */
export async function findJobConsumer(db: Queryable, jobNamespace: string, jobName: string): Promise<string | undefined> {
  const { rows } = await db.query<{ consumer: string }>(
    'SELECT consumer FROM backfill.lineage_jobs WHERE job_namespace = $1::text AND job_name = $2::text', [jobNamespace, jobName]);
  return rows[0]?.consumer;
}

export async function insertJobMapping(tx: Queryable, mapping: { jobNamespace: string; jobName: string; consumer: string; confirmedBy: string }): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.lineage_jobs (job_namespace, job_name, consumer, confirmed_by) VALUES ($1::text, $2::text, $3::text, $4::text)`,
    [mapping.jobNamespace, mapping.jobName, mapping.consumer, mapping.confirmedBy]);
}

/** Writes read log rows; a row already there (the same read) is kept once. Returns how many were new. */
export async function insertReads(tx: Queryable, consumer: string, reads: LineageRead[]): Promise<number> {
  const { rowCount } = await tx.query(
    `INSERT INTO backfill.read_log (consumer, pipeline, partition_hour, read_at)
     SELECT $1::text, r.pipeline, r.partition_hour, r.read_at
     FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[]) AS r(pipeline, partition_hour, read_at)
     ON CONFLICT DO NOTHING`,
    [consumer, reads.map((r) => r.pipeline), reads.map((r) => r.partitionHour), reads.map((r) => r.readAt)]);
  return rowCount ?? 0;
}

/**
 * The job's proposal, created when it has none, and locked until the transaction ends: a confirmation running at
 * the same moment either finished first (the row says confirmed) or waits for these pending reads.
 */
export async function lockOrCreateProposal(tx: Queryable, job: { jobNamespace: string; jobName: string; suggestedName: string; proposedBy: string }): Promise<{ id: number; state: ProposalState; consumer: string | null; created: boolean }> {
  const inserted = await tx.query<{ id: number }>(
    `INSERT INTO backfill.lineage_proposals (job_namespace, job_name, suggested_name, proposed_by) VALUES ($1::text, $2::text, $3::text, $4::text)
     ON CONFLICT (job_namespace, job_name) DO NOTHING RETURNING id::int`,
    [job.jobNamespace, job.jobName, job.suggestedName, job.proposedBy]);
  const row = await lockProposal(tx, job);
  if (!row) throw new Error(`the lineage proposal of ${job.jobNamespace}/${job.jobName} vanished inside its transaction`);
  return { ...row, created: inserted.rowCount === 1 };
}

/** The job's proposal, locked until the transaction ends; undefined when it has none yet. */
export async function lockProposal(tx: Queryable, job: { jobNamespace: string; jobName: string }): Promise<{ id: number; state: ProposalState; consumer: string | null } | undefined> {
  const { rows } = await tx.query<{ id: number; state: ProposalState; consumer: string | null }>(
    `SELECT id::int, state, consumer FROM backfill.lineage_proposals WHERE job_namespace = $1::text AND job_name = $2::text FOR UPDATE`,
    [job.jobNamespace, job.jobName]);
  return rows[0];
}

export async function insertPendingReads(tx: Queryable, proposalId: number, reads: LineageRead[]): Promise<number> {
  const { rowCount } = await tx.query(
    `INSERT INTO backfill.lineage_pending_reads (proposal_id, pipeline, partition_hour, read_at)
     SELECT $1::bigint, r.pipeline, r.partition_hour, r.read_at
     FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[]) AS r(pipeline, partition_hour, read_at)
     ON CONFLICT DO NOTHING`,
    [proposalId, reads.map((r) => r.pipeline), reads.map((r) => r.partitionHour), reads.map((r) => r.readAt)]);
  return rowCount ?? 0;
}

const SELECT_PROPOSAL = `
  SELECT p.id::int, p.job_namespace AS "jobNamespace", p.job_name AS "jobName", p.suggested_name AS "suggestedName", p.state,
         p.proposed_at AS "proposedAt", p.consumer, p.decided_by AS "decidedBy", p.decided_at AS "decidedAt",
         coalesce((SELECT json_agg(json_build_object('pipeline', q.pipeline, 'hours', q.hours, 'first', q.first, 'last', q.last) ORDER BY q.pipeline)
                   FROM (SELECT pipeline, count(DISTINCT partition_hour)::int AS hours, min(partition_hour) AS first, max(partition_hour) AS last
                         FROM backfill.lineage_pending_reads WHERE proposal_id = p.id GROUP BY pipeline) q), '[]') AS pending
  FROM backfill.lineage_proposals p`;

interface ProposalRow extends Omit<LineageProposal, 'pending'> {
  pending: { pipeline: string; hours: number; first: string; last: string }[];
}

function toProposal(row: ProposalRow): LineageProposal {
  return { ...row, pending: row.pending.map((p) => ({ ...p, first: new Date(p.first), last: new Date(p.last) })) };
}

/** One proposal with its pending reads; `forUpdate` locks it (the decision's transaction). */
export async function findProposal(db: Queryable, id: number, options: { forUpdate?: boolean } = {}): Promise<LineageProposal | undefined> {
  if (options.forUpdate) await db.query('SELECT 1 FROM backfill.lineage_proposals WHERE id = $1::bigint FOR UPDATE', [id]);
  const { rows } = await db.query<ProposalRow>(`${SELECT_PROPOSAL} WHERE p.id = $1::bigint`, [id]);
  return rows[0] ? toProposal(rows[0]) : undefined;
}

export async function listOpenProposals(db: Queryable): Promise<LineageProposal[]> {
  const { rows } = await db.query<ProposalRow>(`${SELECT_PROPOSAL} WHERE p.state = 'proposed' ORDER BY p.id`);
  return rows.map(toProposal);
}

export async function recordProposalDecision(tx: Queryable, decision: { id: number; state: 'confirmed' | 'rejected'; consumer: string | null; decidedBy: string; note: string | null }): Promise<void> {
  await tx.query(
    `UPDATE backfill.lineage_proposals SET state = $2::text, consumer = $3::text, decided_by = $4::text, decided_at = now(), decision_note = $5::text
     WHERE id = $1::bigint AND state = 'proposed'`,
    [decision.id, decision.state, decision.consumer, decision.decidedBy, decision.note === null ? null : redact(decision.note)]);
}

/** A confirmation: the pending reads become the consumer's read log rows. Returns how many were new. */
export async function movePendingReads(tx: Queryable, proposalId: number, consumer: string): Promise<number> {
  const { rowCount } = await tx.query(
    `WITH moved AS (DELETE FROM backfill.lineage_pending_reads WHERE proposal_id = $1::bigint RETURNING pipeline, partition_hour, read_at)
     INSERT INTO backfill.read_log (consumer, pipeline, partition_hour, read_at)
     SELECT $2::text, pipeline, partition_hour, read_at FROM moved
     ON CONFLICT DO NOTHING`,
    [proposalId, consumer]);
  return rowCount ?? 0;
}

export async function dropPendingReads(tx: Queryable, proposalId: number): Promise<number> {
  const { rowCount } = await tx.query('DELETE FROM backfill.lineage_pending_reads WHERE proposal_id = $1::bigint', [proposalId]);
  return rowCount ?? 0;
}

/** A consumer registered by an operator's confirmation (see the retrigger's own comment for why it does nothing). */
export async function insertLineageConsumer(tx: Queryable, consumer: { name: string; kind: 'report' | 'export' | 'model'; owner: string; retrigger: unknown }): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.consumers (name, kind, owner, notify_rule, retrigger) VALUES ($1::text, $2::text, $3::text, 'before', $4::jsonb)`,
    [consumer.name, consumer.kind, consumer.owner, JSON.stringify(consumer.retrigger)]);
}

export async function findConsumerOwner(db: Queryable, name: string): Promise<string | undefined> {
  const { rows } = await db.query<{ owner: string }>('SELECT owner FROM backfill.consumers WHERE name = $1::text', [name]);
  return rows[0]?.owner;
}

/** What a backfill's run events are made of. */
export interface BackfillRunFacts {
  id: number;
  pipeline: string;
  targetTable: string;
  state: string;
  announcedAt: Date;
  ranAt: Date | null;
  finishedAt: Date | null;
  failure: string | null;
  /** Who stopped it, when an operator did. */
  stoppedBy: string | null;
  hours: Date[];
}

export async function findBackfillRunFacts(db: Queryable, backfillId: number): Promise<BackfillRunFacts | undefined> {
  const { rows } = await db.query<BackfillRunFacts>(
    `SELECT b.id::int, b.pipeline, p.target_table AS "targetTable", b.state, b.announced_at AS "announcedAt", b.ran_at AS "ranAt",
            b.finished_at AS "finishedAt", b.failure, b.stopped_by AS "stoppedBy",
            coalesce((SELECT array_agg(t.partition_hour ORDER BY t.partition_hour) FROM backfill.backfill_targets t WHERE t.backfill_id = b.id), '{}') AS hours
     FROM backfill.backfills b JOIN backfill.pipelines p ON p.name = b.pipeline WHERE b.id = $1::bigint`, [backfillId]);
  return rows[0];
}

/** The intent to send one run event: true when this caller wrote it and so is the one to send it. */
export async function insertEmissionIntent(db: Queryable, backfillId: number, eventType: EmittedEventType, runId: string): Promise<boolean> {
  const { rowCount } = await db.query(
    `INSERT INTO backfill.lineage_emissions (backfill_id, event_type, run_id) VALUES ($1::bigint, $2::text, $3::uuid) ON CONFLICT DO NOTHING`,
    [backfillId, eventType, runId]);
  return rowCount === 1;
}

/** The endpoint's answer or the fault, redacted: an endpoint can echo the key it was sent. */
export async function recordEmissionResult(db: Queryable, backfillId: number, eventType: EmittedEventType, result: { status?: number; error?: string }): Promise<void> {
  await db.query(
    `UPDATE backfill.lineage_emissions SET sent_at = CASE WHEN $4::text IS NULL THEN now() END, http_status = $3::int, error = $4::text
     WHERE backfill_id = $1::bigint AND event_type = $2::text`,
    [backfillId, eventType, result.status ?? null, result.error === undefined ? null : redact(result.error)]);
}
