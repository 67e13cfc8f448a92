import { z } from 'zod';
import { findBackfillConsumer } from '../../db/backfillConsumers.js';
import {
  insertEscalations, listDelegatesOf, listReaderPaths, listUndatedEscalations, lockEscalation, markEscalationDecided, markEscalationNotSent,
  markEscalationSent, setEscalationDueTimes, stopAnsweredEscalations, stopEscalationsOf,
  type EscalationDecision, type EscalationKey, type EscalationRow, type EscalationStatus, type EscalationStopReason,
} from '../../db/escalations.js';
import { recordEvent } from '../../db/events.js';
import { withTransaction, type Queryable } from '../../db/pool.js';
import { isBackfillError, ErrorCode } from '../../errors.js';
import type { EngineContext } from '../context.js';
import type { StepContext } from '../lifecycle/runStep.js';
import { intentKey, type EscalationRecipients, type EscalationReach } from '../messenger.js';
import { storedAnnouncement } from '../notices.js';
import { escalationDueAt, escalationPathSchema, parseEscalationStep, type EscalationStep, type EscalationTarget } from './escalationPath.js';

// Escalation: while an owner has not acknowledged, the steps of their consumer's path (escalationPath.ts) tell
// more people, one after another. One row per step (backfill.escalations), each in one of these states:
//
//   waiting ──due, owner still unanswered──▶ sending ──delivered──▶ sent
//      │  └──nobody to tell (no delegates)──▶ skipped      └──Slack refuses all──▶ undeliverable
//      └──acknowledged, overridden, held, or the backfill left its gate──▶ stopped
//   (sending: retries spent ──▶ failed)
//
// - `start` writes the rows with the backfill (freezeEscalationPaths): the path is the catalog's at that moment,
//   and a later change to the catalog changes no running escalation.
// - The dispatcher dates each step once the owner's announcement went out (its step finished, by the database's
//   clock), moves it into its working hours, stops the steps an answer made pointless, and schedules one delayed
//   job per step still to send (src/queue/stepQueue.ts). A job lost with the queue is scheduled again from the rows.
// - The job (sendEscalation) decides in one transaction, with the backfill's row locked against an
//   acknowledgement: still unanswered and due, the row becomes `sending` with whom it tells; answered, every step
//   still waiting is stopped. Only then is anything sent, through the messenger under the step's intent (the Slack
//   messenger's intent rows make each message go out once, even when the job runs twice or its worker dies between
//   the send and the commit that marks it sent). A step found `sending` was decided already: it is delivered (its
//   intent finds what went out before) and marked sent.
// - An answer that commits after a step's decision does not call it back: the decision came first. Every later
//   step is stopped, by the next sweep or by its own job, whichever comes first.

/** The state a step ends in when its job finds nothing to do, or what it did. */
export type EscalationOutcome = 'sent' | 'not_due' | 'stopped' | 'skipped' | 'undeliverable' | 'already_done';

const ENGINE = 'backfill-bot';

/**
 * Inside start's transaction, once its readers are rows: each "before" reader's path as the catalog holds it
 * now, copied step by step. A stored path that no longer parses is a fault in the catalog, not a path to guess.
 */
export async function freezeEscalationPaths(tx: Queryable, backfillId: number): Promise<void> {
  const steps = (await listReaderPaths(tx, backfillId)).flatMap(({ consumer, escalation }) =>
    escalationPathSchema.parse(escalation).map((definition, index) => ({ consumer, step: index + 1, definition })));
  await insertEscalations(tx, backfillId, steps);
}

/**
 * The dispatcher's part, before it schedules the jobs: stops the steps whose owner has answered (recorded on
 * the timeline, one event per consumer), and dates the steps whose announcement has gone out.
 */
export async function prepareEscalations(ctx: EngineContext, backfillId?: number): Promise<void> {
  await withTransaction(ctx.pool, async (tx) => {
    const stopped = await stopAnsweredEscalations(tx, backfillId);
    const byConsumer = new Map<string, { backfillId: number; consumer: string; reason: EscalationStopReason; steps: number[] }>();
    for (const row of stopped) {
      const key = `${row.backfillId}:${row.consumer}`;
      const entry = byConsumer.get(key) ?? { backfillId: row.backfillId, consumer: row.consumer, reason: row.stopReason, steps: [] };
      entry.steps.push(row.step);
      byConsumer.set(key, entry);
    }
    for (const entry of byConsumer.values()) {
      await recordEvent(tx, { backfillId: entry.backfillId, actor: ENGINE, kind: 'escalation_stopped', detail: { consumer: entry.consumer, reason: entry.reason, steps: entry.steps.sort((a, b) => a - b) } });
    }
  });
  const undated = await listUndatedEscalations(ctx.pool, backfillId);
  await setEscalationDueTimes(ctx.pool, undated.map((row) => ({
    backfillId: row.backfillId, consumer: row.consumer, step: row.step, dueAt: escalationDueAt(row.announcedAt, parseEscalationStep(row.definition)),
  })));
}

const recipientsSchema = z.union([
  z.object({ kind: z.literal('delegates'), users: z.array(z.string()) }),
  z.object({ kind: z.literal('channel'), channel: z.string() }),
  z.object({ kind: z.literal('oncall'), user: z.string() }),
  z.object({ kind: z.literal('oncall'), usergroup: z.string() }),
]) satisfies z.ZodType<EscalationRecipients>;

/** Whom the step tells now; undefined when it names nobody (an owner without delegates). */
async function recipientsOf(db: Queryable, step: EscalationStep, owner: string): Promise<EscalationRecipients | undefined> {
  switch (step.to) {
    case 'delegates': {
      const users = await listDelegatesOf(db, owner);
      return users.length > 0 ? { kind: 'delegates', users } : undefined;
    }
    case 'channel':
      return step.channel === undefined ? undefined : { kind: 'channel', channel: step.channel };
    case 'oncall':
      return step.user !== undefined ? { kind: 'oncall', user: step.user } : step.usergroup !== undefined ? { kind: 'oncall', usergroup: step.usergroup } : undefined;
    default: {
      const unknown: never = step.to;
      return unknown;
    }
  }
}

type Decision = { outcome: EscalationOutcome } | { send: EscalationDecision; recipients: EscalationRecipients };

/** The deciding transaction (see the header): what this job does, written before anything is sent. */
async function decide(ctx: EngineContext, key: EscalationKey): Promise<Decision> {
  return withTransaction(ctx.pool, async (tx) => {
    const row = await lockEscalation(tx, key);
    if (!row) return { outcome: 'already_done' };
    if (row.status === 'sending') return { send: row, recipients: recipientsSchema.parse(row.recipients) };
    if (row.status !== 'waiting') return { outcome: 'already_done' };
    if (row.answered) {
      const steps = await stopEscalationsOf(tx, key.backfillId, key.consumer, row.answered);
      await recordEvent(tx, { backfillId: key.backfillId, actor: ENGINE, kind: 'escalation_stopped', detail: { consumer: key.consumer, reason: row.answered, steps } });
      return { outcome: 'stopped' };
    }
    if (row.dueInMs === null || row.dueInMs > 0) return { outcome: 'not_due' };
    const step = parseEscalationStep(row.definition);
    const recipients = await recipientsOf(tx, step, row.owner);
    if (!recipients) {
      const why = `${row.owner} has named no delegates (backfill delegate add ${row.owner} <user>)`;
      await markEscalationNotSent(tx, key, 'skipped', why);
      await recordEvent(tx, { backfillId: key.backfillId, actor: ENGINE, kind: 'escalation_not_sent', detail: { consumer: key.consumer, step: key.step, to: step.to, status: 'skipped', why } });
      return { outcome: 'skipped' };
    }
    await markEscalationDecided(tx, key, recipients);
    return { send: row, recipients };
  });
}

/**
 * Runs one step of an escalation path when its job comes (see the header). A job that comes early (its delay
 * was counted by another clock) sends nothing, and the dispatcher schedules it again.
 */
export async function sendEscalation(ctx: StepContext, key: EscalationKey): Promise<EscalationOutcome> {
  const decision = await decide(ctx, key);
  if ('outcome' in decision) return decision.outcome;
  const { send: row, recipients } = decision;
  // The step's row refers to its reader's (a foreign key): it is there.
  const reader = await findBackfillConsumer(ctx.pool, key.backfillId, key.consumer);
  if (!reader) throw new Error(`backfill #${key.backfillId} has no reader ${key.consumer}`);
  let reach: EscalationReach;
  try {
    reach = await ctx.messenger.escalate({
      backfillId: key.backfillId, consumer: key.consumer, owner: row.owner, notice: storedAnnouncement(reader),
      facts: { pipeline: row.pipeline, since: row.announcedAt, step: key.step, steps: row.steps },
      to: recipients, intent: intentKey(key.backfillId, 'escalate', key.consumer, key.step),
    });
  } catch (error) {
    if (!isBackfillError(error, ErrorCode.Undeliverable)) throw error;
    await notSent(ctx, key, recipients, 'undeliverable', error.message);
    return 'undeliverable';
  }
  await withTransaction(ctx.pool, async (tx) => {
    const unreachable = reach.unreachable.map((u) => `${u.user}: ${u.slackError}`).join(', ');
    if (!(await markEscalationSent(tx, key, reach, unreachable ? `not reached: ${unreachable}` : null))) return;
    await recordEvent(tx, {
      backfillId: key.backfillId, actor: ENGINE, kind: 'escalated',
      detail: { consumer: key.consumer, owner: row.owner, step: key.step, to: recipients.kind, reached: reach.channel ? [reach.channel] : reach.users, unreachable: reach.unreachable },
    });
  });
  return 'sent';
}

/** A step whose job spent its retries: failed, with the last error, so that the status stops naming it as next. */
export async function failEscalation(ctx: EngineContext, key: EscalationKey, error: unknown): Promise<void> {
  await notSent(ctx, key, undefined, 'failed', error instanceof Error ? error.message : String(error));
}

async function notSent(ctx: EngineContext, key: EscalationKey, recipients: EscalationRecipients | undefined, status: 'undeliverable' | 'failed', why: string): Promise<void> {
  await withTransaction(ctx.pool, async (tx) => {
    if (!(await markEscalationNotSent(tx, key, status, why))) return;
    await recordEvent(tx, { backfillId: key.backfillId, actor: ENGINE, kind: 'escalation_not_sent', detail: { consumer: key.consumer, step: key.step, to: recipients?.kind ?? null, status, why } });
  });
}

/** One step as the status and the incident package show it. */
export interface EscalationStepFacts {
  consumer: string;
  step: number;
  /** Its wait after the announcement went out, as the catalog wrote it (30m, 1h). */
  after: string;
  to: EscalationTarget;
  /** The channel, user group or user it names; null for the delegates (read when it is due). */
  names: { channel: string } | { usergroup: string } | { user: string } | null;
  /** Null until the announcement went out. */
  dueAt: Date | null;
  status: EscalationStatus;
  sentAt: Date | null;
  stoppedAt: Date | null;
  stopReason: EscalationStopReason | null;
  /** Whom it reached (the people sent a DM, or the channel), once sent. */
  reached: string[];
  note: string | null;
}

const reachSchema = z.object({ users: z.array(z.string()), channel: z.string().optional() });

export function escalationFacts(rows: readonly EscalationRow[]): EscalationStepFacts[] {
  return rows.map((row) => {
    const step = parseEscalationStep(row.definition);
    const reach = reachSchema.safeParse(row.reached);
    return {
      consumer: row.consumer, step: row.step, after: step.after, to: step.to,
      names: step.channel !== undefined ? { channel: step.channel } : step.usergroup !== undefined ? { usergroup: step.usergroup } : step.user !== undefined ? { user: step.user } : null,
      dueAt: row.dueAt, status: row.status, sentAt: row.sentAt, stoppedAt: row.stoppedAt, stopReason: row.stopReason,
      reached: reach.success ? (reach.data.channel ? [reach.data.channel] : reach.data.users) : [],
      note: row.note,
    };
  });
}
