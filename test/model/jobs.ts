// Running one job as a worker would, and updating the model from what the database then says: a stage records
// its baseline, a publish records what it replaced and what the partition must now hold. A worker that dies
// takes a job and the step's claim, and never comes back; two workers may also run two jobs at once.

import { UnrecoverableError, type Job } from 'bullmq';
import { stepPayloadSchema } from '../../src/queue/registry.js';
import { claimStep } from '../../src/core/lifecycle/stepClaims.js';
import type { StepRef } from '../../src/core/procedure.js';
import { BackfillError, describeError } from '../../src/errors.js';
import { TRANSIENT_FAULT } from '../support/modelMessenger.js';
import {
  JobTimeout, partitionRows, processTaken, stagedRows, takeNextJob, type DeadClaim, type JobResult, type ModelSystem, type RowMap,
} from '../support/modelSystem.js';
import { checkCheapInvariants, checkPreserved, compareRows, InvariantViolation, isRawDatabaseMessage } from './checks.js';
import { expectedOf, note, recordLateRow, recordPublish, type Model, type ModelBackfill } from './model.js';

/** What a transaction whose connection the test ended fails with (57P01, or the socket closing under it). */
const CONNECTION_LOST = /terminating connection due to administrator command|Connection terminated unexpectedly|Client has encountered a connection error and is not queryable/;

/**
 * A job may fail, but only with the engine's own words or an injected fault (a Slack 503, a connection the
 * test ended); never a raw error.
 */
function requireExplainedFailure(system: ModelSystem, label: string, error: unknown): void {
  if (error instanceof Error && error.message === TRANSIENT_FAULT) return;
  if (error instanceof Error && system.connectionsKilled > 0 && CONNECTION_LOST.test(error.message)) {
    system.connectionsKilled -= 1;
    return;
  }
  if (error instanceof BackfillError || error instanceof UnrecoverableError) {
    if (isRawDatabaseMessage(error.message)) throw new InvariantViolation(`${label} failed with a raw database error: ${error.message}`);
    return;
  }
  throw new InvariantViolation(`${label} failed with a raw ${error instanceof Error ? error.constructor.name : typeof error}: ${describeError(error)}`);
}

async function targetStatus(system: ModelSystem, backfillId: number, hour: string): Promise<string | undefined> {
  const { rows } = await system.ctx.pool.query<{ status: string }>(
    'SELECT status FROM backfill.backfill_targets WHERE backfill_id = $1::bigint AND partition_hour = $2::timestamptz', [backfillId, hour]);
  return rows[0]?.status;
}

/**
 * Late rows the publish seam wrote during the job(s) just run: into the model before the publish itself is
 * recorded (a job run inside another publish's seam may be the one that finds them; they count all the same).
 */
async function drainSeamRows(model: Model, system: ModelSystem): Promise<void> {
  await Promise.all(system.landing.splice(0));
  for (const late of system.firedLate.splice(0)) {
    recordLateRow(model, late);
    note(model, `late row ${late.orderId} written into ${late.hour} during its publish`);
  }
}

interface Prepared {
  taken: { job: Job; token: string };
  ref: StepRef | undefined;
  label: string;
  hour: string | undefined;
  modelled: ModelBackfill | undefined;
  before: RowMap | undefined;
  /**
   * For a stage: the live rows of every hour of its backfill not staged yet. A stage of a small hour stages the next
   * small ones with it (its companions), so any of them may be staged once the job is done.
   */
  unstaged: Map<string, RowMap>;
  wasPublished: boolean;
}

/** The hours of the backfill whose stage step is not done. */
async function unstagedHours(system: ModelSystem, backfillId: number): Promise<string[]> {
  const { rows } = await system.ctx.pool.query<{ hour: Date }>(
    `SELECT partition_hour AS hour FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = 'stage' AND status <> 'done'`, [backfillId]);
  return rows.map((row) => row.hour.toISOString());
}

/** Of `hours`, those whose stage step is done now. */
async function stagedNow(system: ModelSystem, backfillId: number, hours: string[]): Promise<string[]> {
  const { rows } = await system.ctx.pool.query<{ hour: Date }>(
    `SELECT partition_hour AS hour FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = 'stage' AND status = 'done' AND partition_hour = ANY ($2::timestamptz[])`,
    [backfillId, hours]);
  return rows.map((row) => row.hour.toISOString());
}

/** Takes the next job from Redis and reads what the model needs to judge it afterwards. */
async function prepareJob(model: Model, system: ModelSystem): Promise<Prepared | undefined> {
  const taken = await takeNextJob(system);
  if (!taken) return undefined;
  model.clock += 1;
  model.stats.jobs += 1;
  const parsed = stepPayloadSchema.safeParse(taken.job.data);
  const ref = parsed.success ? parsed.data : undefined;
  const hour = ref && (ref.kind === 'stage' || ref.kind === 'publish') ? new Date(ref.key).toISOString() : undefined;
  return {
    taken, ref, hour,
    label: ref ? `${ref.kind} ${ref.key} of #${ref.backfillId}` : taken.job.name,
    modelled: ref ? model.backfills.find((b) => b.id === ref.backfillId) : undefined,
    before: hour ? await partitionRows(system.ctx.pool, hour) : undefined,
    unstaged: new Map(ref?.kind === 'stage'
      ? await Promise.all((await unstagedHours(system, ref.backfillId)).map(async (unstaged) => [unstaged, await partitionRows(system.ctx.pool, unstaged)] as const))
      : []),
    wasPublished: ref?.kind === 'publish' && hour ? await targetStatus(system, ref.backfillId, hour) === 'published' : false,
  };
}

async function execute(system: ModelSystem, prepared: Prepared): Promise<JobResult> {
  try {
    return await processTaken(system, prepared.taken);
  } catch (error) {
    if (error instanceof JobTimeout) throw new InvariantViolation(`${prepared.label} hung: ${error.message}`);
    throw error;
  }
}

/** After the job: a stage records the baseline of each hour it staged; a publish is checked (saved rows, live rows) and recorded. */
async function finishJob(model: Model, system: ModelSystem, prepared: Prepared, result: JobResult): Promise<void> {
  const { ref, hour, before, modelled, label, unstaged } = prepared;
  if (result.error !== undefined) requireExplainedFailure(system, label, result.error);
  note(model, `ran ${label}: ${result.error !== undefined ? `failed (${describeError(result.error)})` : String(result.outcome)}`);
  if (!ref || !hour || !before || !modelled) return;
  if (ref.kind === 'stage') {
    for (const staged of await stagedNow(system, ref.backfillId, [...unstaged.keys()])) {
      modelled.staged.set(staged, { at: model.clock, baseline: new Set(unstaged.get(staged)?.keys() ?? []) });
    }
  }
  if (ref.kind === 'publish' && !prepared.wasPublished && await targetStatus(system, ref.backfillId, hour) === 'published') {
    await checkPreserved(system, ref.backfillId, hour, before);
    recordPublish(model, modelled, hour, before, await stagedRows(system.ctx.pool, ref.backfillId, hour));
    compareRows(hour, await partitionRows(system.ctx.pool, hour), expectedOf(model, hour), `right after #${ref.backfillId} published it`);
  }
}

/**
 * Takes the next job from Redis and runs it to the end (or, with `die`, abandons it). 'idle' when none is ready.
 * `unlessHour`: a job of that partition is put back instead (it runs inside that partition's publish).
 */
export async function runOneJob(model: Model, system: ModelSystem, options: { die?: boolean; unlessHour?: string } = {}): Promise<'idle' | 'ran'> {
  const prepared = await prepareJob(model, system);
  if (!prepared) return 'idle';
  if (options.unlessHour !== undefined && prepared.hour === options.unlessHour) {
    await prepared.taken.job.moveToWait(prepared.taken.token);
    note(model, `${prepared.label} was not run inside its own partition's publish`);
    return 'idle';
  }
  if (options.die) {
    const claim = prepared.ref ? await claimAndDie(model, system, prepared.ref) : undefined;
    system.abandoned.push({ ...prepared.taken, ...(claim ? { claim } : {}) });
    model.stats.killed += 1;
    note(model, `a worker took ${prepared.label} and died${claim ? ' holding its claim' : ''}`);
    return 'ran';
  }
  const result = await execute(system, prepared);
  await drainSeamRows(model, system);
  await finishJob(model, system, prepared, result);
  await checkCheapInvariants(model, system);
  return 'ran';
}

/**
 * Two workers each take a job and run it at the same time: real transactions racing in Postgres. Two jobs of
 * the same partition are not run together (the model could not tell which one's snapshot came first): the
 * second waits for the first.
 */
export async function runTwoJobsTogether(model: Model, system: ModelSystem): Promise<number> {
  const first = await prepareJob(model, system);
  if (!first) return 0;
  const second = await prepareJob(model, system);
  if (second && second.hour !== undefined && second.hour === first.hour) {
    const firstResult = await execute(system, first);
    await drainSeamRows(model, system);
    await finishJob(model, system, first, firstResult);
    second.before = second.hour ? await partitionRows(system.ctx.pool, second.hour) : undefined;
    const secondResult = await execute(system, second);
    await drainSeamRows(model, system);
    await finishJob(model, system, second, secondResult);
  } else {
    const results = await Promise.all([execute(system, first), ...(second ? [execute(system, second)] : [])]);
    await drainSeamRows(model, system);
    note(model, `${first.label}${second ? ` and ${second.label}` : ''} ran at the same time`);
    await finishJob(model, system, first, results[0] as JobResult);
    if (second) await finishJob(model, system, second, results[1] as JobResult);
  }
  await checkCheapInvariants(model, system);
  return second ? 2 : 1;
}

/** The dead worker's claim, taken through the engine, with the lease it got (read from the step row). */
async function claimAndDie(model: Model, system: ModelSystem, ref: StepRef): Promise<DeadClaim | undefined> {
  const claimed = await claimStep(system.ctx.pool, ref, system.leaseMs);
  if (claimed.outcome !== 'claimed') return undefined;
  const { rows } = await system.ctx.pool.query<{ until: number; lastEvent: number }>(
    `SELECT (extract(epoch FROM lease_expires_at) * 1000)::float8 AS until,
            (SELECT max(id) FROM backfill.events)::float8 AS "lastEvent"
     FROM backfill.backfill_steps WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text`, [ref.backfillId, ref.kind, ref.key]);
  model.stats.claimsTaken += 1;
  const claim = { backfillId: ref.backfillId, kind: ref.kind, key: ref.key, token: claimed.token, leaseUntil: rows[0]?.until ?? Date.now(), afterEventId: rows[0]?.lastEvent ?? 0 };
  system.deadClaims.push(claim);
  return claim;
}

/** What BullMQ's stalled checker does for a dead worker's job once its lock ran out: back to waiting. */
export async function recoverStalled(model: Model, system: ModelSystem): Promise<number> {
  let moved = 0;
  for (const dead of system.abandoned.splice(0)) {
    // A job that Redis lost (obliterated) or that was removed (a stop) has nothing to move.
    const state = await dead.job.getState().catch(() => 'unknown');
    if (state !== 'active') continue;
    await dead.job.moveToWait(dead.token);
    moved += 1;
  }
  if (moved > 0) note(model, `the stalled checker moved ${moved} dead worker job(s) back to waiting`);
  return moved;
}
