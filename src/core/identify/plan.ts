import { createHash } from 'node:crypto';
import type { Queryable } from '../../db/pool.js';
import { recordEvent } from '../../db/events.js';
import { requirePipeline, type Pipeline } from '../../db/pipelines.js';
import { findPlan, insertPlan } from '../../db/plans.js';
import { listReaders, type Reader } from '../../db/readLog.js';
import { listSignedFigures, type SignedFigure } from '../../db/signatures.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { announcementFacts, type AnnouncementFacts } from './announcement.js';
import type { EngineContext } from '../context.js';
import { identifyTargets, type Identified } from './identify.js';
import { directionOf, subtractMoney, type Direction } from '../money.js';
import { totalOverDays } from '../../db/partitions.js';
import { previewPartition, totalAfterReplacing } from '../../db/preview.js';
import type { RowStore } from '../../db/rowStore.js';
import { insertTargets, totalAfterTargets } from '../../db/targets.js';
import { rowStoreOf } from '../recompute/rowStore.js';
import { sizePlan, type SizeVerdict } from './sizing.js';
import { distinctDays, parseTargetSpec, type TargetSpec } from '../time.js';

export interface BackfillRequest {
  pipeline: string;
  /** A night (YYYY-MM-DD) or an hour range (from..to). */
  target: string;
  reason: string;
  actor: string;
  /** Why more partitions than the configured limit are really needed; without it a long range is refused. */
  limitOverride?: string | undefined;
  /** Start exactly what this frozen plan previewed; refused if its inputs changed since. */
  planId?: number | undefined;
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
  /** The same preview per partition: the envelope each published partition is checked against. */
  expected: { hour: Date; rows: number; total: string }[];
  /** Where the expected figures come from: the pipeline's estimate query, or the step's own query run in full. */
  previewedBy: 'estimate' | 'step';
  /** The rows and bytes it would stage and keep, and the capacity limits it is over (set by planBackfill; start records its own). */
  size?: SizeVerdict;
  /** The frozen plan's id and hash (set when the plan was recorded by planBackfill). */
  planId?: number;
  inputsHash: string;
  direction: Direction;
  announcements: { consumer: string; owner: string; notifyRule: 'before' | 'after'; facts: AnnouncementFacts }[];
}

/** Everything a backfill would do, computed without writing anything but an audit event. */
export async function planBackfill(ctx: EngineContext, request: BackfillRequest): Promise<Plan> {
  const built = await buildPlan(ctx, request);
  const plan = { ...built, size: await sizePlan(ctx.pool, built, ctx.config) };
  // The plan is frozen: its inputs and their hash are kept, so `start` from it can refuse if they changed.
  const planId = await insertPlan(ctx.pool, { pipeline: plan.pipeline.name, target: request.target, inputsHash: plan.inputsHash, inputs: planInputs(plan), createdBy: request.actor });
  await recordEvent(ctx.pool, {
    actor: request.actor, kind: 'planned',
    detail: { planId, pipeline: plan.pipeline.name, target: request.target, partitions: plan.identified.hours.length, reason: request.reason, hash: plan.inputsHash, size: plan.size },
  });
  return planId === undefined ? plan : { ...plan, planId };
}

/** What a plan's hash covers: the partitions, who reads them (and how they are told), and the step itself. */
function planInputs(plan: Pick<Plan, 'pipeline' | 'identified' | 'readers'>): Record<string, unknown> {
  return {
    pipeline: plan.pipeline.name,
    partitions: plan.identified.hours.map((h) => h.toISOString()),
    consumers: plan.readers.map((r) => ({ consumer: r.consumer, owner: r.owner, rule: r.notifyRule, rank: r.dependencyRank })),
    step: createHash('sha256').update(plan.pipeline.stepSql).digest('hex'),
  };
}

function hashInputs(inputs: Record<string, unknown>): string {
  return createHash('sha256').update(JSON.stringify(inputs)).digest('hex');
}

/** Refuses when the frozen plan's inputs differ from what a plan made now would use, naming what changed. */
export async function checkFrozenPlan(ctx: EngineContext, planId: number, plan: Plan): Promise<void> {
  const frozen = await findPlan(ctx.pool, planId);
  if (!frozen) throw new BackfillError(ErrorCode.BadInput, `There is no plan #${planId}. \`/backfill plan\` makes one and shows its id.`);
  if (frozen.hash === plan.inputsHash) return;
  const now = planInputs(plan);
  const changed = Object.keys(now).filter((key) => JSON.stringify(now[key]) !== JSON.stringify(frozen.inputs[key]));
  throw new BackfillError(ErrorCode.WrongState,
    `Plan #${planId} is out of date: its ${changed.join(', ')} changed since it was previewed, so it would not run what was shown. ` +
    'Make a new plan, review it, and start that one.', { details: { changed } });
}

/**
 * The plan of a request: partitions, readers, signed figures and the preview. `start` passes `preview: false`
 * and previews inside its own transaction instead (withPreview), keeping the envelope by key as it goes.
 */
export async function buildPlan(ctx: EngineContext, request: BackfillRequest, options: { preview?: boolean } = {}): Promise<Plan> {
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
  const preview: Preview = options.preview === false
    ? { before: '0.00', after: '0.00', expected: [], previewedBy: pipeline.estimateSql ? 'estimate' : 'step' }
    : await previewTotals(ctx.pool, pipeline, identified.hours, days);
  const inputsHash = hashInputs(planInputs({ pipeline, identified, readers }));
  const plan = { pipeline, spec, identified, days, readers, signed, gateOwners, inputsHash, ...fromPreview(preview) };
  return { ...plan, announcements: announcementsFor(plan, request, null) };
}

/** The plan with the figures of a preview made later (at start, inside its transaction). */
export function withPreview(plan: Plan, preview: Preview, request: BackfillRequest): Plan {
  const previewed = { ...plan, ...fromPreview(preview) };
  return { ...previewed, announcements: announcementsFor(previewed, request, null) };
}

function fromPreview(preview: Preview): Pick<Plan, 'totalBefore' | 'expectedTotalAfter' | 'expected' | 'direction' | 'previewedBy'> {
  return {
    totalBefore: preview.before, expectedTotalAfter: preview.after, expected: preview.expected,
    direction: directionOf(subtractMoney(preview.after, preview.before)), previewedBy: preview.previewedBy,
  };
}

/** One generated message per reader; the backfill id is known only once the log row exists. */
export function announcementsFor(plan: Omit<Plan, 'announcements'>, request: BackfillRequest, backfillId: number | null): Plan['announcements'] {
  return plan.readers.map((reader) => ({
    consumer: reader.consumer,
    owner: reader.owner,
    notifyRule: reader.notifyRule,
    facts: announcementFacts({
      backfillId, pipeline: plan.pipeline.name, reason: request.reason, requestedBy: request.actor,
      firstHour: plan.identified.firstHour, lastHour: plan.identified.lastHour, partitionCount: plan.identified.hours.length,
      direction: plan.direction, reader, signed: plan.signed, gateOwners: plan.gateOwners,
      totalBefore: plan.totalBefore, expectedTotalAfter: plan.expectedTotalAfter, days: plan.days, previewedBy: plan.previewedBy,
    }),
  }));
}

export interface Preview {
  before: string;
  after: string;
  expected: Plan['expected'];
  previewedBy: Plan['previewedBy'];
}

/**
 * What the step would produce for each target, and the days' total with the targets replaced by it. From the
 * pipeline's estimate query when it declares one; otherwise from the step's own query, aggregated in
 * PostgreSQL. Nothing is written to the target, and no row leaves the database.
 */
async function previewTotals(db: Queryable, pipeline: Pipeline, hours: Date[], days: string[]): Promise<Preview> {
  const store = await rowStoreOf(db, pipeline);
  const before = await totalOverDays(db, pipeline, days);
  const expected = asExpected(await previewHours(db, store, pipeline, hours));
  const after = await totalAfterReplacing(db, store, before, hours, expected.map((e) => e.total));
  return { before, after: after ?? before, expected, previewedBy: previewedBy(pipeline) };
}

/**
 * The preview inside `start`'s transaction: the step's rows kept by key in the store as the announced envelope,
 * in the same statements; the targets recorded with what each partition holds now (insertTargets). The days'
 * total before is the one the backfill row captured, and the total after is that, less what the targets hold
 * now, plus what the preview expects of them: one read of the days and one of the hours, where previewTotals
 * reads the days again and the hours twice (the same figures, each from a snapshot of its own).
 */
export async function previewAtStart(tx: Queryable, pipeline: Pipeline, hours: Date[], backfill: { backfillId: number; totalBefore: string }): Promise<Preview> {
  const store = await rowStoreOf(tx, pipeline);
  const previewed = await previewHours(tx, store, pipeline, hours, { backfillId: backfill.backfillId });
  await insertTargets(tx, pipeline, backfill.backfillId, previewed);
  const after = await totalAfterTargets(tx, backfill.backfillId, backfill.totalBefore);
  const expected = asExpected(previewed);
  return { before: backfill.totalBefore, after, expected, previewedBy: previewedBy(pipeline) };
}

/** Plan['expected'], and whether each hour's kept rows hold every key once (PreviewedHour). */
type PreviewedHours = (Plan['expected'][number] & { keysOnce: boolean })[];

/** What the plan shows of the previewed hours: whether their keys were kept once is the store's, not the plan's. */
const asExpected = (previewed: PreviewedHours): Plan['expected'] => previewed.map(({ hour, rows, total }) => ({ hour, rows, total }));

async function previewHours(db: Queryable, store: RowStore, pipeline: Pipeline, hours: Date[], keepFor?: { backfillId: number }): Promise<PreviewedHours> {
  const expected: PreviewedHours = [];
  for (const hour of hours) {
    const row = await previewPartition(db, store, pipeline, hour, keepFor);
    expected.push({ hour, rows: Number(row?.rows ?? 0), total: row?.total ?? '0.00', keysOnce: row?.keysOnce ?? true });
  }
  return expected;
}

const previewedBy = (pipeline: Pipeline): Preview['previewedBy'] => (pipeline.estimateSql ? 'estimate' : 'step');
