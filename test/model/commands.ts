// The commands fast-check strings together: people (start, acknowledge, hold, override, cancel, stop, continue,
// rollback), the world (the source changes after the preview, another writer commits a late row), workers (run
// jobs, die holding a job, the stalled checker), Redis losing everything, Slack failing, the dispatcher's sweep.
// A person's command may be refused; a refusal must be a BackfillError that changed nothing.

import pg from 'pg';
import fc from 'fast-check';
import { acknowledge, cancelBackfill, hold, overrideGate } from '../../src/core/announce/gate.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { findOverlappingActive } from '../../src/db/backfills.js';
import type { BackfillState } from '../../src/core/states.js';
import { dispatch, removeQueuedJobs } from '../../src/queue/stepQueue.js';
import { FAULTY_METHODS, type FaultKind, type FaultyMethod } from '../support/modelMessenger.js';
import { insertLateRow, MODEL_HOURS, offerStatement, OPERATOR, partitionRows, type ModelSystem } from '../support/modelSystem.js';
import { checkCheapInvariants, compareRows, fingerprint, InvariantViolation, sameFingerprint, requireExplainedRefusal } from './checks.js';
import { recoverStalled, runOneJob, runTwoJobsTogether } from './jobs.js';
import {
  AFTER_OWNER, expectedOf, GATE_OWNERS, laterGenerationStanding, note, RANGES, recordLateRow, recordRollback,
  type Model, type ModelBackfill, type RangeName,
} from './model.js';

type ModelCommand = fc.AsyncCommand<Model, ModelSystem>;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A person's action: it succeeds, or it is refused with a BackfillError and the database is as it was.
 * Counts on the model's clock like every command.
 */
export async function asPerson<T>(model: Model, system: ModelSystem, label: string, action: () => Promise<T>): Promise<{ ok: true; value: T } | { ok: false; message: string }> {
  const before = await fingerprint(system);
  const lateBefore = new Set(system.firedLate.map((late) => late.orderId));
  model.clock += 1;
  try {
    const value = await action();
    note(model, `${label}: done`);
    return { ok: true, value };
  } catch (error) {
    const refusal = requireExplainedRefusal(label, error);
    // Rows another writer committed while it ran (a late row between a rollback's statements) are that writer's.
    await Promise.all(system.landing);
    const otherWriters = system.firedLate.map((late) => late.orderId).filter((orderId) => !lateBefore.has(orderId));
    if (!sameFingerprint(before, await fingerprint(system), otherWriters)) throw new InvariantViolation(`${label} was refused ("${refusal.message}") yet changed the database`);
    model.stats.refusals += 1;
    note(model, `${label}: refused (${refusal.message.replace(/\s*\n\s*/g, ' / ')})`);
    return { ok: false, message: refusal.message };
  }
}

async function stateOf(system: ModelSystem, backfillId: number): Promise<BackfillState | undefined> {
  const { rows } = await system.ctx.pool.query<{ state: BackfillState }>('SELECT state FROM backfill.backfills WHERE id = $1::bigint', [backfillId]);
  return rows[0]?.state;
}

/** What the Slack handler does after a person's action: dispatch that backfill now. */
async function kick(system: ModelSystem, backfillId: number): Promise<void> {
  await dispatch(system.ctx, system.queue, backfillId);
}

export async function startModelBackfill(model: Model, system: ModelSystem, range: RangeName): Promise<void> {
  const started = await asPerson(model, system, `start ${range}`, () =>
    startBackfill(system.ctx, { pipeline: 'orders', target: RANGES[range], reason: 'model: currency parsed as text', actor: OPERATOR }));
  if (!started.ok) return;
  const { backfill, plan } = started.value;
  model.backfills.push({
    id: backfill.id, range, hours: plan.identified.hours.map((h) => h.toISOString()), startedAt: model.clock,
    staged: new Map(), published: new Map(), rolledBack: false,
  });
  await kick(system, backfill.id);
}

/**
 * A command about one of the run's backfills, by order of start ("first", "second": their ids are only known
 * once they exist); skipped while it does not exist.
 */
abstract class BackfillCommand implements ModelCommand {
  constructor(readonly index: number) {}
  protected get which(): string {
    return this.index === 0 ? 'first' : 'second';
  }
  check(model: Readonly<Model>): boolean {
    return model.backfills[this.index] !== undefined;
  }
  protected backfill(model: Model): ModelBackfill {
    const backfill = model.backfills[this.index];
    if (!backfill) throw new Error(`no backfill number ${this.index} in the model`);
    return backfill;
  }
  abstract run(model: Model, system: ModelSystem): Promise<void>;
  abstract toString(): string;
}

class StartCommand implements ModelCommand {
  constructor(readonly range: RangeName) {}
  check(model: Readonly<Model>): boolean {
    return model.backfills.length < 2;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await startModelBackfill(model, system, this.range);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `start(${this.range})`;
  }
}

class AcknowledgeCommand extends BackfillCommand {
  constructor(index: number, readonly owner: string, readonly doubleClick: boolean) {
    super(index);
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    const b = this.backfill(model);
    const label = `acknowledge #${b.id} by ${this.owner}`;
    const first = await asPerson(model, system, label, () => acknowledge(system.ctx, { backfillId: b.id, actor: this.owner }));
    if (first.ok && first.value.approved) await kick(system, b.id);
    if (this.doubleClick) {
      const before = await fingerprint(system);
      const second = await asPerson(model, system, `${label} (second click)`, () => acknowledge(system.ctx, { backfillId: b.id, actor: this.owner }));
      if (first.ok && second.ok && (second.value.changed || !sameFingerprint(before, await fingerprint(system)))) {
        throw new InvariantViolation(`${label}: the second click changed something`);
      }
    }
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `acknowledge(${this.which}, ${this.owner}${this.doubleClick ? ', double click' : ''})`;
  }
}

class HoldCommand extends BackfillCommand {
  constructor(index: number, readonly owner: string) {
    super(index);
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    const b = this.backfill(model);
    await asPerson(model, system, `hold #${b.id} by ${this.owner}`, () => hold(system.ctx, { backfillId: b.id, actor: this.owner, reason: 'model: not tonight' }));
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `hold(${this.which}, ${this.owner})`;
  }
}

export async function overrideModelGate(model: Model, system: ModelSystem, b: ModelBackfill, withReason: boolean): Promise<void> {
  const reason = withReason ? 'model: owner on leave, finance lead approved by phone' : ' ';
  const result = await asPerson(model, system, `override #${b.id}`, () => overrideGate(system.ctx, { backfillId: b.id, actor: OPERATOR, reason }));
  if (result.ok) await kick(system, b.id);
}

class OverrideCommand extends BackfillCommand {
  constructor(index: number, readonly withReason: boolean) {
    super(index);
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await overrideModelGate(model, system, this.backfill(model), this.withReason);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `override(${this.which}${this.withReason ? '' : ', no reason'})`;
  }
}

class CancelCommand extends BackfillCommand {
  async run(model: Model, system: ModelSystem): Promise<void> {
    const b = this.backfill(model);
    await asPerson(model, system, `cancel #${b.id}`, () => cancelBackfill(system.ctx, { backfillId: b.id, actor: OPERATOR, reason: 'model: not needed' }));
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `cancel(${this.which})`;
  }
}

export async function stopModelBackfill(model: Model, system: ModelSystem, b: ModelBackfill): Promise<boolean> {
  const result = await asPerson(model, system, `stop #${b.id}`, () => stopBackfill(system.ctx, { backfillId: b.id, actor: OPERATOR, reason: 'model: wrong step version deployed' }));
  if (result.ok) await removeQueuedJobs(system.queue, b.id);
  return result.ok;
}

class StopCommand extends BackfillCommand {
  async run(model: Model, system: ModelSystem): Promise<void> {
    await stopModelBackfill(model, system, this.backfill(model));
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `stop(${this.which})`;
  }
}

export async function continueModelBackfill(model: Model, system: ModelSystem, b: ModelBackfill, partitions?: Date[]): Promise<boolean> {
  // NOTE: built as a variable so the call typechecks whether or not continueBackfill takes `partitions` yet.
  const input = { backfillId: b.id, actor: OPERATOR, reason: 'model: the difference was reviewed and is expected', ...(partitions ? { partitions } : {}) };
  const named = partitions ? ` naming ${partitions.map((p) => p.toISOString().slice(11, 16)).join(', ')}` : '';
  const result = await asPerson(model, system, `continue #${b.id}${named}`, () => continueBackfill(system.ctx, input));
  if (result.ok) await kick(system, b.id);
  return result.ok;
}

class ContinueCommand extends BackfillCommand {
  /** hourIndex: name one partition (by its index among the model's hours), or none (accept every breach). */
  constructor(index: number, readonly hourIndex: number | undefined) {
    super(index);
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    const b = this.backfill(model);
    const hour = this.hourIndex === undefined ? undefined : MODEL_HOURS[this.hourIndex];
    await continueModelBackfill(model, system, b, hour ? [new Date(hour)] : undefined);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `continue(${this.which}${this.hourIndex === undefined ? '' : `, ${MODEL_HOURS[this.hourIndex]?.slice(11, 16)}`})`;
  }
}

const ROLLBACK_STATES: readonly BackfillState[] = ['done', 'failed', 'stopped', 'paused'];

/**
 * Rolls b back. It must go through when b is finished, failed, stopped or paused, published something, no later
 * backfill's publish of one of its partitions stands and no other backfill is in flight over its hours; it must
 * be refused when a later generation stands. When it goes
 * through, b's partitions hold what they held before its publishes, plus every row that arrived since.
 */
export async function rollbackModelBackfill(model: Model, system: ModelSystem, b: ModelBackfill): Promise<void> {
  const state = await stateOf(system, b.id);
  const standing = laterGenerationStanding(model, b);
  const first = b.hours[0];
  const last = b.hours.at(-1);
  const inFlight = first && last ? await findOverlappingActive(system.ctx.pool, 'orders', new Date(first), new Date(last), b.id) : undefined;
  const result = await asPerson(model, system, `rollback #${b.id}`,
    () => rollbackBackfill(system.ctx, { backfillId: b.id, actor: OPERATOR }, { afterStatement: async () => offerStatement(system.rollbackStatements, undefined) }));
  // Rows another writer committed between the rollback's statements (or, held by a swap's lock, right after it).
  await Promise.all(system.landing.splice(0));
  const landed = system.firedLate.splice(0);
  if (result.ok) {
    if (standing) throw new InvariantViolation(`the rollback of #${b.id} went through although #${standing.backfillId} published ${standing.hour} after it`);
    recordRollback(model, b);
    for (const late of landed) recordLateRow(model, late);
    for (const hour of b.published.keys()) compareRows(hour, await partitionRows(system.ctx.pool, hour), expectedOf(model, hour), `right after the rollback of #${b.id}`);
    await kick(system, b.id);
  } else {
    for (const late of landed) recordLateRow(model, late);
  }
  if (!result.ok && state && ROLLBACK_STATES.includes(state) && b.published.size > 0 && !b.rolledBack && !standing && !inFlight) {
    throw new InvariantViolation(`the rollback of #${b.id} (${state}, ${b.published.size} partition(s) published, no later generation standing, ` +
      `nothing else in flight over its hours) was refused: ${result.message}`);
  }
}

class RollbackCommand extends BackfillCommand {
  async run(model: Model, system: ModelSystem): Promise<void> {
    await rollbackModelBackfill(model, system, this.backfill(model));
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `rollback(${this.which})`;
  }
}

/** The source of one hour changes after the preview: an amount corrected upstream, or an order withdrawn. */
class ChangeSourceCommand implements ModelCommand {
  constructor(readonly hourIndex: number, readonly change: 'amount' | 'withdraw') {}
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    const hour = MODEL_HOURS[this.hourIndex] as string;
    const first = `(SELECT ctid FROM warehouse.orders_raw WHERE event_hour = $1::timestamptz ORDER BY order_id LIMIT 1)`;
    const sql = this.change === 'amount'
      ? `UPDATE warehouse.orders_raw SET amount_local = amount_local + 100.00 WHERE ctid = ${first}`
      : `DELETE FROM warehouse.orders_raw WHERE ctid = ${first}`;
    await system.writer.query(sql, [hour]);
    model.clock += 1;
    model.sourceChanges.set(hour, [...(model.sourceChanges.get(hour) ?? []), model.clock]);
    note(model, `source of ${hour}: ${this.change}`);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `changeSource(${MODEL_HOURS[this.hourIndex]?.slice(11, 16)}, ${this.change})`;
  }
}

/** Another writer commits a row into a target hour: now, or from inside the next publish of that hour. */
class LateRowCommand implements ModelCommand {
  constructor(readonly hourIndex: number, readonly duringPublish: boolean) {}
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    const hour = MODEL_HOURS[this.hourIndex] as string;
    model.clock += 1;
    if (this.duringPublish) {
      system.seam.push(async (_backfillId, publishing) => {
        if (publishing !== hour) return false;
        model.stats.seamActions += 1;
        // By swap the publish holds the target until it commits: the row lands right after it, from a connection
        // of its own (a seam action after this one may need the shared writer to end that publish's session).
        const landing = withOwnConnection(system, (client) => insertLateRow(system, hour, client))
          .then((late) => system.firedLate.push({ ...late, duringPublish: true }));
        system.landing.push(landing);
        await Promise.race([landing, sleep(300)]);
        return true;
      });
      note(model, `a late row will land in ${hour} during its next publish`);
    } else {
      const late = await insertLateRow(system, hour);
      recordLateRow(model, { ...late, duringPublish: false });
      note(model, `late row ${late.orderId} landed in ${hour}`);
    }
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `lateRow(${MODEL_HOURS[this.hourIndex]?.slice(11, 16)}${this.duringPublish ? ', during its publish' : ''})`;
  }
}

/**
 * Another writer commits a row into a target hour right after the n-th statement of the next publish of that
 * hour, or of the next rollback: in every window of both, on both target shapes. A write the publish's or the
 * rollback's locks hold up lands right after its commit (from a connection of its own, as during a publish).
 */
class LateRowBetweenStatementsCommand implements ModelCommand {
  constructor(readonly hourIndex: number, readonly phase: 'publish' | 'rollback', readonly statement: number) {}
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    const hour = MODEL_HOURS[this.hourIndex] as string;
    model.clock += 1;
    let seen = 0;
    const actions = this.phase === 'publish' ? system.publishStatements : system.rollbackStatements;
    actions.push(async (publishing) => {
      if (this.phase === 'publish' && publishing !== hour) return false;
      seen += 1;
      if (seen < this.statement) return false;
      model.stats.statementWrites += 1;
      const landing = withOwnConnection(system, (client) => insertLateRow(system, hour, client))
        .then((late) => system.firedLate.push({ ...late, duringPublish: true }));
      system.landing.push(landing);
      await Promise.race([landing, sleep(300)]);
      return true;
    });
    note(model, `a late row will land in ${hour} after statement ${this.statement} of the next ${this.phase}${this.phase === 'publish' ? ' of that hour' : ''}`);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `lateRowAfterStatement(${MODEL_HOURS[this.hourIndex]?.slice(11, 16)}, ${this.phase}, ${this.statement})`;
  }
}

/**
 * An operator stops b while one of its publishes has done its writes and is about to commit. The stop is given
 * a moment to land inside the publish; if it has to wait for the publish's locks it lands right after it.
 */
class StopDuringPublishCommand extends BackfillCommand {
  async run(model: Model, system: ModelSystem): Promise<void> {
    const b = this.backfill(model);
    model.clock += 1;
    system.seam.push(async (backfillId) => {
      if (backfillId !== b.id) return false;
      model.stats.seamActions += 1;
      const stopping = stopBackfill(system.ctx, { backfillId: b.id, actor: OPERATOR, reason: 'model: stopped while a publish was committing' })
        .then(() => removeQueuedJobs(system.queue, b.id))
        .then(() => note(model, `stop #${b.id} during its publish: done`),
          (error: unknown) => note(model, `stop #${b.id} during its publish: refused (${requireExplainedRefusal(`stop #${b.id} during its publish`, error).message})`));
      system.pending.push(stopping);
      await Promise.race([stopping, sleep(300)]);
      return true;
    });
    note(model, `an operator will stop #${b.id} during its next publish`);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `stopDuringNextPublish(${this.which})`;
  }
}

/**
 * While the next publish has done its writes and waits to commit, another worker runs the next job to its end
 * (a publish of the same wave that pauses the backfill, say). If that job has to wait for the publish's locks,
 * the publish is let go after a moment and the job finishes after it.
 */
class JobDuringPublishCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    model.clock += 1;
    system.seam.push(async (_backfillId, hour) => {
      // Armed until a publish commits while another job waits (a canary publishes alone: nothing waits).
      if (await system.queue.getWaitingCount() === 0) return false;
      model.stats.seamActions += 1;
      const inner = runOneJob(model, system, { unlessHour: hour });
      system.pending.push(inner);
      await Promise.race([inner, sleep(500)]);
      return true;
    });
    note(model, 'another worker will run the next job while the next publish commits');
  }
  toString(): string {
    return 'nextJobRunsDuringNextPublish';
  }
}

/**
 * The next publish loses its database connection after its writes, before its commit (the worker's host
 * died, say): Postgres ends the session that holds the partition's lock, the transaction is gone, and the
 * step must be retried from scratch.
 */
class PublisherConnectionDiesCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    model.clock += 1;
    system.seam.push(async (_backfillId, hour) => {
      model.stats.seamActions += 1;
      const { rows } = await system.writer.query<{ ended: boolean }>(
        `SELECT pg_terminate_backend(l.pid) AS ended FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_backend_pid()
           -- pg_locks is the whole server's: other test files lock the same partitions in their own databases.
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND ((l.classid::bigint << 32) | l.objid::bigint) = hashtextextended('partition:orders:' || $1::timestamptz::text, 0)`, [hour]);
      if (rows.some((r) => r.ended)) system.connectionsKilled += 1;
      note(model, `the connection publishing ${hour} died before its commit`);
      return true;
    });
  }
  toString(): string {
    return 'nextPublishLosesItsConnection';
  }
}

class RunTwoJobsTogetherCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await runTwoJobsTogether(model, system);
    await system.settlePending();
  }
  toString(): string {
    return 'twoWorkersRunTwoJobsAtOnce';
  }
}

class RunJobsCommand implements ModelCommand {
  constructor(readonly count: number) {}
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    for (let n = 0; n < this.count; n += 1) {
      if (await runOneJob(model, system) === 'idle') break;
      await system.settlePending();
    }
  }
  toString(): string {
    return `runJobs(${this.count})`;
  }
}

class KillWorkerCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await runOneJob(model, system, { die: true });
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return 'workerDiesHoldingNextJob';
  }
}

class StalledCheckCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await recoverStalled(model, system);
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return 'stalledCheckerRuns';
  }
}

class LeaseExpiresCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await sleep(system.leaseMs + 30);
    model.clock += 1;
    note(model, 'time passed: every lease taken so far has expired');
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return 'leasesExpire';
  }
}

async function emptyRedis(model: Model, system: ModelSystem, when: string): Promise<void> {
  await system.queue.obliterate({ force: true });
  system.abandoned.splice(0);
  await dispatch(system.ctx, system.queue);
  model.stats.redisEmptied += 1;
  note(model, `Redis lost every job ${when}; the dispatcher rebuilt them from Postgres`);
}

/** Redis loses every job: now, or while the next publish waits to commit (its worker then cannot report it). */
class EmptyRedisCommand implements ModelCommand {
  constructor(readonly duringPublish: boolean) {}
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    model.clock += 1;
    if (this.duringPublish) {
      system.seam.push(async () => {
        model.stats.seamActions += 1;
        await emptyRedis(model, system, 'while a publish was committing');
        return true;
      });
    } else {
      await emptyRedis(model, system, 'now');
    }
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return `redisEmptied${this.duringPublish ? '(during the next publish)' : ''}`;
  }
}

class SweepCommand implements ModelCommand {
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    await dispatch(system.ctx, system.queue);
    model.clock += 1;
    await checkCheapInvariants(model, system);
  }
  toString(): string {
    return 'dispatcherSweep';
  }
}

class SlackFaultCommand implements ModelCommand {
  constructor(readonly method: FaultyMethod, readonly kind: FaultKind, readonly times: number) {}
  check(): boolean {
    return true;
  }
  async run(model: Model, system: ModelSystem): Promise<void> {
    system.messenger.failNext(this.method, this.kind, this.times);
    model.clock += 1;
    note(model, `Slack will fail the next ${this.times} ${this.method} call(s): ${this.kind}`);
  }
  toString(): string {
    return `slackFails(${this.method}, ${this.kind}, ${this.times}x)`;
  }
}

const backfillIndex = fc.constantFrom(0, 1);
const hourIndex = fc.integer({ min: 0, max: MODEL_HOURS.length - 1 });
const person = fc.constantFrom(...GATE_OWNERS, AFTER_OWNER);

/** Weighted so a sequence of ~15 commands moves the backfills along while the rest happens around them. */
export const modelCommands: fc.Arbitrary<ModelCommand> = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 1, max: 12 }).map((n) => new RunJobsCommand(n)) },
  { weight: 2, arbitrary: fc.constantFrom<RangeName>('early', 'late').map((r) => new StartCommand(r)) },
  { weight: 3, arbitrary: fc.tuple(backfillIndex, person, fc.boolean()).map(([i, p, d]) => new AcknowledgeCommand(i, p, d)) },
  { weight: 1, arbitrary: fc.tuple(backfillIndex, person).map(([i, p]) => new HoldCommand(i, p)) },
  { weight: 3, arbitrary: fc.tuple(backfillIndex, fc.oneof({ weight: 4, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) })).map(([i, r]) => new OverrideCommand(i, r)) },
  { weight: 1, arbitrary: backfillIndex.map((i) => new CancelCommand(i)) },
  { weight: 1, arbitrary: backfillIndex.map((i) => new StopCommand(i)) },
  { weight: 1, arbitrary: backfillIndex.map((i) => new StopDuringPublishCommand(i)) },
  { weight: 3, arbitrary: fc.constant(null).map(() => new RunTwoJobsTogetherCommand()) },
  { weight: 2, arbitrary: fc.constant(null).map(() => new JobDuringPublishCommand()) },
  { weight: 1, arbitrary: fc.constant(null).map(() => new PublisherConnectionDiesCommand()) },
  { weight: 2, arbitrary: fc.tuple(backfillIndex, fc.option(hourIndex, { nil: undefined })).map(([i, h]) => new ContinueCommand(i, h)) },
  { weight: 2, arbitrary: backfillIndex.map((i) => new RollbackCommand(i)) },
  { weight: 3, arbitrary: fc.tuple(hourIndex, fc.constantFrom<'amount' | 'withdraw'>('amount', 'withdraw')).map(([h, c]) => new ChangeSourceCommand(h, c)) },
  { weight: 3, arbitrary: fc.tuple(hourIndex, fc.boolean()).map(([h, d]) => new LateRowCommand(h, d)) },
  {
    weight: 3,
    arbitrary: fc.tuple(hourIndex, fc.constantFrom<'publish' | 'rollback'>('publish', 'rollback'), fc.integer({ min: 1, max: 40 }))
      .map(([h, p, n]) => new LateRowBetweenStatementsCommand(h, p, n)),
  },
  { weight: 2, arbitrary: fc.constant(null).map(() => new KillWorkerCommand()) },
  { weight: 1, arbitrary: fc.constant(null).map(() => new StalledCheckCommand()) },
  { weight: 1, arbitrary: fc.constant(null).map(() => new LeaseExpiresCommand()) },
  { weight: 1, arbitrary: fc.boolean().map((during) => new EmptyRedisCommand(during)) },
  { weight: 1, arbitrary: fc.constant(null).map(() => new SweepCommand()) },
  {
    weight: 2,
    arbitrary: fc.tuple(fc.constantFrom(...FAULTY_METHODS), fc.constantFrom<FaultKind>('transient', 'undeliverable'), fc.integer({ min: 1, max: 2 }))
      .map(([m, k, t]) => new SlackFaultCommand(m, k === 'undeliverable' && (m === 'announce' || m === 'notifyOwner') ? k : 'transient', t)),
  },
);

async function withOwnConnection<T>(system: ModelSystem, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: system.ctx.config.DATABASE_URL, application_name: 'backfill-bot-model-late-writer' });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}
