import { countPauses, recordEvent } from '../../db/events.js';
import type { PoolClient } from '../../db/pool.js';
import { checkClaim, moveSteps } from './stepClaims.js';
import { BLOCKED_BY_PAUSE, type StepRef } from './stepGraph.js';
import { transition } from './stateMachine.js';

const ENGINE = 'backfill-bot';

/**
 * A step found a reason to go no further (a partition outside its envelope, a catalog changed since the
 * announcement): in the caller's transaction, after the claim check, the backfill pauses with `reason`, every
 * step the pause catches running (this one too) is blocked (their writes do not commit, and a continue re-runs
 * them), and the timeline says why, with `detail`. Returns the how-manieth pause of the backfill this is: it
 * names the reconciliation message it sends, once.
 */
export async function pauseCaughtSteps(tx: PoolClient, ref: StepRef, token: string, reason: string, detail: Record<string, unknown>): Promise<number> {
  await checkClaim(tx, ref, token);
  await transition(tx, { backfillId: ref.backfillId, to: 'paused', actor: ENGINE, set: { paused_reason: reason } });
  const blocked = await moveSteps(tx, ref.backfillId, 'blocked', { kinds: BLOCKED_BY_PAUSE, from: ['running'] });
  await recordEvent(tx, { backfillId: ref.backfillId, actor: ENGINE, kind: 'paused', detail: { reason, ...detail, blocked } });
  return (await countPauses(tx, ref.backfillId)) ?? 1;
}
