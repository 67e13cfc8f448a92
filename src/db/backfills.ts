import type { Queryable } from './pool.js';
import type { BackfillState } from '../core/stateMachine.js';
import { BackfillError, ErrorCode } from '../errors.js';

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
  generation: number;
  fencedGeneration: number;
  stoppedBy: string | null;
  stopReason: string | null;
  pausedReason: string | null;
  rolledBackBy: string | null;
  rolledBackAt: Date | null;
  needsSecondApproval: boolean;
  /** Set by its first publish: it holds its hours until it finishes or is rolled back. */
  publishedAny: boolean;
  /** The expected figures came from the pipeline's estimate query (envelope: rows and total) or the step (by key). */
  previewedBy: 'estimate' | 'step';
}

const SELECT_BACKFILL = `
  SELECT id, pipeline, reason, requested_by AS "requestedBy", first_hour AS "firstHour", last_hour AS "lastHour",
         partition_count AS "partitionCount", watermark_before AS "watermarkBefore",
         watermark_reset_to AS "watermarkResetTo", total_before::text AS "totalBefore", total_after::text AS "totalAfter",
         diff::text AS diff, announced_at AS "announcedAt", ran_at AS "ranAt", ran_by AS "ranBy",
         finished_at AS "finishedAt", state, failure, limit_override AS "limitOverride",
         incident_channel AS "incidentChannel", status_ts AS "statusTs", generation, fenced_generation AS "fencedGeneration",
         stopped_by AS "stoppedBy", stop_reason AS "stopReason", paused_reason AS "pausedReason", rolled_back_by AS "rolledBackBy",
         rolled_back_at AS "rolledBackAt", needs_second_approval AS "needsSecondApproval",
         published_any AS "publishedAny", previewed_by AS "previewedBy"
  FROM backfill.backfills`;

// NOTE: FOR NO KEY UPDATE, not FOR UPDATE: every timeline insert holds a KEY SHARE lock on its backfill row
// (the foreign key), and two steps finishing at once would deadlock if the row lock conflicted with it.
export async function findBackfill(db: Queryable, id: number, options: { forUpdate?: boolean } = {}): Promise<BackfillRow | undefined> {
  const { rows } = await db.query<BackfillRow>(`${SELECT_BACKFILL} WHERE id = $1::bigint${options.forUpdate ? ' FOR NO KEY UPDATE' : ''}`, [id]);
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

export interface BackfillConsumerRow {
  consumer: string;
  kind: 'report' | 'export' | 'model';
  owner: string;
  notifyRule: 'before' | 'after';
  dependencyRank: number;
  dependsOn: string[];
  readDirectly: boolean;
  partitionsRead: number;
  announcement: string;
  messageChannel: string | null;
  messageTs: string | null;
  ackedAt: Date | null;
  overriddenBy: string | null;
  overrideReason: string | null;
  /** Slack's reason when the announcement cannot be delivered (user_not_found, …). */
  undeliverable: string | null;
}

export async function listBackfillConsumers(db: Queryable, backfillId: number): Promise<BackfillConsumerRow[]> {
  const { rows } = await db.query<BackfillConsumerRow>(
    `SELECT bc.consumer, c.kind, bc.owner, bc.notify_rule AS "notifyRule", bc.dependency_rank AS "dependencyRank",
            bc.depends_on AS "dependsOn", bc.read_directly AS "readDirectly", bc.partitions_read AS "partitionsRead",
            bc.announcement, bc.message_channel AS "messageChannel", bc.message_ts AS "messageTs", a.acked_at AS "ackedAt", o.operator AS "overriddenBy", o.reason AS "overrideReason",
            bc.undeliverable
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
  /** Why the staged partition is outside its envelope, while it is (cleared when someone accepts it by name). */
  breach: string | null;
  acceptedBy: string | null;
  acceptedReason: string | null;
  /** The generation of the partition this backfill's publish created. */
  publishedGeneration: number | null;
}

export async function listTargets(db: Queryable, backfillId: number): Promise<BackfillTargetRow[]> {
  const { rows } = await db.query<BackfillTargetRow>(
    `SELECT partition_hour AS "partitionHour", rows_before AS "rowsBefore", total_before::text AS "totalBefore",
            checksum_before AS "checksumBefore", rows_after AS "rowsAfter", total_after::text AS "totalAfter",
            checksum_after AS "checksumAfter", recomputed_at AS "recomputedAt", status, wave,
            expected_total::text AS "expectedTotal", published_checksum AS "publishedChecksum", breach,
            accepted_by AS "acceptedBy", accepted_reason AS "acceptedReason", published_generation AS "publishedGeneration"
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
