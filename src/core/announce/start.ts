import { findOverlappingActive, insertBackfill, requireBackfill, setPreviewedBy, type BackfillRow } from '../../db/backfills.js';
import { insertBackfillConsumer } from '../../db/backfillConsumers.js';
import { lockCatalogShared } from '../../db/catalog.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
import { insertBackfillSignoff } from '../../db/signatures.js';
import { insertAnnounceSteps } from '../../db/steps.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { approveIfGateOpen } from './gate.js';
import { freezeCatalog } from '../catalog/frozen.js';
import { ensureRowStore } from '../recompute/rowStore.js';
import { recordSize } from '../identify/sizing.js';
import { announcementsFor, buildPlan, checkFrozenPlan, previewAtStart, withPreview, type BackfillRequest, type Plan } from '../identify/plan.js';
import { formatHourRange } from '../time.js';
import { hasSqlState, SqlState } from '../../db/sqlState.js';

export interface StartResult {
  backfill: BackfillRow;
  plan: Plan;
  announcements: Plan['announcements'];
}

/**
 * Creates the backfill and announces it. In one transaction, before anything is deleted: the log row with
 * total_before and announced_at, the targets with what each partition holds now, the readers with their
 * generated announcements, the signed figures in scope, the catalog fields it runs (frozen: src/core/catalog/frozen.ts),
 * and the timeline. If nobody must acknowledge first, the gate opens in the same transaction.
 */
export async function startBackfill(ctx: EngineContext, request: BackfillRequest): Promise<StartResult> {
  const unpreviewed = await buildPlan(ctx, request, { preview: false });
  if (request.planId !== undefined) await checkFrozenPlan(ctx, request.planId, unpreviewed);
  const { pipeline, identified } = unpreviewed;
  try {
    return await withTransaction(ctx.pool, async (tx) => {
      // No catalog apply lands between the freeze below and this commit: it waits, then sees this backfill in flight.
      await lockCatalogShared(tx);
      const { id, totalBefore } = await insertBackfillRow(tx, unpreviewed, request, ctx.config.CAPACITY_LIMIT);
      // The preview runs once, here: its per-key rows become the envelope in the same statements, and the
      // targets are recorded with what each partition holds now (previewAtStart).
      await ensureRowStore(tx, pipeline);
      const plan = withPreview(unpreviewed, await previewAtStart(tx, pipeline, identified.hours, { backfillId: id, totalBefore }), request);
      await setPreviewedBy(tx, id, plan.previewedBy);
      // Capacity: partitions and rows, once the preview knows the rows; over either limit, a second operator approves.
      await recordSize(tx, id, plan, ctx.config);
      const announcements = announcementsFor(plan, request, id);
      await insertReaders(tx, id, plan, announcements);
      // What it previewed and announces is what it runs: the step, the shard rule and the readers' re-triggers.
      await freezeCatalog(tx, id, plan);
      await insertSignedFigures(tx, id, plan, totalBefore);
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
      await insertAnnounceSteps(tx, id);
      await approveIfGateOpen(tx, id, request.actor, ctx.config.WAVE_SIZE);
      return { backfill: await requireBackfill(tx, id), plan, announcements };
    });
  } catch (error) {
    if (hasSqlState(error, SqlState.ExclusionViolation)) throw await overlapError(ctx, request, unpreviewed);
    throw error;
  }
}

async function insertBackfillRow(tx: PoolClient, plan: Plan, request: BackfillRequest, capacityLimit: number): Promise<{ id: number; totalBefore: string }> {
  const { pipeline, identified } = plan;
  const inserted = await insertBackfill(tx, pipeline, {
    reason: request.reason.trim(), requestedBy: request.actor, firstHour: identified.firstHour, lastHour: identified.lastHour,
    partitionCount: identified.hours.length, watermarkBefore: identified.watermarkBefore, watermarkResetTo: identified.watermarkResetTo,
    days: plan.days, limitOverride: request.limitOverride?.trim() || null, incidentChannel: request.incidentChannel ?? null,
    planId: request.planId ?? null, needsSecondApproval: identified.hours.length > capacityLimit,
  });
  if (inserted === undefined) throw new Error('backfill insert returned no id');
  return inserted;
}

async function insertReaders(tx: PoolClient, id: number, plan: Plan, announcements: Plan['announcements']): Promise<void> {
  for (const reader of plan.readers) {
    const facts = announcements.find((a) => a.consumer === reader.consumer)?.facts;
    if (!facts) throw new Error(`no announcement was generated for ${reader.consumer}`);
    await insertBackfillConsumer(tx, id, { ...reader, announcementFacts: facts });
  }
}

/**
 * Each day's total is read once, however many figures were signed for it: a backfill of one day has it already,
 * in the total before its row captured.
 */
async function insertSignedFigures(tx: PoolClient, id: number, plan: Plan, totalBefore: string): Promise<void> {
  const dayTotals = new Map<string, string>();
  const [onlyDay, ...otherDays] = plan.days;
  if (onlyDay !== undefined && otherDays.length === 0) dayTotals.set(onlyDay, totalBefore);
  for (const figure of plan.signed) {
    dayTotals.set(figure.period, await insertBackfillSignoff(tx, plan.pipeline, id, figure, dayTotals.get(figure.period)));
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
