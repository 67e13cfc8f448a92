import { updateBackfillState } from '../../db/backfills.js';
import type { Queryable } from '../../db/pool.js';
import { recordEvent } from '../../db/events.js';
import { upsertBackfillCost } from '../../db/costs.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { describeState, isFinished, type BackfillState } from '../states.js';

/*
 * The life of a backfill.
 *
 *   announced ──open gate──▶ approved ──run──▶ running ──replay──▶ replaying ──compare──▶ comparing ──finish──▶ done
 *      ▲  │                                     │  ▲                 │
 *      │  └─hold──▶ held                  pause │  │ continue  pause │
 *      └──release──┘                            ▼  │                 │
 *                                              paused ◀──────────────┘
 *
 *   done, failed, stopped, paused ──roll back──▶ rolling_back ──restore──▶ rolled_back
 *   cancel, stop and fail end it from the states EVENTS names.
 *
 * Who makes each move (every one is a named event of EVENTS, each move one UPDATE … WHERE state = ANY(from), so
 * two processes cannot make it twice, with its timeline row in the same transaction):
 *
 * announced: entered by `start` (src/core/announce/start.ts: the log row with total_before and announced_at, the
 *   announcements generated, nothing deleted), and by an owner's acknowledgement that releases a hold. Left when the
 *   last "before" owner acknowledges or an operator overrides (open gate: src/core/announce/gate.ts), an owner holds,
 *   an operator cancels or stops, or an announcement runs out of attempts (fail).
 * held: entered by an owner's Hold; nothing is enqueued while held. Left by the holder's acknowledgement (release,
 *   or open gate when it was the last one missing), cancel, stop or fail.
 * approved: every gate open; its steps exist as rows. Left when the dispatcher runs it (run:
 *   src/core/lifecycle/dispatch.ts), or by cancel, stop or fail.
 * running: partitions staged, then published canary first and wave by wave (src/core/recompute/waves.ts); the
 *   watermark moved back. Left when those steps are all done (replay: the step graph's phase exit,
 *   src/core/lifecycle/stepClaims.ts advanceBackfill), a publish pauses it, a step fails, or an operator stops it.
 * paused: a canary or wave showed a difference the plan did not predict (or duplicate keys), or a stage, publish or
 *   replay found the catalog changed since the announcement (src/core/catalog/catalogGuard.ts); both generations are
 *   kept, and paused_for says which. Left by an operator: continue (to running; a backfill whose partitions are all
 *   published moves straight on to replaying by the phase exit), stop, or roll back.
 * replaying: consumers re-triggered in dependency order. Left when every replay is done (compare), a replay pauses
 *   it, a step fails, or an operator stops it.
 * comparing: signed figures compared with what the rebuilt reports show. Left by the compare step (finish: done,
 *   the log row completed), fail or stop.
 * done, failed, cancelled, stopped, rolled_back: finished; the move into each files the cost (finishBackfill).
 *   failed names the step that ran out of attempts; stopped was fenced by an operator (queued jobs removed, no
 *   write of it commits any more: each step's commit reads this state under the row lock the stop took).
 *   done, failed and stopped can still be rolled back (src/core/recovery/recovery.ts).
 * rolling_back: entered by an operator's rollback (the preserved rows restored in one transaction); left when its
 *   replays and messages are done (restore: the phase exit) or one of them fails.
 */
/** Every move a backfill makes, by name: from where, to where. */
export const EVENTS = {
  hold: { from: ['announced'], to: 'held' },
  release: { from: ['held'], to: 'announced' },
  'open gate': { from: ['announced', 'held'], to: 'approved' },
  run: { from: ['approved'], to: 'running' },
  pause: { from: ['running', 'replaying'], to: 'paused' },
  continue: { from: ['paused'], to: 'running' },
  replay: { from: ['running'], to: 'replaying' },
  compare: { from: ['replaying'], to: 'comparing' },
  finish: { from: ['comparing'], to: 'done' },
  // Failed before running too: an announcement ran out of attempts (nothing was deleted).
  fail: { from: ['announced', 'held', 'approved', 'running', 'replaying', 'comparing', 'rolling_back'], to: 'failed' },
  cancel: { from: ['announced', 'held', 'approved'], to: 'cancelled' },
  stop: { from: ['announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing'], to: 'stopped' },
  'roll back': { from: ['paused', 'done', 'failed', 'stopped'], to: 'rolling_back' },
  restore: { from: ['rolling_back'], to: 'rolled_back' },
} as const satisfies Record<string, { from: readonly BackfillState[]; to: BackfillState }>;

export type BackfillEvent = keyof typeof EVENTS;

export interface Transition {
  backfillId: number;
  event: BackfillEvent;
  actor: string;
  /** Extra column assignments done by the same UPDATE (e.g. ran_at). Keys are fixed in code, never user input. */
  set?: Partial<Record<'ran_at' | 'ran_by' | 'finished_at' | 'failure' | 'paused_reason' | 'paused_for' | 'stopped_by' | 'stop_reason' | 'rolled_back_by' | 'rolled_back_at', string | Date | null>>;
  detail?: Record<string, unknown>;
}

/**
 * Makes `event`'s move, into an active state, if the backfill is in a state it moves from. Returns false when another
 * process already made the move (or the backfill is elsewhere); throws when the move is not allowed from where
 * it is. A move into a finished state is finishBackfill's: it also files what the backfill cost.
 */
export async function transition(tx: Queryable, move: Transition): Promise<boolean> {
  const { to } = EVENTS[move.event];
  if (isFinished(to)) throw new Error(`backfill #${move.backfillId}: ${move.event} moves it to ${to}, which finishes it, and only finishBackfill makes that move (it files the cost)`);
  return moveTo(tx, move);
}

/**
 * The move that finishes a backfill (done, failed, cancelled, stopped, rolled back), and the filing of what it
 * cost, in the caller's transaction: the log row's cost is never missing for a backfill that ended. Returns false
 * as transition does. Steps that commit after it (an after-run message, the diff post) file the cost again
 * (finishStep), so it always counts everything.
 */
export async function finishBackfill(tx: Queryable, move: Transition): Promise<boolean> {
  const { to } = EVENTS[move.event];
  if (!isFinished(to)) throw new Error(`backfill #${move.backfillId}: ${move.event} moves it to ${to}, which is not a state it finishes in; transition makes that move`);
  if (!(await moveTo(tx, move))) return false;
  await upsertBackfillCost(tx, move.backfillId);
  return true;
}

async function moveTo(tx: Queryable, move: Transition): Promise<boolean> {
  const { from, to } = EVENTS[move.event];
  const previous = await updateBackfillState(tx, { backfillId: move.backfillId, to, from: [...from], set: Object.entries(move.set ?? {}) });
  if (!previous) return false;
  await recordEvent(tx, { backfillId: move.backfillId, actor: move.actor, kind: 'state_changed', detail: { from: previous, to, event: move.event, ...move.detail } });
  return true;
}

export function wrongState(backfillId: number, state: BackfillState, wanted: string): BackfillError {
  return new BackfillError(ErrorCode.WrongState, `Backfill #${backfillId} is ${describeState(state)}; ${wanted}.`);
}
