import { countPauses, recordEvent } from '../../db/events.js';
import type { PauseCause } from '../../db/backfills.js';
import type { PoolClient } from '../../db/pool.js';
import { checkClaim, moveSteps } from './stepClaims.js';
import { BLOCKED_BY_PAUSE, type StepRef } from './stepGraph.js';
import { transition } from './stateMachine.js';

const ENGINE = 'backfill-bot';

/**
 * A step found a reason to go no further (a partition outside its envelope, a catalog changed since the
 * announcement): in the caller's transaction, after the claim check, the backfill pauses for `cause` with `reason`, every
 * step the pause catches running (this one too) is blocked (their writes do not commit, and a continue re-runs
 * them), and the timeline says why, with `detail`. Returns the how-manieth pause of the backfill this is: it
 * names the reconciliation message it sends, once.
 *
 * The steps caught are the graph's (BLOCKED_BY_PAUSE: the expansion's) and those of the pausing step's own kind:
 * a replay pauses from replaying (catalogGuard.ts), where the running steps are it and its fellow replays.
 */
export async function pauseCaughtSteps(tx: PoolClient, ref: StepRef, token: string, cause: PauseCause, reason: string, detail: Record<string, unknown>): Promise<number> {
  await checkClaim(tx, ref, token);
  await transition(tx, { backfillId: ref.backfillId, event: 'pause', actor: ENGINE, set: { paused_reason: reason, paused_for: cause } });
  const kinds = [...new Set([...BLOCKED_BY_PAUSE, ref.kind])];
  const blocked = await moveSteps(tx, ref.backfillId, 'blocked', { kinds, from: ['running'] });
  await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'paused', detail: { reason, cause, ...detail, blocked } });
  return (await countPauses(tx, ref.backfillId)) ?? 1;
}
