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
  /** Worked out from the job's read rule rather than named by the event (read_log.inferred). */
  inferred?: boolean;
}

/** A read whose run named no hours: the pipeline and when (a proposed job's, until an operator decides). */
export interface ReadWithoutHours {
  pipeline: string;
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
  /** Reads waiting whose runs named no hours, per pipeline: a read rule given with the confirmation infers them. Absent: none. */
  withoutHours?: { pipeline: string; reads: number }[];
}

/** A job an operator confirmed: its consumer, and its read rule (null: none). */
export interface JobMapping {
  consumer: string;
  readsHoursToWatermark: number | null;
}

/** The pipelines' target tables, which an input dataset's name is matched against, and their partition columns. */
export async function listPipelineTables(db: Queryable): Promise<{ pipeline: string; targetTable: string; partitionColumn: string }[]> {
  const { rows } = await db.query<{ pipeline: string; targetTable: string; partitionColumn: string }>(
    'SELECT name AS pipeline, target_table AS "targetTable", partition_column AS "partitionColumn" FROM backfill.pipelines ORDER BY name');
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

/** The consumer an operator confirmed this job to be, with its read rule, if any. */
export async function findJobMapping(db: Queryable, jobNamespace: string, jobName: string): Promise<JobMapping | undefined> {
  const { rows } = await db.query<JobMapping>(
    `SELECT consumer, reads_hours_to_watermark AS "readsHoursToWatermark" FROM backfill.lineage_jobs WHERE job_namespace = $1::text AND job_name = $2::text`,
    [jobNamespace, jobName]);
  return rows[0];
}

export async function insertJobMapping(tx: Queryable, mapping: { jobNamespace: string; jobName: string; consumer: string; confirmedBy: string; readsHoursToWatermark?: number | null | undefined }): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.lineage_jobs (job_namespace, job_name, consumer, confirmed_by, reads_hours_to_watermark) VALUES ($1::text, $2::text, $3::text, $4::text, $5::int)`,
    [mapping.jobNamespace, mapping.jobName, mapping.consumer, mapping.confirmedBy, mapping.readsHoursToWatermark ?? null]);
}

/** Writes read log rows; a row already there (the same read) is kept once. Returns how many were new. */
export async function insertReads(tx: Queryable, consumer: string, reads: LineageRead[]): Promise<number> {
  const { rowCount } = await tx.query(
    `INSERT INTO backfill.read_log (consumer, pipeline, partition_hour, read_at, inferred)
     SELECT $1::text, r.pipeline, r.partition_hour, r.read_at, r.inferred
     FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[], $5::boolean[]) AS r(pipeline, partition_hour, read_at, inferred)
     ON CONFLICT DO NOTHING`,
    [consumer, reads.map((r) => r.pipeline), reads.map((r) => r.partitionHour), reads.map((r) => r.readAt), reads.map((r) => r.inferred ?? false)]);
  return rowCount ?? 0;
}

/**
 * Where the pipeline's watermark stood at `at` (backfill.watermark_history, written by a trigger on every move),
 * or null when it had none yet then.
 */
export async function findWatermarkAt(db: Queryable, pipeline: string, at: Date): Promise<Date | null> {
  const { rows } = await db.query<{ processedThrough: Date }>(
    `SELECT processed_through AS "processedThrough" FROM backfill.watermark_history
     WHERE pipeline = $1::text AND valid_from <= $2::timestamptz ORDER BY valid_from DESC LIMIT 1`, [pipeline, at]);
  return rows[0]?.processedThrough ?? null;
}

// ---- a run's events before its COMPLETE (backfill.lineage_runs, lineage_run_inputs) ------------------------

/** An input a run's event named that is a pipeline's table, with the hours the event's facets named (empty: none). */
export interface NotedInput {
  pipeline: string;
  reportedHours: Date[];
  subsetHours: Date[];
}

export interface NotedRun {
  nominalStart: Date | null;
  nominalEnd: Date | null;
  inputs: NotedInput[];
}

/** How long a run that never completes keeps what its events named: a batch run open for a week has ended without saying. */
const RUN_KEPT = '7 days';

/**
 * Keeps what an event of a run that has not completed named: its nominal time (the first given stays) and its
 * pipeline inputs, whose hours add to those its earlier events named. Runs noted more than RUN_KEPT ago go first.
 * Returns how many inputs are new to the run (each is a row the sender is charged for), or undefined when the
 * run id is another job's run, which nothing of this event is added to.
 */
export async function noteRunInputs(tx: Queryable, run: {
  runId: string; jobNamespace: string; jobName: string; nominalStart: Date | null; nominalEnd: Date | null; inputs: NotedInput[];
}): Promise<number | undefined> {
  await tx.query(`DELETE FROM backfill.lineage_runs WHERE first_noted_at < now() - $1::interval`, [RUN_KEPT]);
  const { rowCount: runRow } = await tx.query(
    `INSERT INTO backfill.lineage_runs (run_id, job_namespace, job_name, nominal_start, nominal_end)
     VALUES ($1::uuid, $2::text, $3::text, $4::timestamptz, $5::timestamptz)
     ON CONFLICT (run_id) DO UPDATE SET nominal_start = coalesce(lineage_runs.nominal_start, EXCLUDED.nominal_start),
                                        nominal_end = CASE WHEN lineage_runs.nominal_start IS NULL THEN EXCLUDED.nominal_end ELSE lineage_runs.nominal_end END
     WHERE lineage_runs.job_namespace = EXCLUDED.job_namespace AND lineage_runs.job_name = EXCLUDED.job_name`,
    [run.runId, run.jobNamespace, run.jobName, run.nominalStart, run.nominalEnd]);
  if (runRow !== 1) return undefined;
  const { rows } = await tx.query<{ inserted: boolean }>(
    `INSERT INTO backfill.lineage_run_inputs (run_id, pipeline, reported_hours, subset_hours)
     SELECT $1::uuid, i.pipeline, coalesce(i.reported::timestamptz[], '{}'), coalesce(i.subset::timestamptz[], '{}')
     FROM unnest($2::text[], $3::text[], $4::text[]) AS i(pipeline, reported, subset)
     ON CONFLICT (run_id, pipeline) DO UPDATE
       SET reported_hours = ARRAY(SELECT DISTINCT h FROM unnest(lineage_run_inputs.reported_hours || EXCLUDED.reported_hours) AS h ORDER BY h),
           subset_hours = ARRAY(SELECT DISTINCT h FROM unnest(lineage_run_inputs.subset_hours || EXCLUDED.subset_hours) AS h ORDER BY h)
     RETURNING (xmax = 0) AS inserted`,
    [run.runId, run.inputs.map((i) => i.pipeline), run.inputs.map((i) => hoursLiteral(i.reportedHours)), run.inputs.map((i) => hoursLiteral(i.subsetHours))]);
  return rows.filter((row) => row.inserted).length;
}

/** A list of hours as a PostgreSQL array literal, for passing arrays of arrays through unnest as text. */
function hoursLiteral(hours: Date[]): string {
  return `{${hours.map((hour) => `"${hour.toISOString()}"`).join(',')}}`;
}

/** What the run's earlier events of this job named, removed (its COMPLETE, FAIL or ABORT ends it); undefined when nothing was kept. */
export async function takeNotedRun(tx: Queryable, runId: string, job: { jobNamespace: string; jobName: string }): Promise<NotedRun | undefined> {
  const { rows } = await tx.query<{ nominalStart: Date | null; nominalEnd: Date | null; inputs: { pipeline: string; reported: string[]; subset: string[] }[] }>(
    `WITH taken AS (
       DELETE FROM backfill.lineage_runs WHERE run_id = $1::uuid AND job_namespace = $2::text AND job_name = $3::text
       RETURNING run_id, nominal_start, nominal_end)
     SELECT t.nominal_start AS "nominalStart", t.nominal_end AS "nominalEnd",
            coalesce((SELECT json_agg(json_build_object('pipeline', i.pipeline, 'reported', i.reported_hours, 'subset', i.subset_hours) ORDER BY i.pipeline)
                      FROM backfill.lineage_run_inputs i WHERE i.run_id = t.run_id), '[]') AS inputs
     FROM taken t`,
    [runId, job.jobNamespace, job.jobName]);
  const row = rows[0];
  if (!row) return undefined;
  const dates = (texts: string[]) => texts.map((text) => new Date(text));
  return { nominalStart: row.nominalStart, nominalEnd: row.nominalEnd, inputs: row.inputs.map((i) => ({ pipeline: i.pipeline, reportedHours: dates(i.reported), subsetHours: dates(i.subset) })) };
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

/** Keeps a proposed job's reads whose runs named no hours. Returns how many were new. */
export async function insertPendingReadsWithoutHours(tx: Queryable, proposalId: number, reads: ReadWithoutHours[]): Promise<number> {
  const { rowCount } = await tx.query(
    `INSERT INTO backfill.lineage_pending_reads_without_hours (proposal_id, pipeline, read_at)
     SELECT $1::bigint, r.pipeline, r.read_at FROM unnest($2::text[], $3::timestamptz[]) AS r(pipeline, read_at)
     ON CONFLICT DO NOTHING`,
    [proposalId, reads.map((r) => r.pipeline), reads.map((r) => r.readAt)]);
  return rowCount ?? 0;
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
                         FROM backfill.lineage_pending_reads WHERE proposal_id = p.id GROUP BY pipeline) q), '[]') AS pending,
         coalesce((SELECT json_agg(json_build_object('pipeline', w.pipeline, 'reads', w.reads) ORDER BY w.pipeline)
                   FROM (SELECT pipeline, count(*)::int AS reads FROM backfill.lineage_pending_reads_without_hours
                         WHERE proposal_id = p.id GROUP BY pipeline) w), '[]') AS "withoutHours"
  FROM backfill.lineage_proposals p`;

interface ProposalRow extends Omit<LineageProposal, 'pending' | 'withoutHours'> {
  pending: { pipeline: string; hours: number; first: string; last: string }[];
  withoutHours: { pipeline: string; reads: number }[];
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

/**
 * A confirmation: the pending reads whose runs named no hours are removed and, with a read rule, each becomes the
 * `hoursToWatermark` hours up to its pipeline's watermark at its read_at, as inferred read log rows (none where
 * the pipeline had no watermark then). Returns how many reads were taken and how many rows were new.
 */
export async function resolvePendingReadsWithoutHours(tx: Queryable, proposalId: number, consumer: string, hoursToWatermark: number | null): Promise<{ taken: number; inferred: number }> {
  const { rows } = await tx.query<{ taken: number; inferred: number }>(
    `WITH taken AS (
       DELETE FROM backfill.lineage_pending_reads_without_hours WHERE proposal_id = $1::bigint RETURNING pipeline, read_at
     ), marks AS (
       SELECT t.pipeline, t.read_at,
              (SELECT h.processed_through FROM backfill.watermark_history h
               WHERE h.pipeline = t.pipeline AND h.valid_from <= t.read_at ORDER BY h.valid_from DESC LIMIT 1) AS through
       FROM taken t WHERE $3::int IS NOT NULL
     ), inferred AS (
       INSERT INTO backfill.read_log (consumer, pipeline, partition_hour, read_at, inferred)
       SELECT $2::text, m.pipeline, hour, m.read_at, true
       FROM marks m, generate_series(m.through - ($3::int - 1) * interval '1 hour', m.through, interval '1 hour') AS hour
       WHERE m.through IS NOT NULL
       ON CONFLICT DO NOTHING RETURNING 1
     )
     SELECT (SELECT count(*) FROM taken)::int AS taken, (SELECT count(*) FROM inferred)::int AS inferred`,
    [proposalId, consumer, hoursToWatermark]);
  return rows[0] ?? { taken: 0, inferred: 0 };
}

/** A rejection: every pending read of the proposal, with hours or without, dropped. Returns how many. */
export async function dropPendingReads(tx: Queryable, proposalId: number): Promise<number> {
  const { rowCount } = await tx.query('DELETE FROM backfill.lineage_pending_reads WHERE proposal_id = $1::bigint', [proposalId]);
  const { rowCount: withoutHours } = await tx.query('DELETE FROM backfill.lineage_pending_reads_without_hours WHERE proposal_id = $1::bigint', [proposalId]);
  return (rowCount ?? 0) + (withoutHours ?? 0);
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
