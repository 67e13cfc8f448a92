import { BackfillState } from '../core/states.js';
import { redact } from '../redaction.js';
import { lockBackfillForShare } from './backfills.js';
import type { Queryable } from './pool.js';
import { prepared } from './prepared.js';

// The escalation steps of each backfill (backfill.escalations, migrations/0025): copied from the catalog when it
// was started, dated once the owner's announcement went out, decided and sent one by one. What a step means and
// when it may go out is src/core/announce/escalation.ts's; here are its rows.

/** A step's state: waiting → sending → sent, or stopped, skipped, undeliverable, failed (each final). */
export type EscalationStatus = 'waiting' | 'sending' | 'sent' | 'stopped' | 'skipped' | 'undeliverable' | 'failed';

/** Why a step still waiting will never go out. */
export type EscalationStopReason = 'acknowledged' | 'overridden' | 'held' | 'left_gate';

export interface EscalationKey {
  backfillId: number;
  consumer: string;
  step: number;
}

export interface EscalationRow extends EscalationKey {
  /** The step as the catalog held it when the backfill was started (src/core/announce/escalationPath.ts). */
  definition: unknown;
  dueAt: Date | null;
  status: EscalationStatus;
  recipients: unknown;
  reached: unknown;
  sentAt: Date | null;
  stoppedAt: Date | null;
  stopReason: EscalationStopReason | null;
  note: string | null;
}

/** The gate states: a step waits only while its backfill is in one of them. */
const GATE_STATES: readonly string[] = [BackfillState.Announced, BackfillState.Held];

/**
 * Why the step `e` (of backfill `b`) must not go out, or NULL while its owner is still unanswered: the consumer
 * was acknowledged or overridden, its owner held the backfill (a hold is an answer: the holder is who it waits
 * for), or the backfill left its gate otherwise (cancelled, say). The most telling reason first.
 */
const STOP_REASON = `CASE
    WHEN EXISTS (SELECT 1 FROM backfill.acknowledgements a WHERE a.backfill_id = e.backfill_id AND a.consumer = e.consumer) THEN 'acknowledged'
    WHEN EXISTS (SELECT 1 FROM backfill.gate_overrides o WHERE o.backfill_id = e.backfill_id AND o.consumer = e.consumer) THEN 'overridden'
    WHEN b.state = 'held' AND EXISTS (SELECT 1 FROM backfill.events h
                                      WHERE h.backfill_id = e.backfill_id AND h.kind = 'held' AND h.detail->'consumers' ? e.consumer) THEN 'held'
    WHEN NOT (b.state = ANY ($GATE::text[])) THEN 'left_gate'
  END`;

const stopReasonWith = (gateParam: number) => STOP_REASON.replace('$GATE', `$${gateParam}`);

/** The "before" readers of a backfill and the escalation path the catalog gives each, in name order. */
export async function listReaderPaths(db: Queryable, backfillId: number): Promise<{ consumer: string; escalation: unknown }[]> {
  const { rows } = await db.query<{ consumer: string; escalation: unknown }>(
    `SELECT bc.consumer, c.escalation FROM backfill.backfill_consumers bc JOIN backfill.consumers c ON c.name = bc.consumer
     WHERE bc.backfill_id = $1::bigint AND bc.notify_rule = 'before' ORDER BY bc.consumer COLLATE "C"`, [backfillId]);
  return rows;
}

/** The backfill's copy of its readers' paths: one waiting row per step, undated. */
export async function insertEscalations(tx: Queryable, backfillId: number, steps: readonly { consumer: string; step: number; definition: unknown }[]): Promise<void> {
  if (steps.length === 0) return;
  await tx.query(
    `INSERT INTO backfill.escalations (backfill_id, consumer, step, definition)
     SELECT $1::bigint, s.consumer, s.step, s.definition FROM unnest($2::text[], $3::int[], $4::jsonb[]) AS s(consumer, step, definition)`,
    [backfillId, steps.map((s) => s.consumer), steps.map((s) => s.step), steps.map((s) => JSON.stringify(s.definition))]);
}

export async function listEscalations(db: Queryable, backfillId: number): Promise<EscalationRow[]> {
  const { rows } = await db.query<EscalationRow>(
    `SELECT backfill_id::int AS "backfillId", consumer, step, definition, due_at AS "dueAt", status, recipients, reached,
            sent_at AS "sentAt", stopped_at AS "stoppedAt", stop_reason AS "stopReason", note
     FROM backfill.escalations WHERE backfill_id = $1::bigint ORDER BY consumer COLLATE "C", step`, [backfillId]);
  return rows;
}

/**
 * Steps not dated yet whose owner's announcement has gone out (its step done, or settled undeliverable: an
 * owner Slack cannot reach is escalated all the same), with the instant it did by the database's clock.
 */
export async function listUndatedEscalations(db: Queryable, backfillId?: number): Promise<(EscalationKey & { definition: unknown; announcedAt: Date })[]> {
  const { rows } = await db.query<EscalationKey & { definition: unknown; announcedAt: Date }>(
    `SELECT e.backfill_id::int AS "backfillId", e.consumer, e.step, e.definition, s.finished_at AS "announcedAt"
     FROM backfill.escalations e
     JOIN backfill.backfill_steps s ON s.backfill_id = e.backfill_id AND s.kind = 'announce' AND s.step_key = e.consumer
     WHERE e.due_at IS NULL AND e.status = 'waiting' AND s.status IN ('done', 'undeliverable') AND s.finished_at IS NOT NULL
       AND ($1::bigint IS NULL OR e.backfill_id = $1::bigint)
     ORDER BY e.backfill_id, e.consumer, e.step`, [backfillId ?? null]);
  return rows;
}

/** Dates steps; a step dated already keeps its time (every worker computes the same one from the same rows). */
export async function setEscalationDueTimes(db: Queryable, dated: readonly (EscalationKey & { dueAt: Date })[]): Promise<void> {
  if (dated.length === 0) return;
  await db.query(
    `UPDATE backfill.escalations e SET due_at = d.due_at
     FROM unnest($1::bigint[], $2::text[], $3::int[], $4::timestamptz[]) AS d(backfill_id, consumer, step, due_at)
     WHERE e.backfill_id = d.backfill_id AND e.consumer = d.consumer AND e.step = d.step AND e.due_at IS NULL`,
    [dated.map((d) => d.backfillId), dated.map((d) => d.consumer), dated.map((d) => d.step), dated.map((d) => d.dueAt)]);
}

/**
 * Stops every step still waiting whose owner is answered (or whose backfill left its gate), in one statement;
 * returns them. A step already deciding or sent is not touched: it was decided before the answer came.
 */
export async function stopAnsweredEscalations(db: Queryable, backfillId?: number): Promise<(EscalationKey & { stopReason: EscalationStopReason })[]> {
  const { rows } = await db.query<EscalationKey & { stopReason: EscalationStopReason }>(
    `WITH answered AS (
       SELECT e.backfill_id, e.consumer, e.step, ${stopReasonWith(2)} AS reason
       FROM backfill.escalations e JOIN backfill.backfills b ON b.id = e.backfill_id
       WHERE e.status = 'waiting' AND ($1::bigint IS NULL OR e.backfill_id = $1::bigint))
     UPDATE backfill.escalations e SET status = 'stopped', stopped_at = now(), stop_reason = answered.reason
     FROM answered
     WHERE answered.reason IS NOT NULL AND e.backfill_id = answered.backfill_id AND e.consumer = answered.consumer AND e.step = answered.step
       AND e.status = 'waiting'
     RETURNING e.backfill_id::int AS "backfillId", e.consumer, e.step, e.stop_reason AS "stopReason"`,
    [backfillId ?? null, GATE_STATES]);
  return rows;
}

/**
 * The condition on an escalation step (its row as `alias`) of being still to send: waiting, or decided and not yet
 * sent. The partial index (escalations_outstanding, migrations/0025) holds exactly these rows, and the planner
 * uses it only where a query states this condition.
 */
const outstandingEscalation = (alias: string): string => `${alias}.status IN ('waiting', 'sending')`;

/** Whether any step of an escalation (of the backfill, or of any) is still to send or to date (the partial index). */
export async function hasOutstandingEscalations(db: Queryable, backfillId?: number): Promise<boolean> {
  const { rows } = await db.query<{ outstanding: boolean }>(
    prepared(`SELECT EXISTS (SELECT 1 FROM backfill.escalations e
                    WHERE ${outstandingEscalation('e')} AND ($1::bigint IS NULL OR e.backfill_id = $1::bigint)) AS outstanding`), [backfillId ?? null]);
  return rows[0]?.outstanding ?? false;
}

/** What a dispatch of one backfill reads first: its state, and whether an escalation of it is still to send (hasOutstandingEscalations). */
export interface DispatchState {
  state: BackfillState;
  escalationsOutstanding: boolean;
}

/** The backfill's DispatchState, in one round trip (PERF: a dispatch follows every step). Undefined for no such backfill. */
export async function findDispatchState(db: Queryable, id: number): Promise<DispatchState | undefined> {
  const { rows } = await db.query<DispatchState>(prepared(
    `SELECT b.state, EXISTS (SELECT 1 FROM backfill.escalations e WHERE ${outstandingEscalation('e')} AND e.backfill_id = b.id) AS "escalationsOutstanding"
     FROM backfill.backfills b WHERE b.id = $1::bigint`), [id]);
  return rows[0];
}

/**
 * The steps still to send (waiting, or decided and not yet sent), dated, with how long until each is due by the
 * database's clock (0: due now): a worker whose clock runs ahead must not do this sum.
 */
export async function listOutstandingEscalations(db: Queryable, backfillId?: number): Promise<(EscalationKey & { dueInMs: number })[]> {
  const { rows } = await db.query<EscalationKey & { dueInMs: number }>(
    `SELECT backfill_id::int AS "backfillId", consumer, step,
            greatest(0, ceil(extract(epoch FROM due_at - now()) * 1000))::float8 AS "dueInMs"
     FROM backfill.escalations e
     WHERE ${outstandingEscalation('e')} AND due_at IS NOT NULL AND ($1::bigint IS NULL OR backfill_id = $1::bigint)
     ORDER BY backfill_id, consumer, step`, [backfillId ?? null]);
  return rows;
}

export interface EscalationDecision extends EscalationRow {
  owner: string;
  pipeline: string;
  /** Why it must not go out now (see STOP_REASON); null while the owner is unanswered. */
  answered: EscalationStopReason | null;
  /** 0 when due by the database's clock; null while undated. */
  dueInMs: number | null;
  /** When the owner's announcement went out. */
  announcedAt: Date | null;
  /** How many steps the consumer's path has. */
  steps: number;
}

/**
 * Inside the deciding transaction: the step's row locked, with what decides it. The backfill's row is locked
 * FOR SHARE first: an acknowledgement, an override, a hold and every move of the backfill lock it for update,
 * so none of them can commit between this read and the decision this transaction writes.
 */
export async function lockEscalation(tx: Queryable, key: EscalationKey): Promise<EscalationDecision | undefined> {
  await lockBackfillForShare(tx, key.backfillId);
  const { rows } = await tx.query<EscalationDecision>(
    `SELECT e.backfill_id::int AS "backfillId", e.consumer, e.step, e.definition, e.due_at AS "dueAt", e.status, e.recipients, e.reached,
            e.sent_at AS "sentAt", e.stopped_at AS "stoppedAt", e.stop_reason AS "stopReason", e.note,
            bc.owner, b.pipeline, ${stopReasonWith(4)} AS answered,
            CASE WHEN e.due_at IS NULL THEN NULL ELSE greatest(0, ceil(extract(epoch FROM e.due_at - now()) * 1000))::float8 END AS "dueInMs",
            (SELECT s.finished_at FROM backfill.backfill_steps s WHERE s.backfill_id = e.backfill_id AND s.kind = 'announce' AND s.step_key = e.consumer) AS "announcedAt",
            (SELECT count(*)::int FROM backfill.escalations p WHERE p.backfill_id = e.backfill_id AND p.consumer = e.consumer) AS steps
     FROM backfill.escalations e
     JOIN backfill.backfills b ON b.id = e.backfill_id
     JOIN backfill.backfill_consumers bc ON bc.backfill_id = e.backfill_id AND bc.consumer = e.consumer
     WHERE e.backfill_id = $1::bigint AND e.consumer = $2::text AND e.step = $3::int
     FOR UPDATE OF e`,
    [key.backfillId, key.consumer, key.step, GATE_STATES]);
  return rows[0];
}

/** The delegates the owner names now (backfill.delegates), in order. */
export async function listDelegatesOf(db: Queryable, owner: string): Promise<string[]> {
  const { rows } = await db.query<{ delegate: string }>('SELECT delegate FROM backfill.delegates WHERE owner = $1::text ORDER BY delegate', [owner]);
  return rows.map((row) => row.delegate);
}

/** The consumer's steps still waiting, stopped for `reason`; returns their numbers. */
export async function stopEscalationsOf(tx: Queryable, backfillId: number, consumer: string, reason: EscalationStopReason): Promise<number[]> {
  const { rows } = await tx.query<{ step: number }>(
    `UPDATE backfill.escalations SET status = 'stopped', stopped_at = now(), stop_reason = $3::text
     WHERE backfill_id = $1::bigint AND consumer = $2::text AND status = 'waiting' RETURNING step`, [backfillId, consumer, reason]);
  return rows.map((row) => row.step).sort((a, b) => a - b);
}

/** waiting → sending: the decision to tell `recipients`, written before anything is sent. */
export async function markEscalationDecided(tx: Queryable, key: EscalationKey, recipients: unknown): Promise<void> {
  await tx.query(
    `UPDATE backfill.escalations SET status = 'sending', recipients = $4::jsonb, decided_at = now()
     WHERE backfill_id = $1::bigint AND consumer = $2::text AND step = $3::int AND status = 'waiting'`,
    [key.backfillId, key.consumer, key.step, JSON.stringify(recipients)]);
}

/** sending → sent, with whom the messenger reached. True when this call marked it. */
export async function markEscalationSent(tx: Queryable, key: EscalationKey, reached: unknown, note: string | null): Promise<boolean> {
  const { rowCount } = await tx.query(
    `UPDATE backfill.escalations SET status = 'sent', reached = $4::jsonb, sent_at = now(), note = $5::text
     WHERE backfill_id = $1::bigint AND consumer = $2::text AND step = $3::int AND status = 'sending'`,
    [key.backfillId, key.consumer, key.step, JSON.stringify(reached), note === null ? null : redact(note)]);
  return rowCount === 1;
}

/** A step that reaches nobody: skipped (nobody to tell), undeliverable (Slack refused), failed (retries spent). True when this call marked it. */
export async function markEscalationNotSent(tx: Queryable, key: EscalationKey, status: 'skipped' | 'undeliverable' | 'failed', note: string): Promise<boolean> {
  const { rowCount } = await tx.query(
    `UPDATE backfill.escalations SET status = $4::text, note = $5::text
     WHERE backfill_id = $1::bigint AND consumer = $2::text AND step = $3::int AND status IN ('waiting', 'sending')`,
    [key.backfillId, key.consumer, key.step, status, redact(note)]);
  return rowCount === 1;
}

export interface AcknowledgementWait {
  /** The consumer's kind (report, export, model). */
  kind: string;
  /** The last step sent before the acknowledgement (delegates, channel, oncall), or none. */
  escalatedTo: string;
  seconds: number;
}

/**
 * Every acknowledgement with how long it came after its announcement went out (from the backfill's announcement
 * while the announce step has no time), and how far the escalation had gone by then.
 */
export async function listAcknowledgementWaits(db: Queryable): Promise<AcknowledgementWait[]> {
  const { rows } = await db.query<AcknowledgementWait>(
    `SELECT bc_kind.kind,
            coalesce((SELECT e.definition->>'to' FROM backfill.escalations e
                      WHERE e.backfill_id = a.backfill_id AND e.consumer = a.consumer AND e.status = 'sent' AND e.sent_at <= a.acked_at
                      ORDER BY e.step DESC LIMIT 1), 'none') AS "escalatedTo",
            greatest(0, extract(epoch FROM a.acked_at - coalesce(s.finished_at, b.announced_at)))::float8 AS seconds
     FROM backfill.acknowledgements a
     JOIN backfill.backfills b ON b.id = a.backfill_id
     JOIN backfill.consumers bc_kind ON bc_kind.name = a.consumer
     LEFT JOIN backfill.backfill_steps s ON s.backfill_id = a.backfill_id AND s.kind = 'announce' AND s.step_key = a.consumer`);
  return rows;
}
