import { AsyncLocalStorage } from 'node:async_hooks';

// Who is acting, for the length of one command: set by the command layer (src/core/authorization.ts says who
// may), read when an event is recorded (src/db/events.ts), so that every event of an action taken on someone
// else's behalf names both without every core function passing it along.

export interface Acting {
  /** Whoever acts, as the timeline records them: a Slack user id, or cli:<os user>@<host>. */
  actor: string;
  /** Whether the actor is an operator, as the entry point's policy says (Slack's list and group, or the CLI's). */
  operator: boolean;
  /** The Slack user whose rights are used, when the actor acts for someone else. */
  onBehalfOf?: string | undefined;
  /** Why; required with onBehalfOf. */
  reason?: string | undefined;
}

const current = new AsyncLocalStorage<Acting>();

/**
 * Runs `work` as `acting`: every event it records for the person acted for is recorded as done by the actor on
 * their behalf (src/db/events.ts reads this). The core functions keep taking the principal as their `actor`, so
 * the gate, the signatures and the two-operator rule count the person whose rights were used.
 */
export function runActing<T>(acting: Acting, work: () => Promise<T>): Promise<T> {
  return current.run(acting, work);
}

/** The acting in force, when the event's actor is the person acted for on someone else's behalf. */
export function onBehalfFor(eventActor: string): { actor: string; onBehalfOf: string; reason: string } | undefined {
  const acting = current.getStore();
  if (!acting?.onBehalfOf || acting.onBehalfOf === acting.actor || acting.onBehalfOf !== eventActor) return undefined;
  return { actor: acting.actor, onBehalfOf: acting.onBehalfOf, reason: acting.reason?.trim() ?? '' };
}
