import { createHash } from 'node:crypto';
import { hostname } from 'node:os';
import { lockBackfillForShare, requireBackfill, type BackfillRow } from '../../db/backfills.js';
import { recordEvent, type NewEvent } from '../../db/events.js';
import { terminateTransactionsNamed, withTransaction, withTransactionsNamed, type Pool, type PoolClient, type Queryable } from '../../db/pool.js';
import {
  claimStepRow, countOpenStepsByPhase, failStepClaim, finishClaimedStepRows, findExpiredClaims, lockStepClaim, lockStepForClaim, moveStepStatuses,
  releaseStepClaim, renewStepLease, type OpenStepsByPhase,
} from '../../db/steps.js';
import { BackfillError, describeError, ErrorCode } from '../../errors.js';
import { FINAL, PHASE_EXITS, specOf, stepStatusesMovableTo, type StepRef, type StepStatus } from './stepGraph.js';
import { upsertBackfillCost } from '../../db/costs.js';
import { EVENTS, finishBackfill, transition } from './stateMachine.js';
import { isFinished } from '../states.js';

/** Which process claimed a step, in its timeline: with several workers on several hosts, the one to look at. */
const WORKER = `${hostname()}:${process.pid}`;

// Claims: a worker owns a step while its token is on the row and its lease holds. Every commit of a step's
// effect re-reads the backfill's state and then the step's token under row locks, in that order (finishStep;
// checkClaim for a step that pauses) —
// the order every transaction that moves steps takes them in, so they queue instead of deadlocking. Those two
// reads are the fence: a stop or pause moves the state under the same row lock, a takeover replaces the token
// (and ends the old holder's session), so a late write either committed before them or sees them and rolls back.

const ENGINE = 'backfill-bot';

/** How long a takeover waits for the old holder's session to be gone (it goes at once unless the server is stuck). */
const HOLDER_GONE_WAIT_MS = 5_000;

/**
 * The name a claim's transactions carry in pg_stat_activity while they are open (withTransactionsNamed): the
 * step, readable by whoever looks, and a digest of the token (never the token: other roles of the server can read
 * application_name). At most 61 characters, under PostgreSQL's 63.
 */
export function claimHolderName(ref: StepRef, token: string): string {
  return `backfill-bot bf${ref.backfillId} ${ref.kind} ${createHash('sha256').update(token).digest('hex').slice(0, 16)}`;
}

/**
 * Runs a claimed step's body: every transaction it opens carries the claim's name, so a worker that takes the
 * step over after the lease ran out ends the session still holding it (claimStep) instead of waiting on its locks.
 */
export function runClaimed<T>(ref: StepRef, token: string, body: () => Promise<T>): Promise<T> {
  return withTransactionsNamed(claimHolderName(ref, token), body);
}

export type ClaimOutcome = 'already_done' | 'not_runnable' | 'claimed_elsewhere';
export type Claim = { outcome: 'claimed'; token: string; takeover: boolean; companions: StepRef[] } | { outcome: ClaimOutcome };

/**
 * Further steps a step takes into its claim, in the claim's transaction, under its token (a run of small stages:
 * src/core/recompute/recomputeSteps.ts): their body runs with the step's, and they commit behind its fence or not
 * at all. `started` is their step_started event, less their key and attempt.
 */
export type CompanionClaim = (tx: PoolClient, lead: StepRef, token: string, started: NewEvent) => Promise<StepRef[]>;

/**
 * Claims a step by compare-and-set: only a pending step, or a running one whose lease ran out (its worker
 * died), that the step graph says may run now. A copy of a step that is still running under a live lease gets
 * `claimed_elsewhere` and does nothing.
 */
export async function claimStep(pool: Pool, ref: StepRef, leaseMs: number, companions?: CompanionClaim): Promise<Claim> {
  return withTransaction(pool, async (tx) => {
    // A holder whose lease ran out may be frozen (SIGSTOP, a paused VM) anywhere in its step's transaction, also
    // after its fence, holding the backfill's row until IDLE_IN_TRANSACTION_TIMEOUT_MS: the lock below would wait
    // on it that long, the claim of any step of the backfill. So the sessions of every claim of the backfill whose
    // lease ran out are ended first, from a read that takes no lock (each such step is taken over when it is
    // claimed next); the locked read then decides this claim.
    const expired = await findExpiredClaims(tx, ref.backfillId);
    const endedFirst = await terminateTransactionsNamed(tx, expired.map((claim) => claimHolderName(claim.ref, claim.token)), HOLDER_GONE_WAIT_MS);
    // FOR SHARE: a state move (pause, stop) waits for this claim to commit, or this claim sees its result.
    const backfillExists = await lockBackfillForShare(tx, ref.backfillId);
    const step = await lockStepForClaim(tx, ref);
    // A step belongs to its backfill (a foreign key): no backfill, no step.
    if (!step || !backfillExists) throw new BackfillError(ErrorCode.StepFailed, `no step ${ref.kind} ${ref.key} in backfill #${ref.backfillId}`);
    if (FINAL.includes(step.status)) return { outcome: 'already_done' };
    if (step.status === 'running' && !step.expired) return { outcome: 'claimed_elsewhere' };
    if (step.status === 'blocked' || !step.runnable) return { outcome: 'not_runnable' };
    const takeover = step.status === 'running';
    // The old holder may be frozen inside the step's transaction (SIGSTOP, a paused VM), holding its locks until
    // IDLE_IN_TRANSACTION_TIMEOUT_MS: end its session now, so this run does not wait on them. Whatever it resumes
    // with, its commit fails the claim check below (the token changes here) or finds its connection gone.
    const endedSessions = [...endedFirst, ...(takeover && step.token ? await terminateTransactionsNamed(tx, [claimHolderName(ref, step.token)], HOLDER_GONE_WAIT_MS) : [])];
    const token = await claimStepRow(tx, ref, leaseMs, { backfillId: ref.backfillId, actor: ENGINE, kind: 'step_started',
      detail: { step: ref.kind, key: ref.key, attempt: step.attempts + 1, takeover, worker: WORKER, ...(endedSessions.length > 0 ? { endedSessions } : {}) } });
    if (!token) throw new Error('claim update returned no token');
    // Only a step's first run takes others with it: a step that failed (or whose holder died) runs alone, so that a
    // failure is its own hour's, and a takeover takes exactly the step it was dispatched for.
    const taken = companions && !takeover && step.attempts === 0
      ? await companions(tx, ref, token, { backfillId: ref.backfillId, actor: ENGINE, kind: 'step_started', detail: { step: ref.kind, takeover: false, worker: WORKER, with: ref.key } })
      : [];
    return { outcome: 'claimed', token, takeover, companions: taken };
  });
}

/** Renews the lease every third of its length while the step runs; returns the function that stops it. */
export function keepClaim(pool: Pool, ref: StepRef, token: string, leaseMs: number): () => void {
  const timer = setInterval(() => {
    renewStepLease(pool, ref, token, leaseMs)
      .catch(() => undefined); // a missed renewal only shortens the lease; the commit check decides
  }, Math.max(50, Math.floor(leaseMs / 3)));
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * The fence as two reads, for a step that pauses its backfill instead of finishing (pause.ts; finishStep makes the
 * second read its update): the backfill is still in a state the step runs in,
 * read under its row lock (a WrongState error carrying the state: stopped, paused, failed…), and this worker
 * still holds the claim, its token read under the step's row lock (ClaimLost: another worker took it over
 * after its lease ran out). Takes the backfill row lock, then the step row lock.
 */
export async function checkClaim(tx: PoolClient, ref: StepRef, token: string): Promise<BackfillRow> {
  const backfill = await lockBackfillInItsState(tx, ref);
  const step = await lockStepClaim(tx, ref);
  if (step?.status !== 'running' || step.token !== token) throw claimLost(ref, step?.status);
  return backfill;
}

/** The first half of the fence: the backfill under its row lock, in a state the step runs in (else WrongState). */
async function lockBackfillInItsState(tx: PoolClient, ref: StepRef): Promise<BackfillRow> {
  const backfill = await requireBackfill(tx, ref.backfillId, { forUpdate: true });
  if (!specOf(ref).runsIn.includes(backfill.state)) {
    throw new BackfillError(ErrorCode.WrongState,
      `backfill #${ref.backfillId} is ${backfill.state}: ${ref.kind} ${ref.key} does not commit, and its writes are rolled back`,
      { details: { state: backfill.state } });
  }
  return backfill;
}

function claimLost(ref: StepRef, status: StepStatus | undefined): BackfillError {
  return new BackfillError(ErrorCode.ClaimLost,
    `${ref.kind} ${ref.key} of backfill #${ref.backfillId} is no longer this worker's (it is ${status ?? 'gone'}): nothing of this run commits`,
    { details: { status } });
}

/**
 * Finishes a claimed step inside the caller's transaction, behind the fence: the backfill's state under its row
 * lock, then the step marked done (or undeliverable) only while this token holds it, which takes the step's row
 * lock (checkClaim's two reads, the second one the update itself); and the backfill advanced when a phase is
 * complete, by the counts that update returned.
 */
export async function finishStep(tx: PoolClient, ref: StepRef, token: string, result: Record<string, unknown>,
  options: { status?: 'done' | 'undeliverable' } = {}): Promise<BackfillRow> {
  return finishSteps(tx, ref, token, new Map([[ref.key, result]]), options);
}

/**
 * finishStep for a step and the companions it took into its claim (steps of its kind, by key in `results`), behind
 * one fence: all of them commit, or (one of them no longer this token's) none.
 */
export async function finishSteps(tx: PoolClient, lead: StepRef, token: string, results: ReadonlyMap<string, Record<string, unknown>>,
  options: { status?: 'done' | 'undeliverable' } = {}): Promise<BackfillRow> {
  const backfill = await lockBackfillInItsState(tx, lead);
  const open = await finishClaimedStepRows(tx, lead.backfillId, lead.kind, token, options.status ?? 'done', results);
  if (!open || open.finished !== results.size) {
    const lost = await firstLost(tx, lead, token, [...results.keys()]);
    throw claimLost(lost.ref, lost.status);
  }
  await advanceBackfillBy(tx, lead.backfillId, open);
  // A step of a finished backfill (an after-run message, the diff post) adds to its cost: filed again, whole.
  if (isFinished(backfill.state)) await upsertBackfillCost(tx, lead.backfillId);
  return backfill;
}

/** Which of the steps this token no longer held, and what it is now, for the error. */
async function firstLost(tx: PoolClient, lead: StepRef, token: string, keys: string[]): Promise<{ ref: StepRef; status: StepStatus | undefined }> {
  for (const key of keys) {
    const ref = { ...lead, key };
    const step = await lockStepClaim(tx, ref);
    if (step?.status !== 'running' || step.token !== token) return { ref, status: step?.status };
  }
  return { ref: lead, status: undefined };
}

/**
 * Gives a claimed step back: to pending (a retry, attempts left), blocked (a pause caught it) or skipped (its
 * backfill is stopped, cancelled or failed). Only while the claim is still this worker's.
 */
export async function releaseClaim(db: Queryable, ref: StepRef, token: string, to: 'pending' | 'blocked' | 'skipped', error?: unknown): Promise<boolean> {
  return releaseStepClaim(db, ref, token, to, error === undefined ? null : describeError(error));
}

/**
 * Gives a claimed step back to pending for a retry, with its error, and says so in the timeline: a failed attempt
 * with attempts left (runStep), or a companion whose hour failed in its lead's run. False, having written nothing,
 * when the token no longer held it.
 */
export async function releaseForRetry(db: Queryable, ref: StepRef, token: string, error: unknown): Promise<boolean> {
  if (!(await releaseClaim(db, ref, token, 'pending', error))) return false;
  await recordEvent(db, { backfillId: ref.backfillId, actor: ENGINE, kind: 'step_retried', detail: { step: ref.kind, key: ref.key, error: describeError(error) } });
  return true;
}

/**
 * Moves every step of a backfill that may move to `to` (pending, running and blocked ones for skipped; the
 * running ones of the given kinds for blocked; blocked ones for pending). A running step moved here loses its
 * claim: its worker's commit check then fails and its writes roll back.
 */
export async function moveSteps(tx: Queryable, backfillId: number, to: StepStatus, options: { kinds?: readonly string[]; from?: readonly StepStatus[] } = {}): Promise<number> {
  const from = (options.from ?? stepStatusesMovableTo(to)).filter((status) => stepStatusesMovableTo(to).includes(status));
  return moveStepStatuses(tx, backfillId, to, from, options.kinds ?? null);
}

/**
 * A claimed step ran out of attempts (or hit an error retrying cannot fix): the step fails, and so does the
 * backfill, naming it; every other step of it is skipped.
 */
export async function failClaimedStep(pool: Pool, ref: StepRef, token: string, error: unknown): Promise<void> {
  await withTransaction(pool, async (tx) => {
    await requireBackfill(tx, ref.backfillId, { forUpdate: true });
    const message = describeError(error);
    if (!(await failStepClaim(tx, ref, token, message))) return; // no longer ours: whoever holds it decides
    await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'step_failed', detail: { step: ref.kind, key: ref.key, error: message } });
    const failure = `${ref.kind} ${ref.key} failed: ${message}`;
    if (await finishBackfill(tx, { backfillId: ref.backfillId, event: 'fail', actor: ENGINE, set: { failure, finished_at: new Date() } })) {
      await moveSteps(tx, ref.backfillId, 'skipped');
      await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'failed', detail: { step: ref.kind, key: ref.key, failure } });
    }
  });
}

/** Moves running → replaying → comparing (and rolling_back → rolled_back) as phases complete. Safe any time. */
export async function advanceBackfill(tx: Queryable, backfillId: number): Promise<void> {
  const row = await countOpenStepsByPhase(tx, backfillId);
  if (row) await advanceBackfillBy(tx, backfillId, row);
}

/** advanceBackfill, by counts of the open steps already read under the backfill's row lock. */
async function advanceBackfillBy(tx: Queryable, backfillId: number, row: OpenStepsByPhase): Promise<void> {
  let state = row.state;
  for (const [index, exit] of PHASE_EXITS.entries()) {
    if (state !== exit.from || row.open[index] !== 0) continue;
    if (isFinished(EVENTS[exit.event].to)) await finishBackfill(tx, { backfillId, event: exit.event, actor: ENGINE, set: { finished_at: new Date() } });
    else await transition(tx, { backfillId, event: exit.event, actor: ENGINE });
    state = EVENTS[exit.event].to;
  }
}
