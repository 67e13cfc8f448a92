// What must hold: cheap checks after every command and every job, and the full ones once the run has settled.
// A broken promise throws an InvariantViolation whose message says which promise and with what evidence.

import { answerPaidAgainst } from '../../src/core/finance/paidAgainst.js';
import { readReportFigure } from '../../src/db/pipelineSql.js';
import { ACTIVE_STATES, type BackfillState } from '../../src/core/states.js';
import { BackfillError, describeError } from '../../src/errors.js';
import { TRANSIENT_FAULT } from '../support/modelMessenger.js';
import { DAY, dayRows, preservedRows, type ModelSystem, type RowMap } from '../support/modelSystem.js';
import { sourceChangedInsideWindow, type Model } from './model.js';
import { storedRows } from '../support/storedRows.js';

export class InvariantViolation extends Error {
  constructor(message: string) {
    super(`INVARIANT: ${message}`);
    this.name = 'InvariantViolation';
  }
}

const TERMINAL_STATES: readonly BackfillState[] = ['done', 'cancelled', 'stopped', 'rolled_back', 'failed'];

/** What a pg error looks like once a processor flattened it into a message. */
const RAW_DATABASE_MESSAGE = /violates|duplicate key|deadlock detected|syntax error|does not exist|null value in column|invalid input syntax|could not serialize|current transaction is aborted/i;

/** A person's command may be refused, but only with a BackfillError that says why. */
export function requireExplainedRefusal(label: string, error: unknown): BackfillError {
  if (!(error instanceof BackfillError)) {
    throw new InvariantViolation(`${label} failed with a raw ${error instanceof Error ? error.constructor.name : typeof error}, not a BackfillError: ${describeError(error)}`);
  }
  if (!error.message.trim() || RAW_DATABASE_MESSAGE.test(error.message)) {
    throw new InvariantViolation(`${label} was refused with a message that explains nothing: "${error.message}"`);
  }
  return error;
}

export function isRawDatabaseMessage(message: string): boolean {
  return RAW_DATABASE_MESSAGE.test(message);
}

/**
 * What a refusal must leave as it was: states, steps, targets, acknowledgements, overrides and the day's live
 * rows, one line each. (The timeline is left out: a refusal is recorded there.)
 */
export async function fingerprint(system: ModelSystem): Promise<readonly string[]> {
  const { rows } = await system.ctx.pool.query<{ x: string }>(
    `SELECT x FROM (
       SELECT concat_ws(',', 'b', id, state, paused_reason) FROM backfill.backfills
       UNION ALL SELECT concat_ws(',', 's', backfill_id, kind, step_key, status) FROM backfill.backfill_steps
       UNION ALL SELECT concat_ws(',', 't', backfill_id, partition_hour, status, accepted_by) FROM backfill.backfill_targets
       UNION ALL SELECT concat_ws(',', 'a', backfill_id, consumer) FROM backfill.acknowledgements
       UNION ALL SELECT concat_ws(',', 'o', backfill_id, consumer) FROM backfill.gate_overrides
       UNION ALL SELECT concat_ws(',', 'r', order_id, md5(t::text))
         FROM warehouse.orders t WHERE partition_hour >= $1::timestamptz AND partition_hour < $1::timestamptz + interval '1 day'
     ) q(x) ORDER BY x COLLATE "C"`, [`${DAY}T00:00:00Z`]);
  return rows.map((row) => row.x);
}

/**
 * Whether two fingerprints agree, leaving out the live rows another writer (a late row landing between a
 * rollback's statements) wrote between them: those rows are that writer's, not the refused action's.
 */
export function sameFingerprint(before: readonly string[], after: readonly string[], otherWriters: readonly string[] = []): boolean {
  const theirs = new Set(otherWriters.map((orderId) => `r,${orderId},`));
  const ours = (lines: readonly string[]) => lines.filter((line) => !theirs.has(line.slice(0, line.indexOf(',', 2) + 1)));
  const [left, right] = [ours(before), ours(after)];
  return left.length === right.length && left.every((line, index) => line === right[index]);
}

/**
 * After every command and job:
 *  - at most one step of a partition runs under a live lease (among backfills still in flight);
 *  - a dead worker's claim is not taken over while its lease holds;
 *  - nothing is published outside its envelope without an acceptance of that partition, and duplicate keys
 *    are never published.
 */
export async function checkCheapInvariants(model: Model, system: ModelSystem): Promise<void> {
  if (system.schema.leases) await checkLeases(system);
  await checkEnvelopes(model, system);
}

async function checkLeases(system: ModelSystem): Promise<void> {
  const db = system.ctx.pool;
  const doubled = await db.query<{ hour: Date; steps: string }>(
    `SELECT s.step_key::timestamptz AS hour,
            string_agg(s.backfill_id || ':' || s.kind, ', ') AS steps
     FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
     WHERE s.kind IN ('stage', 'publish') AND s.status = 'running' AND s.lease_expires_at > clock_timestamp()
       AND b.state = ANY ($1::text[])
     GROUP BY s.step_key HAVING count(*) > 1`, [ACTIVE_STATES]);
  const twice = doubled.rows[0];
  if (twice) throw new InvariantViolation(`two steps of partition ${twice.hour.toISOString()} run under live leases at once: ${twice.steps}`);

  // A dead worker's claim is taken over only once its lease ran out: the next claim of the step comes later.
  for (const dead of system.deadClaims) {
    const { rows } = await db.query<{ at: number | null }>(
      `SELECT (extract(epoch FROM min(at)) * 1000)::float8 AS at FROM backfill.events
       WHERE backfill_id = $1::bigint AND kind = 'step_started' AND detail ->> 'step' = $2::text AND detail ->> 'key' = $3::text AND id > $4::bigint`,
      [dead.backfillId, dead.kind, dead.key, dead.afterEventId]);
    const next = rows[0]?.at;
    if (next !== null && next !== undefined && next < dead.leaseUntil) {
      throw new InvariantViolation(`${dead.kind} ${dead.key} of #${dead.backfillId} was claimed again ${Math.round(dead.leaseUntil - next)} ms before the dead worker's lease ran out`);
    }
  }
}

async function checkEnvelopes(model: Model, system: ModelSystem): Promise<void> {
  const db = system.ctx.pool;
  // Staged rows: the store's staged rows for a rewrite (its shared table, or the hour's own: storedRows); for a swap, the table it staged into, wherever the swap
  // and any later one moved it (its oid is kept): only rows written later, with keys of their own, join it since.
  const shared = `${await storedRows(db, 'staged', 's')} WHERE s.bf_backfill = t.backfill_id AND s.bf_generation = 1 AND s.partition_hour = t.partition_hour`;
  const envelope = (staged: string, where: string, params: unknown[]) => db.query<EnvelopeFacts>(
    `SELECT t.backfill_id AS id, t.partition_hour AS hour, t.accepted_by AS "acceptedBy",
            coalesce(r.keys_missing, 0) AS missing, coalesce(r.keys_duplicated, 0) AS duplicated,
            (SELECT count(*) FROM bf_orders.expected e WHERE e.bf_backfill = t.backfill_id AND e.partition_hour = t.partition_hour
               AND NOT EXISTS (SELECT 1 FROM ${staged} AND s.order_id = e.order_id))::int AS lost,
            (SELECT coalesce(sum(s.amount_base), 0)::numeric(18,2)::text FROM ${staged}
                 AND EXISTS (SELECT 1 FROM bf_orders.expected e WHERE e.bf_backfill = t.backfill_id AND e.partition_hour = t.partition_hour AND e.order_id = s.order_id)) AS "stagedKnown",
            (SELECT coalesce(sum(e.bf_measure), 0)::numeric(18,2)::text FROM bf_orders.expected e
               WHERE e.bf_backfill = t.backfill_id AND e.partition_hour = t.partition_hour) AS expected,
            (SELECT count(*) FROM bf_orders.expected e WHERE e.bf_backfill = t.backfill_id AND e.partition_hour = t.partition_hour)::int AS planned
     FROM backfill.backfill_targets t JOIN backfill.backfills b ON b.id = t.backfill_id
     LEFT JOIN backfill.reconciliations r ON r.backfill_id = t.backfill_id AND r.generation = 1
       AND r.partition_hour = t.partition_hour AND r.phase = 'staged'
     WHERE t.status = 'published' AND ${where}`, params);
  const outside = { rows: (await envelope(shared, 't.staged_relid IS NULL', [])).rows };
  const { rows: swapped } = await db.query<{ id: number; hour: Date; table: string }>(
    `SELECT backfill_id AS id, partition_hour AS hour, staged_relid::regclass::text AS table FROM backfill.backfill_targets WHERE status = 'published' AND staged_relid IS NOT NULL`);
  for (const target of swapped) {
    const facts = await envelope(`${target.table} s WHERE s.partition_hour = t.partition_hour`, 't.backfill_id = $1::bigint AND t.partition_hour = $2::timestamptz', [target.id, target.hour]);
    outside.rows.push(...facts.rows);
  }
  for (const t of outside.rows) {
    const where = `#${t.id} ${t.hour.toISOString()}`;
    if (t.duplicated > 0) throw new InvariantViolation(`${where} was published with ${t.duplicated} duplicate key(s) in its staged data`);
    const breach = t.missing > 0 ? `${t.missing} live key(s) missing from the staged data`
      : t.lost > 0 ? `${t.lost} planned row(s) gone from the staged data`
      : t.planned > 0 && t.stagedKnown !== t.expected ? `staged total over planned rows ${t.stagedKnown} ≠ announced ${t.expected}`
      : undefined;
    if (breach && !t.acceptedBy) throw new InvariantViolation(`${where} was published outside its envelope (${breach}) and nobody accepted that partition`);
    const modelled = model.backfills.find((b) => b.id === t.id);
    if (modelled && sourceChangedInsideWindow(model, modelled, t.hour.toISOString()) && !t.acceptedBy) {
      throw new InvariantViolation(`${where}: its source changed after the preview and before staging, yet it was published without an acceptance`);
    }
  }
}

interface EnvelopeFacts {
  id: number;
  hour: Date;
  acceptedBy: string | null;
  missing: number;
  duplicated: number;
  lost: number;
  stagedKnown: string;
  expected: string;
  planned: number;
}

/** Every row the publish replaced is among the rows the backfill saved (compared whole, as jsonb text). */
export async function checkPreserved(system: ModelSystem, backfillId: number, hour: string, prior: RowMap): Promise<void> {
  const saved = await preservedRows(system.ctx.pool, backfillId, hour);
  if (!saved) return;
  const lost = [...prior].filter(([, row]) => !saved.has(row));
  if (lost.length > 0) {
    throw new InvariantViolation(`the publish of ${hour} by #${backfillId} removed ${lost.length} of ${prior.size} row(s) without saving them ` +
      `(the store's saved rows hold ${saved.size}); e.g. order ${lost[0]?.[0]}`);
  }
}

/** The live partition holds exactly what the model expects, row by row. */
export function compareRows(hour: string, live: RowMap, expected: RowMap, context: string): void {
  const missing = [...expected.keys()].filter((k) => !live.has(k));
  const extra = [...live.keys()].filter((k) => !expected.has(k));
  const changed = [...expected].filter(([k, row]) => live.has(k) && live.get(k) !== row).map(([k]) => k);
  if (missing.length + extra.length + changed.length === 0) return;
  throw new InvariantViolation(`${context}: partition ${hour} holds ${live.size} row(s), the model expects ${expected.size}: ` +
    `${missing.length} missing (e.g. ${missing.slice(0, 3).join(', ') || '-'}), ${extra.length} extra (e.g. ${extra.slice(0, 3).join(', ') || '-'}), ` +
    `${changed.length} changed (e.g. ${changed.slice(0, 3).join(', ') || '-'})`);
}

export interface FinalReport {
  states: Record<number, string>;
  paidAgainst: string;
}

/** After the run settled: terminal states, every partition's rows, saved rows, lineage and the paid-against answer. */
export async function checkSettled(model: Model, system: ModelSystem): Promise<FinalReport> {
  const db = system.ctx.pool;
  const { rows: backfills } = await db.query<{ id: number; state: BackfillState; failure: string | null; finishedAt: Date | null }>(
    'SELECT id, state, failure, finished_at AS "finishedAt" FROM backfill.backfills ORDER BY id');
  const states: Record<number, string> = Object.fromEntries(backfills.map((b) => [b.id, b.state]));
  const open = backfills.filter((b) => !TERMINAL_STATES.includes(b.state));
  if (open.length > 0) {
    const steps = await db.query<{ line: string }>(
      `SELECT backfill_id || ' ' || kind || ' ' || step_key || ' ' || status AS line FROM backfill.backfill_steps
       WHERE backfill_id = ANY ($1::bigint[]) AND status NOT IN ('done', 'skipped') ORDER BY backfill_id, kind, step_key`, [open.map((b) => b.id)]);
    throw new InvariantViolation(`not every backfill finished within the bound: ${open.map((b) => `#${b.id} ${b.state}`).join(', ')}; ` +
      `open steps: ${steps.rows.map((r) => r.line).join('; ') || 'none'}`);
  }
  for (const b of backfills) {
    if (b.state !== 'failed') continue;
    if (!b.failure?.trim() || isRawDatabaseMessage(b.failure)) {
      throw new InvariantViolation(`#${b.id} failed without a clear sentence: ${b.failure ?? '(no failure recorded)'}`);
    }
    // The only failure the run can cause: a step that ran out of attempts on Slack's 503s (faults stack).
    if (!b.failure.includes(TRANSIENT_FAULT)) throw new InvariantViolation(`#${b.id} failed, and not for lack of attempts against Slack 503s: ${b.failure}`);
  }
  await checkUndeliverableNotices(system);

  const live = await dayRows(db);
  for (const [hour, rows] of live) compareRows(hour, rows, model.expected.get(hour) ?? new Map(), 'after the run settled');

  for (const backfill of model.backfills) {
    for (const [hour, publish] of backfill.published) await checkPreserved(system, backfill.id, hour, publish.prior);
  }
  await checkLineage(model, system);
  const paidAgainst = await checkPaidAgainst(model, system, backfills);
  return { states, paidAgainst };
}

/** An owner Slack cannot reach is a fact the incident channel hears about, with what to do (a delegate, or override). */
async function checkUndeliverableNotices(system: ModelSystem): Promise<void> {
  if (!system.schema.undeliverable) return;
  const { rows } = await system.ctx.pool.query<{ backfillId: number; consumer: string }>(
    'SELECT backfill_id AS "backfillId", consumer FROM backfill.backfill_consumers WHERE undeliverable IS NOT NULL');
  for (const row of rows) {
    const told = system.messenger.deliveries.some((d) => d.method === 'incidentNotice' && d.backfillId === row.backfillId && d.text?.includes(row.consumer) && d.text.includes('override'));
    if (!told) throw new InvariantViolation(`#${row.backfillId}'s announcement to ${row.consumer} is undeliverable, but the incident channel was never told what to do`);
  }
}

/** Every publish over a partition is the next generation of it, in the order they happened. */
async function checkLineage(model: Model, system: ModelSystem): Promise<void> {
  if (!system.schema.generations) return;
  const { rows } = await system.ctx.pool.query<{ hour: Date; generation: number; backfillId: number; rolledBack: boolean }>(
    `SELECT partition_hour AS hour, generation, backfill_id AS "backfillId", rolled_back_at IS NOT NULL AS "rolledBack"
     FROM backfill.partition_generations ORDER BY partition_hour, generation`);
  const publishes = model.backfills.flatMap((b) => [...b.published].map(([hour, p]) => ({ hour, seq: p.seq, backfillId: b.id, rolledBack: b.rolledBack })));
  for (const hour of new Set(publishes.map((p) => p.hour))) {
    const want = publishes.filter((p) => p.hour === hour).sort((x, y) => x.seq - y.seq);
    const got = rows.filter((r) => r.hour.toISOString() === hour);
    const describe = (list: { backfillId: number; rolledBack: boolean }[]) => list.map((p) => `#${p.backfillId}${p.rolledBack ? ' (rolled back)' : ''}`).join(' → ') || 'nothing';
    const same = want.length === got.length && want.every((p, i) => got[i]?.backfillId === p.backfillId && got[i]?.rolledBack === p.rolledBack);
    if (!same) throw new InvariantViolation(`the lineage of ${hour} is ${describe(got)}, but the publishes were ${describe(want)}`);
  }
}

/**
 * settlement_report 2026-11-15: when the last change to the report was a finished backfill, that correction is
 * the current figure and equals what the report shows; when every backfill was rolled back or never published,
 * the signature stands (and, without late rows, the report shows it again). A rolled-back figure is never current.
 */
async function checkPaidAgainst(model: Model, system: ModelSystem, backfills: { id: number; state: BackfillState }[]): Promise<string> {
  const db = system.ctx.pool;
  const answer = await answerPaidAgainst(db, { report: 'settlement_report', date: DAY });
  const { rows } = await db.query<{ sql: string }>(`SELECT report_total_sql AS sql FROM backfill.consumers WHERE name = 'settlement_report'`);
  const shown = await readReportFigure(db, rows[0]?.sql ?? '', DAY);
  const rolledBack = new Set(backfills.filter((b) => b.state === 'rolled_back').map((b) => b.id));
  if (answer.current.backfillId !== undefined && rolledBack.has(answer.current.backfillId)) {
    throw new InvariantViolation(`paid-against calls rolled-back backfill #${answer.current.backfillId}'s figure ${answer.current.total} current`);
  }
  const lastReplay = await db.query<{ backfillId: number; rollback: boolean }>(
    `SELECT backfill_id AS "backfillId", coalesce((detail ->> 'rollback')::boolean, false) AS rollback FROM backfill.events
     WHERE kind = 'replayed' AND detail ->> 'consumer' = 'settlement_report' ORDER BY id DESC LIMIT 1`);
  const last = lastReplay.rows[0];
  const lastState = last ? backfills.find((b) => b.id === last.backfillId)?.state : undefined;
  if (last && !last.rollback && lastState === 'done') {
    if (answer.current.source !== 'correction' || answer.current.backfillId !== last.backfillId || answer.current.total !== shown) {
      throw new InvariantViolation(`after #${last.backfillId} finished, paid-against says ${answer.current.total} (${answer.current.source}` +
        `${answer.current.backfillId ? ` #${answer.current.backfillId}` : ''}) but the report shows ${shown}`);
    }
    return `correction #${last.backfillId} = ${shown}`;
  }
  const published = model.backfills.filter((b) => b.published.size > 0);
  if (published.every((b) => b.rolledBack)) {
    if (answer.current.source !== 'signature') {
      throw new InvariantViolation(`every backfill was rolled back or published nothing, yet paid-against's current figure is ${answer.current.source} #${answer.current.backfillId}`);
    }
    const lateOnDay = model.lateRows.length > 0;
    if (!lateOnDay && shown !== answer.current.total) {
      throw new InvariantViolation(`every backfill was rolled back or published nothing and no late row landed, yet the report shows ${shown}, not the signed ${answer.current.total}`);
    }
    return `signature ${answer.current.total} (report shows ${shown})`;
  }
  return `not compared (${answer.current.source} ${answer.current.total}; report shows ${shown})`;
}
