import type { EngineContext } from '../core/context.js';
import type { SlackMessenger } from './messenger.js';
import type { OperatorPolicy } from './permissions.js';

/** What the Slack listeners call into: the engine, the messenger, who may do what, and the dispatcher. */
export interface SlackDeps {
  ctx: EngineContext;
  messenger: SlackMessenger;
  policy: OperatorPolicy;
  /** Enqueue whatever became runnable (after a person's action opened a gate, say). */
  kick(backfillId: number): Promise<void>;
  /** Remove a stopped backfill's not-yet-started jobs from the queue. */
  dequeue(backfillId: number): Promise<number>;
}
