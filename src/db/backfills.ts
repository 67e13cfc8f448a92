import type { Pipeline } from './pipelines.js';
import type { StoredAnnouncement } from './backfillConsumers.js';
import type { ConsumerPlacement } from './readLog.js';
import { quoteIdent, quoteQualified, type Queryable } from './pool.js';
import { wholeUtcDays } from './partitions.js';
import type { BackfillState } from '../core/states.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { redact } from '../redaction.js';
import { prepared } from './prepared.js';

export interface BackfillRow {
  id: number;
  pipeline: string;
  reason: string;
  requestedBy: string;
  firstHour: Date;
  lastHour: Date;
  partitionCount: number;
  watermarkBefore: Date | null;
  watermarkResetTo: Date;
  totalBefore: string;
  totalAfter: string | null;
  diff: string | null;
  announcedAt: Date;
  ranAt: Date | null;
  ranBy: string | null;
  finishedAt: Date | null;
  state: BackfillState;
  failure: string | null;
  limitOverride: string | null;
  incidentChannel: string | null;
  statusTs: string | null;
  stoppedBy: string | null;
  stopReason: string | null;
  pausedReason: string | null;
  /** While paused: a partition outside its envelope, or its catalog changed since it was announced (migration 0022). */
  pausedFor: PauseCause | null;
  rolledBackBy: string | null;
  rolledBackAt: Date | null;
  needsSecondApproval: boolean;
  /** Set by its first publish: it holds its hours until it finishes or is rolled back. */
  publishedAny: boolean;
  /** The expected figures came from the pipeline's estimate query (envelope: rows and total) or the step (by key). */
  previewedBy: 'estimate' | 'step';
  /** What it froze of the catalog when it was started (src/core/catalog/frozen.ts); null before migration 0021. */
  catalogHash: string | null;
  catalogFieldHashes: Record<string, string> | null;
}

/** What paused a backfill: what a continue does depends on it. */
export type PauseCause = 'breach' | 'catalog';

const SELECT_BACKFILL = `
  SELECT id, pipeline, reason, requested_by AS "requestedBy", first_hour AS "firstHour", last_hour AS "lastHour",
         partition_count AS "partitionCount", watermark_before AS "watermarkBefore",
         watermark_reset_to AS "watermarkResetTo", total_before::text AS "totalBefore", total_after::text AS "totalAfter",
         diff::text AS diff, announced_at AS "announcedAt", ran_at AS "ranAt", ran_by AS "ranBy",
         finished_at AS "finishedAt", state, failure, limit_override AS "limitOverride",
         incident_channel AS "incidentChannel", status_ts AS "statusTs",
         stopped_by AS "stoppedBy", stop_reason AS "stopReason", paused_reason AS "pausedReason", paused_for AS "pausedFor", rolled_back_by AS "rolledBackBy",
         rolled_back_at AS "rolledBackAt", needs_second_approval AS "needsSecondApproval",
         published_any AS "publishedAny", previewed_by AS "previewedBy",
         catalog_hash AS "catalogHash", catalog_field_hashes AS "catalogFieldHashes"
  FROM backfill.backfills`;

// NOTE: FOR NO KEY UPDATE, not FOR UPDATE: every timeline insert holds a KEY SHARE lock on its backfill row
// (the foreign key), and two steps finishing at once would deadlock if the row lock conflicted with it.
async function findBackfill(db: Queryable, id: number, options: { forUpdate?: boolean } = {}): Promise<BackfillRow | undefined> {
  const { rows } = await db.query<BackfillRow>(prepared(`${SELECT_BACKFILL} WHERE id = $1::bigint${options.forUpdate ? ' FOR NO KEY UPDATE' : ''}`), [id]);
  return rows[0];
}

export async function requireBackfill(db: Queryable, id: number, options: { forUpdate?: boolean } = {}): Promise<BackfillRow> {
  const row = await findBackfill(db, id, options);
  if (!row) throw new BackfillError(ErrorCode.UnknownBackfill, `There is no backfill #${id}. \`backfill status\` lists the recent ones.`);
  return row;
}

export async function listRecentBackfills(db: Queryable, limit = 20): Promise<BackfillRow[]> {
  const { rows } = await db.query<BackfillRow>(`${SELECT_BACKFILL} ORDER BY id DESC LIMIT $1::int`, [limit]);
  return rows;
}

/** The live backfill of this pipeline whose hours overlap [first, last], if any. */
export async function findOverlappingActive(db: Queryable, pipeline: string, first: Date, last: Date, exceptId?: number): Promise<BackfillRow | undefined> {
  // The same predicate as the exclusion constraint backfills_no_overlap (migration 0005).
  const { rows } = await db.query<BackfillRow>(
    `${SELECT_BACKFILL} WHERE pipeline = $1::text
       AND tstzrange(first_hour, last_hour, '[]') && tstzrange($2::timestamptz, $3::timestamptz, '[]')
       AND (state IN ('announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing', 'rolling_back')
            OR (published_any AND state IN ('stopped', 'failed')))
       AND ($4::bigint IS NULL OR id <> $4::bigint)
     ORDER BY id LIMIT 1`, [pipeline, first, last, exceptId ?? null]);
  return rows[0];
}

export interface BackfillConsumerRow extends ConsumerPlacement, StoredAnnouncement {
  messageChannel: string | null;
  messageTs: string | null;
  ackedAt: Date | null;
  overriddenBy: string | null;
  overrideReason: string | null;
  /** Slack's reason when the announcement cannot be delivered (user_not_found, …). */
  undeliverable: string | null;
  /** Slack is rate-limiting the announcement: when its next try goes out (null once it landed, or never limited). */
  announceRetryAt: Date | null;
}

export async function listBackfillConsumers(db: Queryable, backfillId: number): Promise<BackfillConsumerRow[]> {
  const { rows } = await db.query<BackfillConsumerRow>(
    `SELECT bc.consumer, c.kind, bc.owner, bc.notify_rule AS "notifyRule", bc.dependency_rank AS "dependencyRank",
            bc.depends_on AS "dependsOn", bc.read_directly AS "readDirectly", bc.partitions_read AS "partitionsRead",
            bc.announcement, bc.announcement_facts AS "announcementFacts", bc.message_channel AS "messageChannel", bc.message_ts AS "messageTs", a.acked_at AS "ackedAt", o.operator AS "overriddenBy", o.reason AS "overrideReason",
            bc.undeliverable, bc.announce_retry_at AS "announceRetryAt"
     FROM backfill.backfill_consumers bc
     JOIN backfill.consumers c ON c.name = bc.consumer
     LEFT JOIN backfill.acknowledgements a ON a.backfill_id = bc.backfill_id AND a.consumer = bc.consumer
     LEFT JOIN backfill.gate_overrides o ON o.backfill_id = bc.backfill_id AND o.consumer = bc.consumer
     WHERE bc.backfill_id = $1::bigint
     ORDER BY bc.dependency_rank, bc.consumer`, [backfillId]);
  return rows;
}

export interface BackfillTargetRow {
  partitionHour: Date;
  rowsBefore: number;
  totalBefore: string;
  checksumBefore: string;
  rowsAfter: number | null;
  totalAfter: string | null;
  checksumAfter: string | null;
  recomputedAt: Date | null;
  status: 'pending' | 'staged' | 'published' | 'unavailable' | 'restored';
  wave: number;
  expectedTotal: string | null;
  publishedChecksum: string | null;
  /** How many rows the publish wrote (null: published before migration 0019, when it was rowsAfter). */
  publishedRows: number | null;
  /** Why the staged partition is outside its envelope, while it is (cleared when someone accepts it by name). */
  breach: string | null;
  acceptedBy: string | null;
  acceptedReason: string | null;
  /** The generation of the partition this backfill's publish created. */
  publishedGeneration: number | null;
  /** Staged (and saved by its publish) in tables of the run's own, not the store's shared ones (migrations/0027). */
  stagedApart: boolean;
}

export async function listTargets(db: Queryable, backfillId: number): Promise<BackfillTargetRow[]> {
  const { rows } = await db.query<BackfillTargetRow>(
    `SELECT partition_hour AS "partitionHour", rows_before AS "rowsBefore", total_before::text AS "totalBefore",
            checksum_before AS "checksumBefore", rows_after AS "rowsAfter", total_after::text AS "totalAfter",
            checksum_after AS "checksumAfter", recomputed_at AS "recomputedAt", status, wave,
            expected_total::text AS "expectedTotal", published_checksum AS "publishedChecksum", published_rows::int AS "publishedRows", breach,
            accepted_by AS "acceptedBy", accepted_reason AS "acceptedReason", published_generation AS "publishedGeneration",
            staged_apart AS "stagedApart"
     FROM backfill.backfill_targets WHERE backfill_id = $1::bigint ORDER BY partition_hour`, [backfillId]);
  return rows;
}

export interface BackfillSignoffRow {
  report: string;
  period: string;
  signedTotal: string;
  signedBy: string;
  signedAt: Date;
  totalBefore: string;
  reportAfter: string | null;
  diff: string | null;
}

export async function listBackfillSignoffs(db: Queryable, backfillId: number): Promise<BackfillSignoffRow[]> {
  const { rows } = await db.query<BackfillSignoffRow>(
    `SELECT bs.report, to_char(bs.period, 'YYYY-MM-DD') AS period, bs.signed_total::text AS "signedTotal",
            s.signed_by AS "signedBy", s.signed_at AS "signedAt", bs.total_before::text AS "totalBefore",
            bs.report_after::text AS "reportAfter", bs.diff::text AS diff
     FROM backfill.backfill_signoffs bs JOIN backfill.signoffs s ON s.id = bs.signoff_id
     WHERE bs.backfill_id = $1::bigint ORDER BY bs.period, bs.report`, [backfillId]);
  return rows;
}

/**
 * A share lock on the backfill row: a state move (pause, stop) waits for the caller's commit, or the caller sees
 * its result. False when there is no such backfill.
 */
export async function lockBackfillForShare(tx: Queryable, id: number): Promise<boolean> {
  const { rowCount } = await tx.query(prepared('SELECT 1 FROM backfill.backfills WHERE id = $1::bigint FOR SHARE'), [id]);
  return rowCount === 1;
}

/**
 * Moves the backfill to `to` from any of `from`, with the extra column assignments (names fixed in code, never
 * user input; their values bound from $4 on). Returns the state it was in, or undefined when it was in none of them.
 * Text values are redacted: a failure, a pause's or a stop's reason can quote an outside system's answer.
 */
export async function updateBackfillState(tx: Queryable, move: { backfillId: number; to: BackfillState; from: BackfillState[]; set: [string, string | Date | null | undefined][] }): Promise<BackfillState | undefined> {
  const setSql = move.set.map(([column], index) => `, ${column} = $${index + 4}`).join('');
  const result = await tx.query<{ previous: BackfillState }>(
    `UPDATE backfill.backfills b SET state = $2::text${setSql}
     FROM (SELECT id, state AS previous FROM backfill.backfills WHERE id = $1::bigint FOR NO KEY UPDATE) old
     WHERE b.id = old.id AND b.state = ANY ($3::text[])
     RETURNING old.previous`,
    [move.backfillId, move.to, move.from, ...move.set.map(([, value]) => (typeof value === 'string' ? redact(value) : value))]);
  return result.rows[0]?.previous;
}

/** From its first publish on, the backfill holds its hours until it finishes or is rolled back. */
export async function markPublishedAny(tx: Queryable, id: number): Promise<void> {
  await tx.query(prepared('UPDATE backfill.backfills SET published_any = true WHERE id = $1::bigint AND NOT published_any'), [id]);
}

/** Completes the log row: the total after, the difference, and when it finished. */
export async function recordBackfillTotals(tx: Queryable, id: number, totalAfter: string, diff: string): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfills SET total_after = $2::numeric, diff = $3::numeric, finished_at = now() WHERE id = $1::bigint`,
    [id, totalAfter, diff]);
}

export async function setPreviewedBy(tx: Queryable, id: number, previewedBy: BackfillRow['previewedBy']): Promise<void> {
  await tx.query('UPDATE backfill.backfills SET previewed_by = $2::text WHERE id = $1::bigint', [id, previewedBy]);
}

/** Backfills approved whose announce steps have all settled (in `settled`): ready to run. */
export async function listApprovedReady(db: Queryable, settled: readonly string[], backfillId?: number): Promise<{ id: number; requestedBy: string }[]> {
  const { rows } = await db.query<{ id: number; requestedBy: string }>(
    `SELECT id, requested_by AS "requestedBy" FROM backfill.backfills b
     WHERE state = 'approved' AND ($1::bigint IS NULL OR id = $1::bigint)
       AND NOT EXISTS (SELECT 1 FROM backfill.backfill_steps s WHERE s.backfill_id = b.id AND s.kind = 'announce' AND s.status <> ALL ($2::text[]))`,
    [backfillId ?? null, settled]);
  return rows;
}

/** Backfills in a state whose phases complete as their steps finish. */
export async function listAdvancingBackfillIds(db: Queryable): Promise<number[]> {
  const { rows } = await db.query<{ id: number }>(`SELECT id FROM backfill.backfills WHERE state IN ('running', 'replaying', 'rolling_back')`);
  return rows.map((row) => row.id);
}

/** The incident channel and the status message's ts (the incident thread), when the backfill has them. */
export async function findIncidentThread(db: Queryable, id: number): Promise<{ channel: string | null; ts: string | null } | undefined> {
  const { rows } = await db.query<{ channel: string | null; ts: string | null }>(
    'SELECT incident_channel AS channel, status_ts AS ts FROM backfill.backfills WHERE id = $1::bigint', [id]);
  return rows[0];
}

export async function findIncidentChannel(db: Queryable, id: number): Promise<string | undefined> {
  const { rows } = await db.query<{ channel: string | null }>(
    'SELECT incident_channel AS channel FROM backfill.backfills WHERE id = $1::bigint', [id]);
  return rows[0]?.channel ?? undefined;
}

/** Keeps the status message's ts, once. True when this call kept it. */
export async function keepStatusTs(db: Queryable, id: number, ts: string): Promise<boolean> {
  const kept = await db.query('UPDATE backfill.backfills SET status_ts = $2::text WHERE id = $1::bigint AND status_ts IS NULL', [id, ts]);
  return kept.rowCount === 1;
}

export interface NewBackfill extends Pick<BackfillRow, 'reason' | 'requestedBy' | 'firstHour' | 'lastHour' | 'partitionCount' | 'watermarkBefore' | 'watermarkResetTo'> {
  /** The days (YYYY-MM-DD) whose total is total_before. */
  days: string[];
  limitOverride: string | null;
  incidentChannel: string | null;
  planId: number | null;
  needsSecondApproval: boolean;
}

/**
 * The log row, announced; returns its id and the days' total before it captured. Identifiers come from the
 * pipeline's catalog row, quoted once.
 */
export async function insertBackfill(tx: Queryable, pipeline: Pipeline, row: NewBackfill): Promise<{ id: number; totalBefore: string } | undefined> {
  // The days as ranges of the partition column, not its expression: read in those days' partitions alone (wholeUtcDays).
  const days = wholeUtcDays(quoteIdent(pipeline.partitionColumn), row.days, 13);
  // total_before is computed by this very INSERT: captured with announced_at, before any delete can happen.
  const { rows } = await tx.query<{ id: number; totalBefore: string }>(
    `INSERT INTO backfill.backfills (pipeline, reason, requested_by, first_hour, last_hour, partition_count,
                                     watermark_before, watermark_reset_to, total_before, announced_at, state, limit_override,
                                     incident_channel, plan_id, needs_second_approval)
     SELECT $1::text, $2::text, $3::text, $4::timestamptz, $5::timestamptz, $6::int, $7::timestamptz, $8::timestamptz,
            coalesce(sum(${quoteIdent(pipeline.measureColumn)}), 0), now(), 'announced', $9::text, $10::text, $11::bigint, $12::boolean
     FROM ${quoteQualified(pipeline.targetTable)}
     WHERE ${days.condition}
     RETURNING id, total_before::text AS "totalBefore"`,
    [pipeline.name, row.reason, row.requestedBy, row.firstHour, row.lastHour, row.partitionCount,
      row.watermarkBefore, row.watermarkResetTo, row.limitOverride,
      row.incidentChannel, row.planId, row.needsSecondApproval, ...days.params]);
  return rows[0];
}

/** The backfill's size as estimated at start, and whether it waits for a second operator's approval. */
export async function recordPlannedSize(tx: Queryable, backfillId: number, size: { rows: number; replacedRows: number; stageBytes: number; keepBytes: number }, needsSecondApproval: boolean): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfills SET planned_rows = $2::bigint, planned_replaced_rows = $3::bigint, planned_stage_bytes = $4::bigint,
            planned_keep_bytes = $5::bigint, needs_second_approval = $6::boolean
     WHERE id = $1::bigint`, [backfillId, size.rows, size.replacedRows, size.stageBytes, size.keepBytes, needsSecondApproval]);
}

/** The rows it writes and replaces, as recorded at start (null for a backfill started before sizes were kept). */
export async function findPlannedSize(db: Queryable, backfillId: number): Promise<{ rows: number | null; replacedRows: number | null } | undefined> {
  const { rows } = await db.query<{ rows: number | null; replacedRows: number | null }>(
    'SELECT planned_rows AS rows, planned_replaced_rows AS "replacedRows" FROM backfill.backfills WHERE id = $1::bigint', [backfillId]);
  return rows[0];
}
