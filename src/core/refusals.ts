import { recordEvent } from '../db/events.js';
import { explainCancellation } from '../db/pool.js';
import { ErrorCode, isBackfillError } from '../errors.js';
import type { EngineContext } from './context.js';

/**
 * Runs a person's request; when it is refused (a BackfillError), the refusal goes into the timeline on its
 * own connection, since the request's own transaction has rolled back, and the error goes on to the caller.
 */
export async function recordingRefusals<T>(ctx: EngineContext, request: { actor: string; action: string; backfillId?: number | undefined; input?: Record<string, unknown> },
  work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (raw) {
    // A statement PostgreSQL cancelled (timeout, or a stopping process) is a refusal with a sentence too.
    const error = explainCancellation(raw, ctx.pool);
    if (isBackfillError(error)) {
      const knownBackfill = request.backfillId !== undefined && error.code !== ErrorCode.UnknownBackfill;
      await recordEvent(ctx.pool, {
        backfillId: knownBackfill ? request.backfillId : null,
        actor: request.actor,
        kind: 'refused',
        detail: { action: request.action, code: error.code, message: error.message, ...request.input },
      }).catch(() => undefined);
    }
    throw error;
  }
}
