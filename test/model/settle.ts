// After the random sequence: the people do their part (every owner acknowledges, an operator overrides whoever
// Slack cannot reach, a paused backfill is continued naming its breached partitions, or stopped) and the workers
// run jobs until no backfill is in flight, within a bound. The dispatcher sweeps whenever nothing is ready,
// dead workers' jobs come back through the stalled checker, and the loop waits out leases that still hold.

import { acknowledge, gateStatus, overrideGate } from '../../src/core/announce/gate.js';
import { ACTIVE_STATES, type BackfillState } from '../../src/core/states.js';
import { dispatch } from '../../src/queue/stepQueue.js';
import { OPERATOR, type ModelSystem } from '../support/modelSystem.js';
import { asPerson, continueModelBackfill, stopModelBackfill } from './commands.js';
import { InvariantViolation } from './checks.js';
import { recoverStalled, runOneJob } from './jobs.js';
import { AFTER_OWNER, GATE_OWNERS, note, type Model, type ModelBackfill } from './model.js';

const SETTLE_MAX_JOBS = 300;
const SETTLE_MAX_MS = 60_000;
/** Rounds in a row with nothing to run, nothing to wait for and nobody to act: the run is stuck. */
const STUCK_ROUNDS = 12;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function statesOf(system: ModelSystem): Promise<Map<number, BackfillState>> {
  const { rows } = await system.ctx.pool.query<{ id: number; state: BackfillState }>('SELECT id, state FROM backfill.backfills');
  return new Map(rows.map((r) => [r.id, r.state]));
}

/** Partitions a paused backfill is waiting on an acceptance for (targets.breach, once the engine records it). */
async function breachedPartitions(system: ModelSystem, backfillId: number): Promise<Date[]> {
  if (!system.schema.breach) return [];
  const { rows } = await system.ctx.pool.query<{ hour: Date }>(
    'SELECT partition_hour AS hour FROM backfill.backfill_targets WHERE backfill_id = $1::bigint AND breach IS NOT NULL ORDER BY partition_hour', [backfillId]);
  return rows.map((r) => r.hour);
}

/** One round of people: returns whether anyone did anything. */
async function drivePeople(model: Model, system: ModelSystem, states: Map<number, BackfillState>): Promise<boolean> {
  let acted = false;
  for (const b of model.backfills) {
    const state = states.get(b.id);
    if (state === 'announced' || state === 'held') acted = (await openGate(model, system, b)) || acted;
    if (state === 'paused') acted = (await resolvePause(model, system, b)) || acted;
  }
  return acted;
}

async function openGate(model: Model, system: ModelSystem, b: ModelBackfill): Promise<boolean> {
  let acted = false;
  const { waitingFor, backfill } = await gateStatus(system.ctx.pool, b.id);
  // Whoever held it releases it by acknowledging: any owner in the backfill may hold, so everyone acknowledges.
  for (const owner of [...GATE_OWNERS, AFTER_OWNER]) {
    if (backfill.state !== 'held' && !waitingFor.some((w) => w.owner === owner)) continue;
    const result = await asPerson(model, system, `settle: acknowledge #${b.id} by ${owner}`, () => acknowledge(system.ctx, { backfillId: b.id, actor: owner }));
    acted = acted || (result.ok && result.value.changed);
  }
  const after = await gateStatus(system.ctx.pool, b.id);
  if (after.backfill.state === 'announced' && after.waitingFor.length > 0) {
    const result = await asPerson(model, system, `settle: override #${b.id}`, () =>
      overrideGate(system.ctx, { backfillId: b.id, actor: OPERATOR, reason: 'model: owner unreachable, finance lead approved' }));
    acted = acted || (result.ok && result.value.changed);
  }
  await dispatch(system.ctx, system.queue, b.id);
  return acted;
}

async function resolvePause(model: Model, system: ModelSystem, b: ModelBackfill): Promise<boolean> {
  if (model.settlePolicy === 'stop') return stopModelBackfill(model, system, b);
  const breached = model.settlePolicy === 'continue-named' ? await breachedPartitions(system, b.id) : [];
  if (await continueModelBackfill(model, system, b, breached.length > 0 ? breached : undefined)) return true;
  // Refused (duplicate keys cannot be accepted): the operator stops it instead.
  return stopModelBackfill(model, system, b);
}

/** Milliseconds until the earliest lease of a step still marked running expires (undefined: none holds). */
async function nextLeaseExpiry(system: ModelSystem): Promise<number | undefined> {
  if (!system.schema.leases) return undefined;
  const { rows } = await system.ctx.pool.query<{ ms: number | null }>(
    `SELECT (extract(epoch FROM min(lease_expires_at) - clock_timestamp()) * 1000)::float8 AS ms
     FROM backfill.backfill_steps WHERE status = 'running' AND lease_expires_at > clock_timestamp()`);
  const ms = rows[0]?.ms;
  return ms === null || ms === undefined ? undefined : Math.max(0, ms);
}

export interface SettleOutcome {
  jobs: number;
  ms: number;
}

export async function settle(model: Model, system: ModelSystem): Promise<SettleOutcome> {
  const started = Date.now();
  let jobs = 0;
  let idle = 0;
  note(model, 'settling: people do their part, workers run until nothing is in flight');
  for (;;) {
    if (Date.now() - started > SETTLE_MAX_MS) break;
    if (await runOneJob(model, system) === 'ran') {
      await system.settlePending();
      jobs += 1;
      idle = 0;
      if (jobs >= SETTLE_MAX_JOBS) break;
      continue;
    }
    const states = await statesOf(system);
    if ([...states.values()].every((s) => !ACTIVE_STATES.includes(s))) return { jobs, ms: Date.now() - started };
    const acted = await drivePeople(model, system, states);
    await dispatch(system.ctx, system.queue);
    const recovered = await recoverStalled(model, system);
    if (acted || recovered > 0) {
      idle = 0;
      continue;
    }
    const lease = await nextLeaseExpiry(system);
    if (lease !== undefined) {
      await sleep(lease + 30);
      continue;
    }
    idle += 1;
    if (idle >= STUCK_ROUNDS) break;
    // Retries wait out their backoff (a few ms) as delayed jobs.
    await sleep(10 * idle);
  }
  const states = await statesOf(system);
  const open = [...states].filter(([, s]) => ACTIVE_STATES.includes(s));
  if (open.length === 0) return { jobs, ms: Date.now() - started };
  const why = jobs >= SETTLE_MAX_JOBS ? `${SETTLE_MAX_JOBS} jobs` : idle >= STUCK_ROUNDS ? 'nothing left to run, wait for or act on' : `${SETTLE_MAX_MS} ms`;
  throw new InvariantViolation(`the run did not settle (${why}): ${open.map(([id, s]) => `#${id} ${s}`).join(', ')} still in flight`);
}
