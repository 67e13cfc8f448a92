import type { CommandEffects } from '../commands/run.js';
import type { EngineContext } from '../core/context.js';
import { decisionNotice } from '../views/replies.js';
import type { SlackMessenger } from './delivery/messenger.js';
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

/** What a command may do on Slack beyond the database: the queue, the incident channel, the status message, uploads. */
export function slackEffects(deps: SlackDeps): CommandEffects {
  const { messenger } = deps;
  return {
    kick: (backfillId) => deps.kick(backfillId),
    dequeue: (backfillId) => deps.dequeue(backfillId),
    tell: (decision) => messenger.postToIncident(decision.backfillId, decisionNotice(decision)),
    changed: (backfillId) => messenger.changed(backfillId),
    answered: (answer) => messenger.markAnswered(answer),
    sharePackage: (backfillId) => messenger.uploadIncidentPackage(backfillId),
  };
}
