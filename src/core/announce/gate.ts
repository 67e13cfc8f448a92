import { mention } from '../messenger.js';
import { typedText } from '../../markup.js';
import { listBackfillConsumers, requireBackfill, type BackfillRow } from '../../db/backfills.js';
import {
  countAcknowledged, deleteAcknowledgements, hasCapacityApproval, insertAcknowledgement, insertCapacityApproval, insertGateOverride,
} from '../../db/acknowledgements.js';
import { listOwnersDelegatingTo } from '../../db/delegates.js';
import { peopleActing } from '../../db/acting.js';
import { findLastHolder, listRequesters, recordEvent } from '../../db/events.js';
import { withTransaction, type PoolClient, type Queryable } from '../../db/pool.js';
import { insertRunSteps } from '../../db/steps.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import { formatCount, recordedSize } from '../identify/sizing.js';
import { moveSteps } from '../lifecycle/stepClaims.js';
import { finishBackfill, transition, wrongState } from '../lifecycle/stateMachine.js';
import { planWaves } from '../recompute/waves.js';

export interface GateResult {
  backfill: BackfillRow;
  /** Consumers whose acknowledgement (or override) is still missing. */
  waitingFor: { consumer: string; owner: string }[];
  /** True when this call opened the gate. */
  approved: boolean;
  /** False when the call changed nothing (a double click). */
  changed: boolean;
}

/**
 * An owner acknowledges the announcement for the consumers they own in this backfill (or one of them).
 * Only the owner counts: anyone else is refused, the refusal is recorded, and nothing else changes.
 * A second click records nothing new. The owner who held the backfill releases it by acknowledging.
 */
export async function acknowledge(ctx: EngineContext, input: { backfillId: number; actor: string; consumer?: string | undefined }): Promise<GateResult> {
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    const owned = await ownedGateConsumers(tx, backfill, input.actor, input.consumer, 'acknowledge');
    if (backfill.state !== 'announced' && backfill.state !== 'held') {
      const already = await isFullyAcknowledged(tx, backfill.id, owned);
      if (already) return { ...(await gateStatus(tx, backfill.id)), approved: false, changed: false };
      throw wrongState(backfill.id, backfill.state, 'acknowledgements are taken only while it is announced or held');
    }
    let changed = false;
    for (const consumer of owned) {
      // owner records who pressed the button: the owner, or the delegate acting for them.
      if (await insertAcknowledgement(tx, backfill.id, consumer, input.actor)) {
        changed = true;
        await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'acknowledged', detail: { consumer } });
      }
    }
    if (backfill.state === 'held' && await findLastHolder(tx, backfill.id) === input.actor) {
      await transition(tx, { backfillId: backfill.id, event: 'release', actor: input.actor });
      await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'released', detail: {} });
      changed = true;
    }
    const approved = await approveIfGateOpen(tx, backfill.id, input.actor, ctx.config.WAVE_SIZE);
    return { ...(await gateStatus(tx, backfill.id)), approved, changed };
  });
}

/** An owner asks to wait: nothing is enqueued until they acknowledge (or the backfill is cancelled). */
export async function hold(ctx: EngineContext, input: { backfillId: number; actor: string; consumer?: string | undefined; reason?: string | undefined }): Promise<GateResult> {
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    const owned = await ownedGateConsumers(tx, backfill, input.actor, input.consumer, 'hold');
    if (backfill.state === 'held') return { ...(await gateStatus(tx, backfill.id)), approved: false, changed: false };
    if (backfill.state !== 'announced') throw wrongState(backfill.id, backfill.state, 'it can be held only before it runs');
    // An owner who had acknowledged and now holds takes the acknowledgement back: the hold is the newer word.
    await deleteAcknowledgements(tx, backfill.id, owned);
    await transition(tx, { backfillId: backfill.id, event: 'hold', actor: input.actor, detail: { consumers: owned } });
    await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'held', detail: { consumers: owned, reason: input.reason ?? null } });
    return { ...(await gateStatus(tx, backfill.id)), approved: false, changed: true };
  });
}

/**
 * An operator proceeds without the acknowledgements still missing. Only with a reason, which the timeline
 * keeps next to each consumer it was given for. A hold is an owner's explicit "no": it is not overridden.
 */
export async function overrideGate(ctx: EngineContext, input: { backfillId: number; actor: string; reason: string }): Promise<GateResult> {
  if (!input.reason.trim()) {
    throw new BackfillError(ErrorCode.BadInput, 'An override needs a reason, e.g. "owner on leave, finance lead approved by phone": the timeline keeps it.');
  }
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    if (backfill.state === 'held') {
      throw wrongState(backfill.id, backfill.state, `${mention(await findLastHolder(tx, backfill.id) ?? 'an owner')} asked to wait: ask them to acknowledge, or cancel it`);
    }
    if (backfill.state !== 'announced') throw wrongState(backfill.id, backfill.state, 'there is no acknowledgement left to override');
    const { waitingFor } = await gateStatus(tx, backfill.id);
    for (const missing of waitingFor.filter((w) => w.consumer !== CAPACITY_GATE)) {
      await insertGateOverride(tx, { backfillId: backfill.id, consumer: missing.consumer, operator: input.actor, reason: input.reason.trim() });
      await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'overridden', detail: { consumer: missing.consumer, owner: missing.owner, reason: input.reason.trim() } });
    }
    const approved = await approveIfGateOpen(tx, backfill.id, input.actor, ctx.config.WAVE_SIZE);
    return { ...(await gateStatus(tx, backfill.id)), approved, changed: waitingFor.length > 0 };
  });
}

/** The gate entry of a backfill larger than the capacity limit: a second operator must approve it. */
const CAPACITY_GATE = 'capacity approval';

/**
 * A second operator (not the one who asked) approves a backfill larger than the capacity limit; recorded.
 * An override cannot stand in for it: the point is a second pair of eyes on the size. "Not the one who asked"
 * is a person, on either front end: neither the approval's principal nor its real actor (the CLI user acting
 * --as someone) may be anyone behind the request, compared on the Slack id a mapped CLI user is.
 */
export async function approveCapacity(ctx: EngineContext, input: { backfillId: number; actor: string }): Promise<GateResult> {
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    const size = await recordedSize(tx, backfill.id);
    if (!backfill.needsSecondApproval) {
      const rows = size ? `, ${formatCount(Math.max(size.rows, size.replacedRows))} rows of at most ${formatCount(ctx.config.CAPACITY_ROWS_LIMIT)}` : '';
      throw new BackfillError(ErrorCode.BadInput,
        `Backfill #${backfill.id} is within the capacity limits (${backfill.partitionCount} partitions of at most ${ctx.config.CAPACITY_LIMIT}${rows}): it needs no second approval.`);
    }
    const requesters = new Set([backfill.requestedBy, ...await listRequesters(tx, backfill.id)]);
    if (requesters.has(input.actor)) {
      throw new BackfillError(ErrorCode.NotAllowed, `${mention(input.actor)} asked for backfill #${backfill.id}, so cannot also be its second approval: another operator must approve it.`);
    }
    const requester = peopleActing(input.actor).find((person) => requesters.has(person));
    if (requester !== undefined) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `${mention(requester)} asked for backfill #${backfill.id}, so cannot be its second approval on behalf of ${mention(input.actor)} either: ` +
        'another operator must approve it, as themselves.');
    }
    if (backfill.state !== 'announced' && backfill.state !== 'held') throw wrongState(backfill.id, backfill.state, 'approvals are taken only before it runs');
    const inserted = await insertCapacityApproval(tx, backfill.id, input.actor);
    if (inserted) await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'capacity_approved', detail: { partitions: backfill.partitionCount, limit: ctx.config.CAPACITY_LIMIT, rows: size, rowsLimit: ctx.config.CAPACITY_ROWS_LIMIT } });
    const approved = await approveIfGateOpen(tx, backfill.id, input.actor, ctx.config.WAVE_SIZE);
    return { ...(await gateStatus(tx, backfill.id)), approved, changed: inserted };
  });
}

/** Stops a backfill before it runs. Once partitions are being replaced, cancel is refused. */
export async function cancelBackfill(ctx: EngineContext, input: { backfillId: number; actor: string; reason?: string | undefined }): Promise<BackfillRow> {
  return withTransaction(ctx.pool, async (tx) => {
    const backfill = await requireBackfill(tx, input.backfillId, { forUpdate: true });
    if (backfill.state === 'cancelled') return backfill;
    const moved = await finishBackfill(tx, { backfillId: backfill.id, event: 'cancel', actor: input.actor, set: { finished_at: new Date() } });
    if (!moved) throw wrongState(backfill.id, backfill.state, 'only a backfill that has not started running can be cancelled');
    await moveSteps(tx, backfill.id, 'skipped');
    await recordEvent(tx, { backfillId: backfill.id, actor: input.actor, kind: 'cancelled', detail: { reason: input.reason ?? null } });
    return requireBackfill(tx, backfill.id);
  });
}

/**
 * Opens the gate when every "before" consumer is acknowledged or overridden: moves to approved and writes
 * the steps as rows, so the dispatcher (in any process) can enqueue them. Returns true when it opened now.
 */
export async function approveIfGateOpen(tx: PoolClient, backfillId: number, actor: string, waveSize: number): Promise<boolean> {
  const { waitingFor, backfill } = await gateStatus(tx, backfillId);
  if (waitingFor.length > 0 || backfill.state !== 'announced') return false;
  const moved = await transition(tx, { backfillId, event: 'open gate', actor });
  if (!moved) return false;
  await createSteps(tx, backfillId, waveSize);
  await recordEvent(tx, { backfillId, actor, kind: 'approved', detail: {} });
  return true;
}

/**
 * stage and publish per target (the canary, then the waves: src/core/recompute/waves.ts), one watermark move,
 * replay per consumer, one compare, notify per "after" owner, the diff post.
 */
async function createSteps(tx: PoolClient, backfillId: number, waveSize: number): Promise<void> {
  await planWaves(tx, backfillId, waveSize);
  await insertRunSteps(tx, backfillId);
}

export async function gateStatus(db: Queryable, backfillId: number): Promise<{ backfill: BackfillRow; waitingFor: { consumer: string; owner: string }[] }> {
  const backfill = await requireBackfill(db, backfillId);
  const consumers = await listBackfillConsumers(db, backfillId);
  const waitingFor = consumers
    .filter((c) => c.notifyRule === 'before' && !c.ackedAt && !c.overriddenBy)
    .map((c) => ({ consumer: c.consumer, owner: c.owner }));
  if (backfill.needsSecondApproval) {
    if (!(await hasCapacityApproval(db, backfillId))) waitingFor.push({ consumer: CAPACITY_GATE, owner: 'a second operator' });
  }
  return { backfill, waitingFor };
}

async function ownedGateConsumers(tx: PoolClient, backfill: BackfillRow, actor: string, consumer: string | undefined, action: string): Promise<string[]> {
  const consumers = await listBackfillConsumers(tx, backfill.id);
  // An owner may name delegates (backfill.delegates) who can acknowledge or hold in their place.
  const actsFor = new Set([actor, ...(await listOwnersDelegatingTo(tx, actor))]);
  const owned = consumers.filter((c) => actsFor.has(c.owner) && (consumer === undefined || c.consumer === consumer));
  if (owned.length > 0) return owned.map((c) => c.consumer);
  const owners = consumers.filter((c) => consumer === undefined || c.consumer === consumer).map((c) => `${c.consumer} (${mention(c.owner)})`);
  // The refusal is recorded by recordingRefusals, outside this transaction, which rolls back.
  throw new BackfillError(ErrorCode.NotAllowed,
    `${mention(actor)} does not own ${consumer === undefined ? 'any consumer' : typedText(consumer)} in backfill #${backfill.id}, so cannot ${action} it. ` +
    `Only the owner (or a delegate they named) can: ${owners.join(', ') || 'nobody is listed'}.`, { details: { backfillId: backfill.id, action } });
}

async function isFullyAcknowledged(db: Queryable, backfillId: number, consumers: string[]): Promise<boolean> {
  return (await countAcknowledged(db, backfillId, consumers)) === consumers.length;
}
