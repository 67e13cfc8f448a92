import { AsyncLocalStorage } from 'node:async_hooks';

// Who is acting, for the length of one command: set by the command layer (src/core/authorization.ts says who
// may), read when an event is recorded (src/db/events.ts), so that every event of an action taken on someone
// else's behalf names both without every core function passing it along.

export interface Acting {
  /** Whoever acts, as the timeline records them: a Slack user id, or cli:<os user>@<host>. */
  actor: string;
  /**
   * The Slack user id the actor is, when the actor is a CLI user BACKFILL_CLI_OPERATORS maps to one
   * (dana=U07DANA): the same person as on Slack, for every rule that compares people.
   */
  person?: string | undefined;
  /** Whether the actor is an operator, as the entry point's policy says (Slack's list and group, or the CLI's). */
  operator: boolean;
  /** The Slack user whose rights are used, when the actor acts for someone else. */
  onBehalfOf?: string | undefined;
  /** Whether the person acted for is an operator, as the entry point can tell (the CLI: its explicit lists only). */
  onBehalfOfOperator?: boolean | undefined;
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

/** Who the actor is as a person: the Slack id a CLI user is mapped to, else the actor as recorded. */
function personOf(acting: Acting): string {
  return acting.person ?? acting.actor;
}

/** Whether the actor uses someone else's rights: --as naming a person other than the actor themselves. */
export function actsForSomeoneElse(acting: Acting): acting is Acting & { onBehalfOf: string } {
  return acting.onBehalfOf !== undefined && acting.onBehalfOf !== acting.actor && acting.onBehalfOf !== acting.person;
}

/** Whose rights an action uses: the person acted for, or the actor as a person. */
export function principalOf(acting: Acting): string {
  return actsForSomeoneElse(acting) ? acting.onBehalfOf : personOf(acting);
}

/** How an event whose actor is `eventActor` is recorded: who did it, as whom, and for whom. */
export interface RecordedActor {
  actor: string;
  /** The Slack id of the person the actor is, when the actor is recorded as a mapped CLI user. */
  actorPerson: string | null;
  onBehalfOf: string | null;
  reason: string | null;
}

/**
 * The acting in force, when the event's actor is the command's principal and someone else really acted: the
 * CLI user acting for another person (--as), or a mapped CLI user, whose events name the CLI user and keep
 * their Slack id beside it (the timeline says the action came from the CLI).
 */
export function recordedActing(eventActor: string): RecordedActor | undefined {
  const acting = current.getStore();
  if (!acting || principalOf(acting) !== eventActor || acting.actor === eventActor) return undefined;
  const forSomeoneElse = actsForSomeoneElse(acting);
  return {
    actor: acting.actor,
    actorPerson: acting.person ?? null,
    onBehalfOf: forSomeoneElse ? acting.onBehalfOf : null,
    reason: forSomeoneElse ? acting.reason?.trim() ?? '' : null,
  };
}

/**
 * Every identity that stands behind an action by `principal`: the principal, and, within a command, the real
 * actor and the person they are. The two-operator rule refuses when any of them asked for the backfill, so an
 * operator cannot approve their own backfill by acting for someone else.
 */
export function peopleActing(principal: string): string[] {
  const acting = current.getStore();
  const people = new Set([principal]);
  if (acting && principalOf(acting) === principal) {
    people.add(acting.actor);
    if (acting.person) people.add(acting.person);
  }
  return [...people];
}
