import { redact, redactDeep } from '../redaction.js';
import type { Queryable } from './pool.js';
import {
  PHASE_EXITS, ROLLBACK_SUFFIX, SETTLED, STEP_GRAPH, STEP_KINDS, type StepKind, type StepPhase, type StepRef, type StepStatus, type WaitRule,
} from '../core/lifecycle/stepGraph.js';
import type { BackfillState } from '../core/states.js';
import { prepared } from './prepared.js';
import { EVENT_COLUMNS, eventParameters, eventValues, type NewEvent } from './events.js';

// The steps of a backfill (backfill.backfill_steps), one row per kind and key. The predicates over `s` (the step)
// and `b` (its backfill) that say which may run and which a phase still waits on are built below from the step
// graph (stepGraph.ts: its tables, no SQL); the claim columns (claim_token, lease_expires_at) are described in
// migration 0005.
//
// A step's error and result are redacted as they are written (src/redaction.ts): an error is often an outside
// system's words (a webhook's, an orchestrator's, the database's quoting a value), and a result can hold a URL
// from the catalog; both are shown in Slack, the CLI and the incident package.

const STEP_WHERE = 'backfill_id = $1::bigint AND kind = $2::text AND step_key = $3::text';
const stepParams = (ref: StepRef) => [ref.backfillId, ref.kind, ref.key];

// SQL over `s` (a backfill_steps row) and `b` (its backfill). Phase is read from the key as phaseOf does.
const PHASE_SQL: Record<StepPhase, string> = {
  forward: `(s.step_key <> 'rollback' AND s.step_key NOT LIKE '%${ROLLBACK_SUFFIX}')`,
  rollback: `(s.step_key = 'rollback' OR s.step_key LIKE '%${ROLLBACK_SUFFIX}')`,
};
const settledSql = (alias: string) => `${alias}.status IN (${SETTLED.map((status) => `'${status}'`).join(', ')})`;
const HOUR_KEY_SQL = (alias: string) => `to_char(${alias}.partition_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24":00Z"')`;

/**
 * The wave of the target of a stage's or a publish's hour (the step's partition_hour,
 * migrations/0030), as a lateral row over `s`: a probe of the targets' primary key; a step of no hour finds none.
 * PERF: the hour was parsed from the key (a pattern match, a cast, and the target's hour formatted back to
 * compare): 3 ms of a 7 ms look at 240 partitions. And the control tables are never analyzed (autovacuum may be
 * off), so the planner, expecting a row or two, nested such scans inside the steps' (see openOfBackfills); a
 * lateral probe is an index probe whatever the statistics say, and OFFSET 0 keeps the planner from flattening it
 * back into a join it would nest the same way.
 */
function targetOfStep(s: string, only = ''): string {
  return `SELECT t.wave FROM backfill.backfill_targets t
     WHERE ${only}t.backfill_id = ${s}.backfill_id AND t.partition_hour = ${s}.partition_hour
     OFFSET 0`;
}

/**
 * What the waits read of the backfill as a whole, once per statement (openOfBackfills, as `o`): its stages,
 * publishes and rollback replays not yet settled, and the lowest wave with a publish not yet settled.
 */
const OPEN_STAGES = 'o.open_stages';
const OPEN_PUBLISHES = 'o.open_publishes';
const OPEN_ROLLBACK_REPLAYS = 'o.open_rollback_replays';
const LOWEST_OPEN_WAVE = 'o.lowest_open_wave';

// `st` is the step's own target (targetOfStep), absent for a key of no hour; `os` its stage (ownStage).
const WAIT_SQL: Record<WaitRule, string> = {
  // The stage of the same hour: a publish and its stage share the step key (ownStage, `os`).
  'own stage': `(os.status IS NULL OR ${settledSql('os')})`,
  'every stage': `coalesce(${OPEN_STAGES}, 0) = 0`,
  // The canary (wave 0) first; each later wave only once every earlier one is published: no publish of a lower
  // wave is still open, so the step's wave is at most the lowest open one.
  'earlier waves': `(${LOWEST_OPEN_WAVE} IS NULL OR st.wave IS NULL OR st.wave <= ${LOWEST_OPEN_WAVE})`,
  'every publish': `coalesce(${OPEN_PUBLISHES}, 0) = 0`,
  // A replay waits for every consumer it depends on, within its own phase.
  'replays depended on': `NOT EXISTS (
    SELECT 1 FROM backfill.backfill_consumers bc
    JOIN backfill.backfill_steps d ON d.backfill_id = bc.backfill_id AND d.kind = 'replay'
      AND split_part(d.step_key, '@', 1) = ANY (bc.depends_on)
      AND (d.step_key LIKE '%${ROLLBACK_SUFFIX}') = (s.step_key LIKE '%${ROLLBACK_SUFFIX}')
    WHERE bc.backfill_id = s.backfill_id AND bc.consumer = split_part(s.step_key, '@', 1) AND NOT ${settledSql('d')})`,
  'every rollback replay': `coalesce(${OPEN_ROLLBACK_REPLAYS}, 0) = 0`,
};

/**
 * The open counts of the backfills `which` selects (a condition on `r.backfill_id`), one row each: what the waits
 * above read as `o`. A publish's wave is its target's, found by its hour.
 *
 * PERF: the waits were subqueries per step, each reading the backfill's steps and targets again (and the targets'
 * hours as text: no index helps), so a look for runnable steps grew with the square of the partitions, and a
 * backfill with them with the cube: at 60 rows × 240 partitions a dispatch took 211 ms (median) and the backfill
 * 57 s where 24 partitions took 0.5 s. One pass over the backfill's steps, each publish's target found by its hour
 * (targetOfStep), reads each row once (docs/benchmark.md). test/db/runnableSteps.test.ts holds the two forms to
 * the same answers.
 */
function openOfBackfills(which: string): string {
  const open = (condition: string) => `count(*) FILTER (WHERE ${condition} AND NOT ${settledSql('r')})::int`;
  return `SELECT r.backfill_id,
            ${open(`r.kind = 'stage'`)} AS open_stages,
            ${open(`r.kind = 'publish'`)} AS open_publishes,
            ${open(`r.kind = 'replay' AND r.step_key LIKE '%${ROLLBACK_SUFFIX}'`)} AS open_rollback_replays,
            min(pt.wave) FILTER (WHERE r.kind = 'publish' AND NOT ${settledSql('r')}) AS lowest_open_wave
     FROM backfill.backfill_steps r
     LEFT JOIN LATERAL (${targetOfStep('r', `r.kind = 'publish' AND `)}) pt ON true
     WHERE ${which}
     GROUP BY r.backfill_id`;
}

/**
 * The stage of the step's hour (a publish and its stage share the step key), by the primary key. PERF: as NOT
 * EXISTS the planner turned it into one hashed scan of every backfill's steps, history and all, for each look.
 */
const ownStage = (only: string) =>
  `SELECT r.status FROM backfill.backfill_steps r WHERE ${only}r.backfill_id = s.backfill_id AND r.kind = 'stage' AND r.step_key = s.step_key OFFSET 0`;

/** The waits that read the backfill's open counts (`o`), and those that read the step's own target or stage (`st`, `os`). */
const READS_OPEN: readonly WaitRule[] = ['every stage', 'earlier waves', 'every publish', 'every rollback replay'];
const READS_OWN: readonly WaitRule[] = ['own stage', 'earlier waves'];

/**
 * What the waits of steps of `kinds` read, as a CTE (`open_steps`, openOfBackfills over the backfills `which`
 * selects) and joins: the backfill's open counts (`o`) where a wait reads them, the step's own target (`st`) and
 * stage (`os`) where one reads those, each looked up only for a step of a kind that has such a wait.
 */
function waitReads(kinds: readonly StepKind[], which: string): { cte: string; joins: string } {
  const entries = graphOf(kinds);
  const ownKinds = [...new Set(entries.filter(({ spec }) => spec.waitsFor.some((rule) => READS_OWN.includes(rule))).map(({ kind }) => kind))];
  const open = entries.some(({ spec }) => spec.waitsFor.some((rule) => READS_OPEN.includes(rule)));
  const own = ownKinds.length > 0 ? `s.kind IN (${quoteList(ownKinds)}) AND ` : '';
  return {
    cte: open ? `open_steps AS (${openOfBackfills(which)})` : '',
    joins: [
      open ? 'LEFT JOIN open_steps o ON o.backfill_id = s.backfill_id' : '',
      ownKinds.length > 0 ? `LEFT JOIN LATERAL (${targetOfStep('s', own)}) st ON true
     LEFT JOIN LATERAL (${ownStage(own)}) os ON true` : '',
    ].filter(Boolean).join('\n     '),
  };
}

const quoteList = (values: readonly string[]) => values.map((value) => `'${value}'`).join(', ');

/**
 * One SQL predicate over `s` and `b`: true when the step's kind, phase, backfill state and waits allow it to
 * run now. Built from STEP_GRAPH (fixed strings, no input), used by the dispatcher and by the claim.
 */
function runnableSql(kinds: readonly StepKind[] = STEP_KINDS): string {
  const clauses = graphOf(kinds).map(({ kind, phase, spec }) => {
    const waits = spec.waitsFor.map((rule) => ` AND ${WAIT_SQL[rule]}`).join('');
    return `(s.kind = '${kind}' AND ${PHASE_SQL[phase]} AND b.state IN (${quoteList(spec.runsIn)})${waits})`;
  });
  return clauses.length > 0 ? `(${clauses.join('\n OR ')})` : 'false';
}

/** The step graph's entries of the given kinds. */
function graphOf(kinds: readonly StepKind[]) {
  return Object.entries(STEP_GRAPH).flatMap(([name, spec]) => {
    const [kind, phase] = name.split(':') as [StepKind, StepPhase];
    return kinds.includes(kind) ? [{ kind, phase, spec }] : [];
  });
}

/** The kinds a phase exit waits on, as SQL over `s`: for advanceBackfill's counts. */
function phaseStepsSql(exit: (typeof PHASE_EXITS)[number]): string {
  return `(s.kind IN (${quoteList(exit.when)}) AND ${PHASE_SQL[exit.phase]} AND NOT ${settledSql('s')})`;
}

// Per phase exit (PHASE_EXITS, in order), the count of the steps `s` it still waits on.
const OPEN_BY_PHASE = PHASE_EXITS.map((exit) => `count(*) FILTER (WHERE ${phaseStepsSql(exit)})::int`).join(', ');

export interface StepClaimCheckRow {
  status: StepStatus;
  /** The lease ran out (or there never was one). */
  expired: boolean;
  /** The step graph lets it run now. */
  runnable: boolean;
  attempts: number;
  /** The claim it is under (a running step's), whose holder a takeover ends. */
  token: string | null;
}

/**
 * A claim's check of a step of `kind`, prepared under a name of its own (see RUNNABLE_STEPS below): only that
 * kind's clauses of the graph, and only what its waits read (a stage's, none: no count of the backfill's steps).
 */
function claimCheck(kind: StepKind): { name: string; text: string } {
  const reads = waitReads([kind], 'r.backfill_id = $1::bigint');
  return {
    name: `backfill_lock_step_for_claim_${kind}`,
    text: `${reads.cte ? `WITH ${reads.cte}\n     ` : ''}SELECT s.status, coalesce(s.lease_expires_at < clock_timestamp(), true) AS expired, ${runnableSql([kind])} AS runnable, s.attempts,
            s.claim_token::text AS token
     FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
     ${reads.joins}
     WHERE s.backfill_id = $1::bigint AND s.kind = $2::text AND s.step_key = $3::text FOR UPDATE OF s`,
  };
}

const CLAIM_CHECKS = new Map(STEP_KINDS.map((kind) => [kind, claimCheck(kind)]));

/** The step under its row lock, with what a claim decides on. */
export async function lockStepForClaim(tx: Queryable, ref: StepRef): Promise<StepClaimCheckRow | undefined> {
  const check = CLAIM_CHECKS.get(ref.kind);
  if (!check) throw new Error(`no step kind ${ref.kind}`);
  const { rows } = await tx.query<StepClaimCheckRow>({ ...check, values: stepParams(ref) });
  return rows[0];
}

/**
 * The claims of the backfill's running steps whose lease ran out, read without a lock (a frozen holder may hold
 * its step's row and the backfill's): whose sessions a claim ends before it takes any of them.
 */
export async function findExpiredClaims(db: Queryable, backfillId: number): Promise<{ ref: StepRef; token: string }[]> {
  const { rows } = await db.query<{ kind: StepRef['kind']; key: string; token: string }>(
    prepared(`SELECT kind, step_key AS key, claim_token::text AS token FROM backfill.backfill_steps
     WHERE backfill_id = $1::bigint AND status = 'running' AND claim_token IS NOT NULL AND lease_expires_at < clock_timestamp()`), [backfillId]);
  return rows.map((row) => ({ ref: { backfillId, kind: row.kind, key: row.key }, token: row.token }));
}

/**
 * Running under a new token and lease, one attempt more, with `started` (its step_started event) recorded in the
 * same statement; returns the token. PERF: the claim and its event were two round trips of every step.
 */
export async function claimStepRow(tx: Queryable, ref: StepRef, leaseMs: number, started: NewEvent): Promise<string | undefined> {
  const { rows } = await tx.query<{ token: string }>(
    prepared(`WITH claimed AS (
       UPDATE backfill.backfill_steps SET status = 'running', claim_token = gen_random_uuid(),
              lease_expires_at = clock_timestamp() + $4::int * interval '1 millisecond', attempts = attempts + 1,
              started_at = coalesce(started_at, now())
       WHERE ${STEP_WHERE} RETURNING claim_token AS token
     ), started AS (
       INSERT INTO backfill.events (${EVENT_COLUMNS})
       SELECT ${eventParameters(5)} FROM claimed
     )
     SELECT token FROM claimed`), [...stepParams(ref), leaseMs, ...eventValues(started)]);
  return rows[0]?.token;
}

/**
 * A stage of a small hour takes into its claim, under its own token, further stages of its backfill that may run
 * now and never ran (attempts 0), whose hours are small too, up to `limit`, in hour order; with a step_started
 * event each (`started`'s detail, with the step's key and attempt). None unless the lead's own hour is small, and
 * never the canary (wave 0), which stages alone so that it publishes while the rest stage. Steps another claim is
 * taking at this moment are skipped, not waited for. Returns their keys, in hour order.
 *
 * Small is the target's rows, live or previewed, whichever is more, under `swapMinRows` (0: no hour is small): the
 * rule of stagedApart (src/core/recompute/stagePublish.ts) as SQL, so that an hour taken here is staged in the
 * shared tables. Were the two ever to differ, such an hour would be staged apart in the batch: slower, as correct.
 */
export async function claimCompanionStages(tx: Queryable, lead: StepRef, token: string, options: { leaseMs: number; limit: number; swapMinRows: number },
  started: NewEvent): Promise<string[]> {
  const { rows } = await tx.query<{ key: string }>(COMPANION_STAGES,
    [lead.backfillId, lead.key, token, options.limit, options.swapMinRows, options.leaseMs, ...eventValues(started)]);
  return rows.map((row) => row.key);
}

/** A stage's hour a lead takes along or leads with: small ($5, SWAP_MIN_ROWS), and not the canary; SQL over its target `t`. */
const smallStageSql = (t: string) =>
  `($5::int > 0 AND ${t}.expected_rows IS NOT NULL AND greatest(${t}.rows_before, ${t}.expected_rows) < $5::int AND ${t}.wave IS DISTINCT FROM 0)`;

const STAGE_READS = waitReads(['stage'], 'r.backfill_id = $1::bigint');

// The candidates' row locks only (FOR UPDATE OF s), SKIP LOCKED: taken in the claim's transaction after the
// backfill's FOR SHARE, as every claim takes them; the stage's runnable predicate is the step graph's (runnableSql).
const COMPANION_STAGES = prepared(`WITH ${STAGE_READS.cte ? `${STAGE_READS.cte}, ` : ''}lead AS (
     SELECT 1 FROM backfill.backfill_steps l
     JOIN backfill.backfill_targets t ON t.backfill_id = l.backfill_id AND t.partition_hour = l.partition_hour
     WHERE l.backfill_id = $1::bigint AND l.kind = 'stage' AND l.step_key = $2::text AND ${smallStageSql('t')}
   ), candidate AS (
     SELECT s.backfill_id, s.kind, s.step_key FROM backfill.backfill_steps s
     JOIN backfill.backfills b ON b.id = s.backfill_id
     JOIN backfill.backfill_targets t ON t.backfill_id = s.backfill_id AND t.partition_hour = s.partition_hour
     ${STAGE_READS.joins}
     WHERE s.backfill_id = $1::bigint AND s.kind = 'stage' AND s.status = 'pending' AND s.attempts = 0 AND s.step_key <> $2::text
       AND ${runnableSql(['stage'])} AND ${smallStageSql('t')} AND EXISTS (SELECT 1 FROM lead)
     ORDER BY s.step_key LIMIT $4::int
     FOR UPDATE OF s SKIP LOCKED
   ), claimed AS (
     UPDATE backfill.backfill_steps u SET status = 'running', claim_token = $3::uuid,
            lease_expires_at = clock_timestamp() + $6::int * interval '1 millisecond', attempts = u.attempts + 1,
            started_at = coalesce(u.started_at, now())
     FROM candidate c WHERE u.backfill_id = c.backfill_id AND u.kind = c.kind AND u.step_key = c.step_key
     RETURNING u.step_key AS key, u.attempts
   ), started AS (
     INSERT INTO backfill.events (${EVENT_COLUMNS})
     SELECT $7::bigint, $8::text, $9::text, $10::jsonb || jsonb_build_object('key', key, 'attempt', attempts), $11::text, $12::text, $13::text
     FROM claimed ORDER BY key
   )
   SELECT key FROM claimed ORDER BY key`);

/**
 * Gives back the steps a lead took into its claim (claimCompanionStages) that this token still holds, as if never
 * claimed: pending, the attempt not counted (the lead's failure, a fence or a lost claim ended them, not their own
 * hour). Returns how many.
 */
export async function releaseCompanionClaims(db: Queryable, lead: StepRef, token: string): Promise<number> {
  const released = await db.query(
    prepared(`UPDATE backfill.backfill_steps SET status = 'pending', claim_token = NULL, lease_expires_at = NULL, attempts = greatest(attempts - 1, 0)
     WHERE backfill_id = $1::bigint AND claim_token = $4::uuid AND status = 'running' AND NOT (kind = $2::text AND step_key = $3::text)`),
    [...stepParams(lead), token]);
  return released.rowCount ?? 0;
}

/**
 * Extends the lease of every step of the backfill this token still holds: the step, and the small stages it took
 * into its claim (claimCompanionStages), which share its token.
 */
export async function renewStepLease(db: Queryable, ref: StepRef, token: string, leaseMs: number): Promise<void> {
  await db.query(
    prepared(`UPDATE backfill.backfill_steps SET lease_expires_at = clock_timestamp() + $3::int * interval '1 millisecond'
     WHERE backfill_id = $1::bigint AND claim_token = $2::uuid AND status = 'running'`), [ref.backfillId, token, leaseMs]);
}

/** The step's status and claim token, under its row lock (the claim check of a commit). */
export async function lockStepClaim(tx: Queryable, ref: StepRef): Promise<{ status: StepStatus; token: string | null } | undefined> {
  const { rows } = await tx.query<{ status: StepStatus; token: string | null }>(
    prepared(`SELECT status, claim_token::text AS token FROM backfill.backfill_steps WHERE ${STEP_WHERE} FOR UPDATE`), stepParams(ref));
  return rows[0];
}

/** The backfill's state and, per phase exit (PHASE_EXITS, in order), how many steps that exit still waits on. */
export interface OpenStepsByPhase {
  state: BackfillState;
  open: number[];
}

/**
 * Done (or undeliverable) with their results, the steps of one kind (`results` by key) this token holds: the claim
 * goes. In the same statement, the backfill's state and the steps each phase exit still waits on besides these,
 * which are settled now (countOpenStepsByPhase's figures after the update), and how many this token still held:
 * fewer than asked means another worker holds one now, and the caller must not commit. The UPDATE takes the steps'
 * row locks, as the claim check of a commit did. Undefined only when the backfill is gone.
 * PERF: the claim's check under its row lock, the update and the count were three statements of every step; the
 * steps are found by the primary key (= ANY), whatever the planner thinks of the control tables' statistics.
 */
export async function finishClaimedStepRows(tx: Queryable, backfillId: number, kind: StepKind, token: string, status: 'done' | 'undeliverable',
  results: ReadonlyMap<string, Record<string, unknown>>): Promise<(OpenStepsByPhase & { finished: number }) | undefined> {
  const keys = [...results.keys()];
  const { rows } = await tx.query<OpenStepsByPhase & { finished: number }>(
    prepared(`WITH finished AS (
       UPDATE backfill.backfill_steps SET status = $5::text, finished_at = now(), result = ($6::jsonb[])[array_position($3::text[], step_key)],
              error = NULL, claim_token = NULL, lease_expires_at = NULL
       WHERE backfill_id = $1::bigint AND kind = $2::text AND step_key = ANY ($3::text[]) AND claim_token = $4::uuid AND status = 'running'
       RETURNING step_key)
     SELECT b.state, ARRAY[${OPEN_BY_PHASE}] AS open, (SELECT count(*) FROM finished)::int AS finished
     FROM backfill.backfills b
     LEFT JOIN backfill.backfill_steps s ON s.backfill_id = b.id AND NOT (s.kind = $2::text AND s.step_key = ANY ($3::text[]))
     WHERE b.id = $1::bigint
     GROUP BY b.state`),
    [backfillId, kind, keys, token, status, keys.map((key) => JSON.stringify(redactDeep(results.get(key) ?? {})))]);
  return rows[0];
}

/** Gives the claim back, to `to`, only while this token holds it. True when it did. */
export async function releaseStepClaim(db: Queryable, ref: StepRef, token: string, to: 'pending' | 'blocked' | 'skipped', error: string | null): Promise<boolean> {
  const result = await db.query(
    prepared(`UPDATE backfill.backfill_steps SET status = $5::text, error = $6::text, claim_token = NULL, lease_expires_at = NULL
     WHERE ${STEP_WHERE} AND claim_token = $4::uuid AND status = 'running'`),
    [...stepParams(ref), token, to, error === null ? null : redact(error)]);
  return result.rowCount === 1;
}

/** Failed with its error, only while this token holds it. True when it did. */
export async function failStepClaim(tx: Queryable, ref: StepRef, token: string, message: string): Promise<boolean> {
  const failed = await tx.query(
    `UPDATE backfill.backfill_steps SET status = 'failed', error = $5::text, finished_at = now(), claim_token = NULL, lease_expires_at = NULL
     WHERE ${STEP_WHERE} AND claim_token = $4::uuid AND status = 'running'`, [...stepParams(ref), token, redact(message)]);
  return failed.rowCount === 1;
}

/** Moves the backfill's steps in `from` (of `kinds`, or of every kind) to `to`, dropping their claims; returns how many. */
export async function moveStepStatuses(tx: Queryable, backfillId: number, to: StepStatus, from: readonly StepStatus[], kinds: readonly string[] | null): Promise<number> {
  const result = await tx.query(
    `UPDATE backfill.backfill_steps SET status = $2::text, claim_token = NULL, lease_expires_at = NULL
     WHERE backfill_id = $1::bigint AND status = ANY ($3::text[]) AND ($4::text[] IS NULL OR kind = ANY ($4::text[]))`,
    [backfillId, to, from, kinds]);
  return result.rowCount ?? 0;
}

/** The backfill's state and, per phase exit (PHASE_EXITS, in order), how many steps that exit still waits on. */
export async function countOpenStepsByPhase(tx: Queryable, backfillId: number): Promise<OpenStepsByPhase | undefined> {
  const { rows } = await tx.query<OpenStepsByPhase>(
    `SELECT b.state, ARRAY[${OPEN_BY_PHASE}] AS open FROM backfill.backfills b LEFT JOIN backfill.backfill_steps s ON s.backfill_id = b.id
     WHERE b.id = $1::bigint GROUP BY b.state`, [backfillId]);
  return rows[0];
}

/** One announce step per reader told before the run. */
export async function insertAnnounceSteps(tx: Queryable, backfillId: number): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.backfill_steps (backfill_id, kind, step_key)
     SELECT $1::bigint, 'announce', consumer FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint AND notify_rule = 'before'`, [backfillId]);
}

/** The rollback's replay and notify steps, one per consumer (keys carry the suffix), and its report. */
export async function insertRollbackSteps(tx: Queryable, backfillId: number, rollbackSuffix: string): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.backfill_steps (backfill_id, kind, step_key)
     SELECT $1::bigint, 'replay', consumer || $2::text FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint
     UNION ALL SELECT $1::bigint, 'notify', consumer || $2::text FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint
     UNION ALL SELECT $1::bigint, 'report', 'rollback'
     ON CONFLICT DO NOTHING`, [backfillId, rollbackSuffix]);
}

export interface RunnableStepRow {
  backfillId: number;
  kind: StepKind;
  key: string;
  /** The attempts of a running step whose lease ran out; null for a pending one. */
  takeoverOf: number | null;
}

const LISTING_READS = waitReads(STEP_KINDS, 'r.backfill_id IN (SELECT c.backfill_id FROM candidate c)');

const runnableStepsSql = (ofOneBackfill: boolean) =>
  `WITH candidate AS (
     SELECT s.backfill_id, s.kind, s.step_key, s.partition_hour, s.status, s.attempts FROM backfill.backfill_steps s
     WHERE (s.status = 'pending' OR (s.status = 'running' AND s.lease_expires_at < clock_timestamp()))
       ${ofOneBackfill ? 'AND s.backfill_id = $2::bigint' : ''}
   )${LISTING_READS.cte ? `, ${LISTING_READS.cte}` : ''}
   SELECT "backfillId", kind, key, "takeoverOf" FROM (
     SELECT s.backfill_id AS "backfillId", s.kind, s.step_key AS key, CASE WHEN s.status = 'running' THEN s.attempts END AS "takeoverOf",
            row_number() OVER (PARTITION BY s.backfill_id ORDER BY s.kind = 'stage', array_position($1::text[], s.kind), s.step_key) AS place
     FROM candidate s JOIN backfill.backfills b ON b.id = s.backfill_id
     ${LISTING_READS.joins}
     WHERE ${runnableSql()}
   ) runnable
   WHERE place <= ${ofOneBackfill ? '$3' : '$2'}::int
   ORDER BY "backfillId", array_position($1::text[], kind), key`;

// PERF: the step graph's predicate was a dozen subqueries (fewer since openOfBackfills), and planning them took
// 5.5 ms a dispatch at 60 rows a partition (the server's log, bind of the unnamed statement), against 2.5 ms
// running them. Prepared under a name, a connection plans it for its first five runs and then keeps one generic
// plan: 4.4-5.3 ms a call became 0.4-0.6 ms, and a backfill of 60 × 24 took 0.97-1.05 s before, 0.69-0.72 s after (docs/benchmark.md). The same
// goes for a claim's check (1.4 ms of planning). The names are fixed and the texts built once, from fixed strings.
// A migration that changed the type of a column these select would fail them on connections that prepared them
// before ("cached plan must not change result type"): workers restart on a deploy, so none outlives one.
const RUNNABLE_STEPS = { name: 'backfill_runnable_steps', text: runnableStepsSql(false) };
const RUNNABLE_STEPS_OF = { name: 'backfill_runnable_steps_of', text: runnableStepsSql(true) };

/**
 * How many runnable steps of a backfill a look names: the next ones to run, every kind before its stages (which
 * are all runnable at once), in hour order. A stage claimed leaves the look, so the next one enters it; every step
 * that commits looks again.
 * PERF: a look named every runnable step, and the dispatcher asked the queue after each: at 240 partitions
 * about 135 stages, twice a partition (a backfill of 60 rows × 240 partitions: 12.0 s, 9.2 s with a window of
 * 32). Above the slots of the workers of a deployment (WORKER_CONCURRENCY a process), so none waits for one.
 */
const DISPATCH_WINDOW = 32;

/**
 * Pending steps, and running ones whose lease ran out, that the step graph lets run now: of each backfill, the
 * first `window` with its stages last (DISPATCH_WINDOW); in kind order.
 */
export async function listRunnableSteps(db: Queryable, backfillId?: number, window = DISPATCH_WINDOW): Promise<RunnableStepRow[]> {
  const { rows } = await db.query<RunnableStepRow>(backfillId === undefined
    ? { ...RUNNABLE_STEPS, values: [[...STEP_KINDS], window] }
    : { ...RUNNABLE_STEPS_OF, values: [[...STEP_KINDS], backfillId, window] });
  return rows;
}

export interface StepRow {
  kind: StepKind;
  key: string;
  status: StepStatus;
  attempts: number;
  startedAt: Date | null;
  finishedAt: Date | null;
  error: string | null;
}

/** Every step of the backfill: finished ones in the order they finished, then the rest in kind order. */
export async function listSteps(db: Queryable, backfillId: number): Promise<StepRow[]> {
  const { rows } = await db.query<StepRow>(
    `SELECT kind, step_key AS key, status, attempts, started_at AS "startedAt", finished_at AS "finishedAt", error
     FROM backfill.backfill_steps WHERE backfill_id = $1::bigint
     ORDER BY coalesce(finished_at, 'infinity'), array_position(ARRAY['announce','stage','publish','watermark','replay','compare','notify','report'], kind), step_key`,
    [backfillId]);
  return rows;
}

/**
 * The steps of an approved backfill: stage and publish per target, one watermark move, replay per consumer, one
 * compare, notify per "after" owner, the diff post.
 */
export async function insertRunSteps(tx: Queryable, backfillId: number): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.backfill_steps (backfill_id, kind, step_key, partition_hour)
     SELECT $1::bigint, kind, ${HOUR_KEY_SQL('t')}, t.partition_hour
       FROM backfill.backfill_targets t CROSS JOIN (VALUES ('stage'), ('publish')) AS k(kind) WHERE t.backfill_id = $1::bigint
     UNION ALL SELECT $1::bigint, 'watermark', 'reset', NULL
     UNION ALL SELECT $1::bigint, 'replay', consumer, NULL FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint
     UNION ALL SELECT $1::bigint, 'compare', 'totals', NULL
     UNION ALL SELECT $1::bigint, 'notify', consumer, NULL FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint AND notify_rule = 'after'
     UNION ALL SELECT $1::bigint, 'report', 'diff', NULL
     ON CONFLICT DO NOTHING`, [backfillId]);
}
