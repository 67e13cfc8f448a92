import { findOverlappingActive, requireBackfill, type BackfillRow } from '../db/backfills.js';
import { recordEvent } from '../db/events.js';
import { quoteIdent, quoteQualified, withTransaction, type PoolClient } from '../db/pool.js';
import { BackfillError, ErrorCode } from '../errors.js';
import type { EngineContext } from './context.js';
import { approveIfGateOpen } from './gate.js';
import { ensureRowStore } from './rowStore.js';
import { recordSize } from './sizing.js';
import { announcementsFor, buildPlan, checkFrozenPlan, previewTotals, withPreview, type BackfillRequest, type Plan } from './plan.js';
import { formatHourRange } from './time.js';

export interface StartResult {
  backfill: BackfillRow;
  plan: Plan;
  announcements: Plan['announcements'];
}

/**
 * Creates the backfill and announces it. In one transaction, before anything is deleted: the log row with
 * total_before and announced_at, the targets with what each partition holds now, the readers with their
 * generated announcements, the signed figures in scope, and the timeline. If nobody must acknowledge first,
 * the gate opens in the same transaction.
 */
export async function startBackfill(ctx: EngineContext, request: BackfillRequest): Promise<StartResult> {
  const unpreviewed = await buildPlan(ctx, request, { preview: false });
  if (request.planId !== undefined) await checkFrozenPlan(ctx, request.planId, unpreviewed);
  const { pipeline, identified } = unpreviewed;
  try {
    return await withTransaction(ctx.pool, async (tx) => {
      const id = await insertBackfillRow(tx, unpreviewed, request, ctx.config.CAPACITY_LIMIT);
      // The preview runs once, here: its per-key rows become the envelope in the same statements.
      await ensureRowStore(tx, pipeline);
      const plan = withPreview(unpreviewed, await previewTotals(tx, pipeline, identified.hours, unpreviewed.days, { backfillId: id }), request);
      await tx.query('UPDATE backfill.backfills SET previewed_by = $2::text WHERE id = $1::bigint', [id, plan.previewedBy]);
      // Capacity: partitions and rows, once the preview knows the rows; over either limit, a second operator approves.
      await recordSize(tx, id, plan, ctx.config);
      await insertTargets(tx, id, plan);
      const announcements = announcementsFor(plan, request, id);
      await insertReaders(tx, id, plan, announcements);
      await insertSignedFigures(tx, id, plan);
      // The plan this backfill runs, on its own timeline (a separate `plan` call is only an audit event).
      await recordEvent(tx, {
        backfillId: id, actor: request.actor, kind: 'planned',
        detail: { planId: request.planId ?? null, inputsHash: plan.inputsHash, partitions: identified.hours.length, readers: plan.readers.map((r) => r.consumer),
          totalBefore: plan.totalBefore, expectedTotalAfter: plan.expectedTotalAfter, watermarkResetTo: identified.watermarkResetTo },
      });
      await recordEvent(tx, {
        backfillId: id, actor: request.actor, kind: 'requested',
        detail: { pipeline: pipeline.name, target: request.target, reason: request.reason, partitions: identified.hours.length,
          skipped: identified.skipped.map((s) => ({ hour: s.hour, why: s.why })) },
      });
      if (request.limitOverride) {
        await recordEvent(tx, { backfillId: id, actor: request.actor, kind: 'overridden', detail: { limit: ctx.config.MAX_PARTITIONS, reason: request.limitOverride } });
      }
      for (const announcement of announcements) {
        await recordEvent(tx, { backfillId: id, actor: 'backfill-bot', kind: 'announced', detail: { consumer: announcement.consumer, owner: announcement.owner, rule: announcement.notifyRule } });
      }
      // Announcements are steps: delivered by a worker, retried if delivery fails, never sent twice once done.
      await tx.query(
        `INSERT INTO backfill.backfill_steps (backfill_id, kind, step_key)
         SELECT $1::bigint, 'announce', consumer FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint AND notify_rule = 'before'`, [id]);
      await approveIfGateOpen(tx, id, request.actor, ctx.config.WAVE_SIZE);
      return { backfill: await requireBackfill(tx, id), plan, announcements };
    });
  } catch (error) {
    if ((error as { code?: unknown }).code === '23P01') throw await overlapError(ctx, request, unpreviewed);
    throw error;
  }
}

async function insertBackfillRow(tx: PoolClient, plan: Plan, request: BackfillRequest, capacityLimit: number): Promise<number> {
  const { pipeline, identified } = plan;
  const partition = quoteIdent(pipeline.partitionColumn);
  // total_before is computed by this very INSERT: captured with announced_at, before any delete can happen.
  const { rows } = await tx.query<{ id: number }>(
    `INSERT INTO backfill.backfills (pipeline, reason, requested_by, first_hour, last_hour, partition_count,
                                     watermark_before, watermark_reset_to, total_before, announced_at, state, limit_override,
                                     incident_channel, plan_id, needs_second_approval)
     SELECT $1::text, $2::text, $3::text, $4::timestamptz, $5::timestamptz, $6::int, $7::timestamptz, $8::timestamptz,
            coalesce(sum(${quoteIdent(pipeline.measureColumn)}), 0), now(), 'announced', $10::text, $11::text, $12::bigint, $13::boolean
     FROM ${quoteQualified(pipeline.targetTable)}
     WHERE (${partition} AT TIME ZONE 'UTC')::date = ANY ($9::date[])
     RETURNING id`,
    [pipeline.name, request.reason.trim(), request.actor, identified.firstHour, identified.lastHour, identified.hours.length,
      identified.watermarkBefore, identified.watermarkResetTo, plan.days, request.limitOverride?.trim() || null,
      request.incidentChannel ?? null, request.planId ?? null, identified.hours.length > capacityLimit]);
  const id = rows[0]?.id;
  if (id === undefined) throw new Error('backfill insert returned no id');
  return id;
}

async function insertTargets(tx: PoolClient, id: number, plan: Plan): Promise<void> {
  const { pipeline } = plan;
  const order = pipeline.keyColumns.map((column) => `t.${quoteIdent(column)}`).join(', ');
  await tx.query(
    `INSERT INTO backfill.backfill_targets (backfill_id, partition_hour, rows_before, total_before, checksum_before, expected_rows, expected_total)
     SELECT $1::bigint, e.h, count(t.*), coalesce(sum(t.${quoteIdent(pipeline.measureColumn)}), 0),
            md5(coalesce(string_agg(t::text, '|' ORDER BY ${order}), '')), e.rows, e.total
     FROM unnest($2::timestamptz[], $3::bigint[], $4::numeric[]) AS e(h, rows, total)
     LEFT JOIN ${quoteQualified(pipeline.targetTable)} t ON t.${quoteIdent(pipeline.partitionColumn)} = e.h
     GROUP BY e.h, e.rows, e.total`,
    [id, plan.expected.map((e) => e.hour), plan.expected.map((e) => e.rows), plan.expected.map((e) => e.total)]);
}

async function insertReaders(tx: PoolClient, id: number, plan: Plan, announcements: Plan['announcements']): Promise<void> {
  for (const reader of plan.readers) {
    const text = announcements.find((a) => a.consumer === reader.consumer)?.text ?? '';
    await tx.query(
      `INSERT INTO backfill.backfill_consumers (backfill_id, consumer, owner, notify_rule, dependency_rank, depends_on,
                                                read_directly, partitions_read, announcement)
       VALUES ($1::bigint, $2::text, $3::text, $4::text, $5::int, $6::text[], $7::boolean, $8::int, $9::text)`,
      [id, reader.consumer, reader.owner, reader.notifyRule, reader.dependencyRank, reader.dependsOn, reader.readDirectly,
        reader.partitionsRead, text]);
  }
}

async function insertSignedFigures(tx: PoolClient, id: number, plan: Plan): Promise<void> {
  const { pipeline } = plan;
  for (const figure of plan.signed) {
    await tx.query(
      `INSERT INTO backfill.backfill_signoffs (backfill_id, signoff_id, report, period, signed_total, total_before)
       SELECT $1::bigint, $2::bigint, $3::text, $4::date, $5::numeric, coalesce(sum(${quoteIdent(pipeline.measureColumn)}), 0)
       FROM ${quoteQualified(pipeline.targetTable)}
       WHERE (${quoteIdent(pipeline.partitionColumn)} AT TIME ZONE 'UTC')::date = $4::date`,
      [id, figure.signoffId, figure.report, figure.period, figure.total]);
  }
}

async function overlapError(ctx: EngineContext, request: BackfillRequest, plan: Plan): Promise<BackfillError> {
  const { firstHour, lastHour } = plan.identified;
  const other = await findOverlappingActive(ctx.pool, plan.pipeline.name, firstHour, lastHour);
  const holding = other && (other.state === 'stopped' || other.state === 'failed');
  const message = other
    ? holding
      ? `Backfill #${other.id} of ${other.pipeline} (${formatHourRange(other.firstHour, other.lastHour)}) is ${other.state} with partitions published, ` +
        `so it still holds ${formatHourRange(firstHour, lastHour)}. Roll it back first (\`rollback ${other.id}\`), then start again.`
      : `Backfill #${other.id} of ${other.pipeline} (${formatHourRange(other.firstHour, other.lastHour)}, ${other.state}) is still in flight ` +
        `and overlaps ${formatHourRange(firstHour, lastHour)}. Wait for it to finish, or cancel it first.`
    : `Another backfill of ${plan.pipeline.name} overlapping ${formatHourRange(firstHour, lastHour)} is in flight.`;
  return new BackfillError(ErrorCode.Overlap, message, { details: { inFlight: other?.id } });
}
