import type { Pool } from '../db/pool.js';
import { withClient } from '../db/pool.js';
import { recordEvent } from '../db/events.js';
import { requirePipeline, type Pipeline } from '../db/pipelines.js';
import { BackfillError, ErrorCode } from '../errors.js';
import { announcementText } from './announcement.js';
import type { EngineContext } from './context.js';
import { identifyTargets, type Identified } from './identify.js';
import { directionOf, subtractMoney, type Direction } from './money.js';
import { replacePartition, totalOverDays } from './partitionStep.js';
import { listReaders, listSignedFigures, type Reader, type SignedFigure } from './readers.js';
import { distinctDays, parseTargetSpec, type TargetSpec } from './time.js';

export interface BackfillRequest {
  pipeline: string;
  /** A night (YYYY-MM-DD) or an hour range (from..to). */
  target: string;
  reason: string;
  actor: string;
  /** Why more partitions than the configured limit are really needed; without it a long range is refused. */
  limitOverride?: string | undefined;
  /** The Slack channel it was asked from: announcements' status and the diff go there. */
  incidentChannel?: string | undefined;
}

export interface Plan {
  pipeline: Pipeline;
  spec: TargetSpec;
  identified: Identified;
  days: string[];
  readers: Reader[];
  signed: SignedFigure[];
  /** The owners whose acknowledgement the run waits for. */
  gateOwners: string[];
  totalBefore: string;
  /** From a recompute run in a transaction that is rolled back: nothing is written. */
  expectedTotalAfter: string;
  direction: Direction;
  announcements: { consumer: string; owner: string; notifyRule: 'before' | 'after'; text: string }[];
}

/** Everything a backfill would do, computed without writing anything but an audit event. */
export async function planBackfill(ctx: EngineContext, request: BackfillRequest): Promise<Plan> {
  const plan = await buildPlan(ctx, request);
  await recordEvent(ctx.pool, {
    actor: request.actor, kind: 'planned',
    detail: { pipeline: plan.pipeline.name, target: request.target, partitions: plan.identified.hours.length, reason: request.reason },
  });
  return plan;
}

export async function buildPlan(ctx: EngineContext, request: BackfillRequest): Promise<Plan> {
  if (!request.reason.trim()) {
    throw new BackfillError(ErrorCode.BadInput, 'A backfill needs a reason, e.g. "currency parsed as text": it goes into every announcement.');
  }
  const pipeline = await requirePipeline(ctx.pool, request.pipeline);
  const spec = parseTargetSpec(request.target);
  const identified = await identifyTargets(ctx.pool, pipeline, spec, { maxPartitions: ctx.config.MAX_PARTITIONS, limitOverride: request.limitOverride });
  const days = distinctDays(identified.hours);
  const readers = await listReaders(ctx.pool, pipeline.name, identified.hours);
  const signed = await listSignedFigures(ctx.pool, readers.filter((r) => r.kind === 'report').map((r) => r.consumer), days);
  const gateOwners = [...new Set(readers.filter((r) => r.notifyRule === 'before').map((r) => r.owner))];
  const { before, after } = await previewTotals(ctx.pool, pipeline, identified.hours, days);
  const direction = directionOf(subtractMoney(after, before));
  const plan = { pipeline, spec, identified, days, readers, signed, gateOwners, totalBefore: before, expectedTotalAfter: after, direction };
  return { ...plan, announcements: announcementsFor(plan, request, null) };
}

/** One generated message per reader; the backfill id is known only once the log row exists. */
export function announcementsFor(plan: Omit<Plan, 'announcements'>, request: BackfillRequest, backfillId: number | null): Plan['announcements'] {
  return plan.readers.map((reader) => ({
    consumer: reader.consumer,
    owner: reader.owner,
    notifyRule: reader.notifyRule,
    text: announcementText({
      backfillId, pipeline: plan.pipeline.name, reason: request.reason, requestedBy: request.actor,
      firstHour: plan.identified.firstHour, lastHour: plan.identified.lastHour, partitionCount: plan.identified.hours.length,
      direction: plan.direction, reader, signed: plan.signed, gateOwners: plan.gateOwners,
    }),
  }));
}

/**
 * Runs the real step over the targets inside a transaction that is always rolled back, so the plan can say
 * which way the total will move. The per-partition locks make it wait for, never interleave with, a writer.
 */
async function previewTotals(pool: Pool, pipeline: Pipeline, hours: Date[], days: string[]): Promise<{ before: string; after: string }> {
  return withClient(pool, async (client) => {
    await client.query('BEGIN');
    try {
      const before = await totalOverDays(client, pipeline, days);
      for (const hour of hours) await replacePartition(client, pipeline, hour);
      const after = await totalOverDays(client, pipeline, days);
      return { before, after };
    } finally {
      await client.query('ROLLBACK');
    }
  });
}
