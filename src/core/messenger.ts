import type { Notice } from './notices.js';
import { isSlackUserId } from '../slackUser.js';
import { slackText } from '../markup.js';

/**
 * Where messages go. The Slack bot sends DMs with buttons and posts in the incident channel; the CLI prints.
 * The core decides what is said and when; a messenger only delivers.
 *
 * Every message that a step sends carries an `intent`: a key naming the backfill, the step and what is said
 * (`bf12:announce:settlement_report`). A messenger that talks to a remote service must deliver each intent at
 * most once even when the step is retried after a crash between the service's answer and the step's commit:
 * the Slack messenger records the intent as a row first and, before re-sending, looks for a message carrying
 * it in the conversation's history (or the thread's), every page of it.
 *
 * A delivery that can never succeed (Slack answers `user_not_found`, `account_inactive`, …) throws a
 * BackfillError with code `undeliverable` and `details.slackError`; the step records it as a fact instead of
 * retrying for ever.
 */
export interface OwnerMessage {
  backfillId: number;
  consumer: string;
  owner: string;
  /** What they are told, as facts; the messenger words it for where it goes (src/views/notices.ts). */
  notice: Notice;
  /** Names this delivery: the same intent is never delivered twice. */
  intent: string;
}

export interface Landed {
  channel: string;
  ts: string;
}

/**
 * How a step's delivery waits when the service rate-limits it (Slack's 429 with Retry-After: nothing was
 * posted, and Slack says when to come back). A rate limit is a schedule, not a failure: the delivery waits
 * as long as it is told, as many times as it is told, and never gives up over it.
 */
export interface DeliveryOptions {
  /**
   * Waits `retryAfterSeconds` (and says so where people look), then resolves to let the delivery try again,
   * or throws when it must not (the step is no longer this worker's: stopped, taken over). Without it the
   * messenger simply sleeps.
   */
  waitOutRateLimit?: (retryAfterSeconds: number) => Promise<void>;
  /**
   * Asked right before every send attempt (the first, and each after a wait): resolves when the sender may still
   * send, or throws (ClaimLost) when it must not, and then nothing is sent. A step's delivery confirms in the
   * database that the step is still this worker's: a worker frozen past its lease and taken over sends nothing.
   */
  confirmSending?: () => Promise<void>;
}

/** Whom one step of an owner's escalation path tells (src/core/announce/escalation.ts decides, a messenger delivers). */
export type EscalationRecipients =
  | { kind: 'delegates'; users: string[] }
  | { kind: 'channel'; channel: string }
  | { kind: 'oncall'; user: string }
  | { kind: 'oncall'; usergroup: string };

export interface EscalationMessage {
  backfillId: number;
  consumer: string;
  owner: string;
  /** The owner's announcement: a delegate gets it again, with its buttons, to answer in the owner's place. */
  notice: Notice;
  /** What is said about the wait; the messenger words it for where it goes (src/views/waiting.ts). */
  facts: { pipeline: string; since: Date | null; step: number; steps: number };
  to: EscalationRecipients;
  /** Names this step's delivery: a channel's post is `<intent>`, each person's DM `<intent>:<user>`, each once. */
  intent: string;
}

/** Whom a step reached: the people sent a DM (a user group's members as Slack listed them), or the channel; and whom Slack refused. */
export interface EscalationReach {
  users: string[];
  channel?: string;
  unreachable: { user: string; slackError: string }[];
}

export interface Messenger {
  /** The announcement to an owner who must acknowledge; returns where it landed, so it can be updated. */
  announce(message: OwnerMessage, options?: DeliveryOptions): Promise<Landed | undefined>;
  /** An owner whose rule is "after": told once the run is done. */
  notifyOwner(message: OwnerMessage, options?: DeliveryOptions): Promise<void>;
  /** The diff of a finished backfill, to wherever it was asked for. */
  reportDiff(backfillId: number, intent: string, options?: DeliveryOptions): Promise<void>;
  /** The reconciliation by key (staged, published), to the incident thread: when paused, and at the end. */
  reportReconciliation(backfillId: number, intent: string, options?: DeliveryOptions): Promise<void>;
  /** An owner has not acknowledged after the configured delay: say it again, and say so where it was asked. */
  remind(message: OwnerMessage): Promise<void>;
  /**
   * An owner has not acknowledged within a step of their consumer's escalation path: tell the step's people.
   * Throws `undeliverable` when it can reach none of them (a channel Slack refuses, a user group with no member).
   */
  escalate(message: EscalationMessage): Promise<EscalationReach>;
  /** A plain message to one person (a stale reader told the numbers are now real). */
  directMessage(user: string, notice: Notice, intent: string): Promise<void>;
  /** A plain message in the backfill's incident channel (an announcement that cannot be delivered, say). */
  incidentNotice(backfillId: number, notice: Notice, intent: string): Promise<void>;
  /** Something about the backfill changed: refresh whatever shows its status. Must not throw. */
  changed(backfillId: number): Promise<void>;
}

/** The intent key of a step's message: `bf<backfill>:<kind>:<key>[:<extra>]`. */
export function intentKey(backfillId: number, kind: string, key: string, extra?: string | number): string {
  return `bf${backfillId}:${kind}:${key}${extra === undefined ? '' : `:${extra}`}`;
}

/**
 * A person in a sentence the core writes (a refusal's message): a Slack mention, which Slack shows with
 * their name and a terminal turns into it (src/views/text.ts fromSlackMarkup); anything that is not a Slack user
 * (the CLI's cli:<user>@<host>) as text, escaped (src/markup.ts), never as broken or foreign mention markup.
 */
export function mention(actor: string): string {
  return isSlackUserId(actor) ? `<@${actor}>` : slackText(actor);
}
