import { updateBackfillState } from '../../db/backfills.js';
import type { Queryable } from '../../db/pool.js';
import { recordEvent } from '../../db/events.js';
import { fileBackfillCost } from '../file/costs.js';
import { BackfillError, ErrorCode } from '../../errors.js';

/*
 * The life of a backfill.
 *
 *   announced ──ack/override──▶ approved ──dispatcher──▶ running ──stage, publish, watermark──▶ replaying
 *      ▲  │                                               │  ▲                                   │    │
 *      │  └─hold──▶ held                            pause │  │ continue                    pause │    │ replays done
 *      └──release──┘                                      ▼  │                                   │    ▼
 *                                                        paused ◀────────────────────────────────┘  comparing ──▶ done
 *
 * announced: the log row exists with total_before and announced_at; announcements generated; nothing deleted.
 * held: an owner asked to wait. Nothing is enqueued while held; the holder's acknowledgement releases it.
 * approved: every "before" owner acknowledged (or an operator overrode, with a reason); steps exist as rows.
 * running: partitions are staged, then published canary first and wave by wave; the watermark moved back.
 * replaying: consumers re-triggered in dependency order.
 * comparing: signed figures compared with what the rebuilt reports show; the log row is completed.
 * failed: a step ran out of attempts; the failure names it. cancelled: stopped before it ran.
 * paused: a canary or wave showed a difference the plan did not predict (or duplicate keys): the expansion
 *   stopped with both generations kept; an operator continues (accepting it) or rolls back. Also, from
 *   running or replaying, a catalog changed behind the bot's back since the announcement (a stage, publish or
 *   replay found it: src/core/engine/catalogGuard.ts): continued once it is put back. A continue moves to
 *   running, and a backfill whose partitions are all published moves straight on to replaying (the phase exit),
 *   so a replay's pause resumes where it was without a move of its own.
 * stopped: an operator fenced it: queued jobs removed, no write of it commits any more (each step's commit
 *   reads this state under the row lock the stop took).
 * rolling_back → rolled_back: the preserved rows were restored in one transaction; consumers replay again.
 *
 * Each move is one UPDATE … WHERE state = ANY(expected), so two processes cannot make the same move twice,
 * and writes its timeline row in the same transaction.
 */
export const BackfillState = {
  Announced: 'announced',
  Held: 'held',
  Approved: 'approved',
  Running: 'running',
  Paused: 'paused',
  Replaying: 'replaying',
  Comparing: 'comparing',
  Done: 'done',
  Failed: 'failed',
  Cancelled: 'cancelled',
  Stopped: 'stopped',
  RollingBack: 'rolling_back',
  RolledBack: 'rolled_back',
} as const;
export type BackfillState = (typeof BackfillState)[keyof typeof BackfillState];

export const ACTIVE_STATES: readonly BackfillState[] = ['announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing', 'rolling_back'];

const ALLOWED: Record<BackfillState, readonly BackfillState[]> = {
  // failed before running: an announcement ran out of attempts (nothing was deleted).
  announced: ['held', 'approved', 'cancelled', 'stopped', 'failed'],
  held: ['announced', 'approved', 'cancelled', 'stopped', 'failed'],
  approved: ['running', 'cancelled', 'stopped', 'failed'],
  running: ['replaying', 'paused', 'failed', 'stopped'],
  paused: ['running', 'stopped', 'rolling_back'],
  replaying: ['comparing', 'paused', 'failed', 'stopped'],
  comparing: ['done', 'failed', 'stopped'],
  done: ['rolling_back'],
  failed: ['rolling_back'],
  cancelled: [],
  stopped: ['rolling_back'],
  rolling_back: ['rolled_back', 'failed'],
  rolled_back: [],
};

export function canMove(from: BackfillState, to: BackfillState): boolean {
  return ALLOWED[from].includes(to);
}

export function describeState(state: BackfillState): string {
  switch (state) {
    case 'announced': return 'announced, waiting for acknowledgements';
    case 'held': return 'held by an owner';
    case 'approved': return 'approved, about to run';
    case 'running': return 'recomputing partitions';
    case 'replaying': return 're-triggering consumers';
    case 'comparing': return 'comparing totals';
    case 'done': return 'done';
    case 'failed': return 'failed';
    case 'cancelled': return 'cancelled';
    case 'paused': return 'paused: the expansion stopped, waiting for an operator';
    case 'stopped': return 'stopped (fenced)';
    case 'rolling_back': return 'rolling back';
    case 'rolled_back': return 'rolled back';
    default: {
      const unreachable: never = state;
      return unreachable;
    }
  }
}

export interface Transition {
  backfillId: number;
  to: BackfillState;
  actor: string;
  /** Extra column assignments done by the same UPDATE (e.g. ran_at). Keys are fixed in code, never user input. */
  set?: Partial<Record<'ran_at' | 'ran_by' | 'finished_at' | 'failure' | 'paused_reason' | 'paused_for' | 'stopped_by' | 'stop_reason' | 'rolled_back_by' | 'rolled_back_at', string | Date | null>>;
  detail?: Record<string, unknown>;
}

/**
 * Moves a backfill to `to` if it is in a state that may move there. Returns false when another process
 * already made the move (or the backfill is elsewhere); throws when the move is not allowed from where it is.
 */
export async function transition(tx: Queryable, move: Transition): Promise<boolean> {
  const from = (Object.keys(ALLOWED) as BackfillState[]).filter((state) => canMove(state, move.to));
  const previous = await updateBackfillState(tx, { backfillId: move.backfillId, to: move.to, from, set: Object.entries(move.set ?? {}) });
  if (!previous) return false;
  await recordEvent(tx, { backfillId: move.backfillId, actor: move.actor, kind: 'state_changed', detail: { from: previous, to: move.to, ...move.detail } });
  // A finished backfill's cost is filed by the move that finishes it, in its transaction (src/core/file/costs.ts).
  if (!ACTIVE_STATES.includes(move.to)) await fileBackfillCost(tx, move.backfillId);
  return true;
}

export function wrongState(backfillId: number, state: BackfillState, wanted: string): BackfillError {
  return new BackfillError(ErrorCode.WrongState, `Backfill #${backfillId} is ${describeState(state)}; ${wanted}.`);
}
