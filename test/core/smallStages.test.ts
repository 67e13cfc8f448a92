// Small hours staged in runs: a stage of a small hour (under SWAP_MIN_ROWS) takes the next small stages of its
// backfill that never ran into its claim (SMALL_HOUR_BATCH in all), stages them in its own transaction and commits
// them behind its one fence. Demo night 2026-11-15 (six hours of about 60 rows; the canary 05:00 stages alone), on
// real PostgreSQL and queues. What must hold: each hour is staged once and staged as it would be alone; a companion
// whose hour fails is undone alone and retried by itself; the lead's failure, a stop and a takeover leave no hour
// of the run committed and no step stuck under its claim.

import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { lockPartition } from '../../src/core/recompute/partitionStep.js';
import { stopBackfill } from '../../src/core/recovery/recovery.js';
import { executeStep, type StepRef } from '../../src/core/procedure.js';
import { listEvents } from '../../src/db/events.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { waitUntil } from '../support/wait.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

const OPERATOR = 'U07ONCALL';
const hourKey = (hh: string) => `2026-11-15T${hh}:00Z`;
const HOURS = ['05', '06', '07', '08', '09', '10'];
/** Every night-15 hour is small under this; the runs are four hours long. */
const SMALL = { SWAP_MIN_ROWS: '10000', SMALL_HOUR_BATCH: '4' };

let engines: TestEngine[] = [];
let clients: pg.Client[] = [];

afterEach(async () => {
  for (const client of clients) await client.end().catch(() => undefined);
  for (const engine of engines) await engine.close();
  clients = [];
  engines = [];
});

async function engineWith(env: Record<string, string>): Promise<TestEngine> {
  const engine = await createTestEngine('month-end', env);
  engines.push(engine);
  return engine;
}

const stageOf = (backfillId: number, hh: string): StepRef => ({ backfillId, kind: 'stage', key: hourKey(hh) });

interface StageFacts {
  status: string;
  attempts: number;
  claimed: boolean;
  error: string | null;
}

/** Each hour's stage step, by hour. */
async function stages(e: TestEngine, id: number): Promise<Record<string, StageFacts>> {
  const { rows } = await e.ctx.pool.query<StageFacts & { key: string }>(
    `SELECT step_key AS key, status, attempts, claim_token IS NOT NULL AS claimed, error FROM backfill.backfill_steps
     WHERE backfill_id = $1 AND kind = 'stage' ORDER BY step_key`, [id]);
  return Object.fromEntries(rows.map(({ key, ...facts }) => [key.slice(11, 13), facts]));
}

const statuses = async (e: TestEngine, id: number) => Object.fromEntries(Object.entries(await stages(e, id)).map(([hh, facts]) => [hh, facts.status]));

/** The hours whose rows the shared staged table holds for the backfill (committed: read from another session). */
async function hoursStaged(e: TestEngine, id: number): Promise<string[]> {
  const { rows } = await e.ctx.pool.query<{ hh: string }>(
    `SELECT DISTINCT to_char(partition_hour AT TIME ZONE 'UTC', 'HH24') AS hh FROM bf_orders.staged WHERE bf_backfill = $1 ORDER BY 1`, [id]);
  return rows.map((row) => row.hh);
}

/** The stage steps' step_started events: the hour, and the stage it ran with (a companion) or null. */
async function stagesStarted(e: TestEngine, id: number): Promise<{ hh: string; with: string | null; takeover: boolean }[]> {
  return (await listEvents(e.ctx.pool, id))
    .filter((event) => event.kind === 'step_started' && event.detail.step === 'stage')
    .map((event) => ({ hh: String(event.detail.key).slice(11, 13), with: typeof event.detail.with === 'string' ? event.detail.with.slice(11, 13) : null, takeover: event.detail.takeover === true }));
}

/** Each hour's staged figures, as its 'staged' event recorded them. */
async function stagedFigures(e: TestEngine, id: number): Promise<Record<string, unknown>> {
  const events = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'staged');
  return Object.fromEntries(events.map((event) => [String(event.detail.partition), event.detail]));
}

async function dayTotal(e: TestEngine): Promise<string> {
  const { rows } = await e.ctx.pool.query<{ total: string }>(
    `SELECT sum(amount_base)::numeric(18,2)::text AS total FROM warehouse.orders WHERE partition_hour >= '2026-11-15T00:00Z' AND partition_hour < '2026-11-16T00:00Z'`);
  return rows[0]?.total ?? '';
}

/** Staging of hour `hh` fails while this trigger stands: an error of the database, as a step's SQL can raise. */
async function failStagingOf(e: TestEngine, hh: string): Promise<() => Promise<void>> {
  await e.ctx.pool.query(`CREATE FUNCTION public.refuse_staged_row() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'the source of % is unreadable', NEW.partition_hour; END $$`);
  await e.ctx.pool.query(`CREATE TRIGGER refuse_staged_row BEFORE INSERT ON bf_orders.staged FOR EACH ROW
    WHEN (NEW.partition_hour = '${hourKey(hh)}'::timestamptz) EXECUTE FUNCTION public.refuse_staged_row()`);
  return async () => {
    await e.ctx.pool.query('DROP TRIGGER refuse_staged_row ON bf_orders.staged');
    await e.ctx.pool.query('DROP FUNCTION public.refuse_staged_row()');
  };
}

/** A session of the test's own holding hour `hh`'s partition lock, as any writer of the hour takes it. */
async function holdPartition(e: TestEngine, hh: string): Promise<{ release(): Promise<void>; pid: number }> {
  const client = new pg.Client({ connectionString: e.ctx.config.DATABASE_URL });
  await client.connect();
  clients.push(client);
  await client.query('BEGIN');
  await lockPartition(client, 'orders', new Date(hourKey(hh)));
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid ?? -1;
  return { pid, release: async () => void (await client.query('ROLLBACK')) };
}

/** True once a session other than `holder` waits for a lock in the engine's database. */
async function someoneWaits(e: TestEngine, holder: number): Promise<boolean> {
  const { rows } = await e.ctx.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE NOT l.granted AND a.datname = current_database() AND l.pid <> $1`, [holder]);
  return (rows[0]?.n ?? 0) > 0;
}

describe('small hours staged in runs', () => {
  it('stages the next small hours with a stage, each once, the canary alone, and ends with the figures of hour-by-hour staging', async () => {
    const e = await engineWith(SMALL);
    const id = await approvedNight15(e.ctx, 'small stages test');

    expect(await executeStep(e.ctx, stageOf(id, '06'))).toBe('done');
    expect(await statuses(e, id)).toEqual({ '05': 'pending', '06': 'done', '07': 'done', '08': 'done', '09': 'done', 10: 'pending' });
    expect(await hoursStaged(e, id)).toEqual(['06', '07', '08', '09']);
    expect(await stagesStarted(e, id)).toEqual([
      { hh: '06', with: null, takeover: false }, { hh: '07', with: '06', takeover: false }, { hh: '08', with: '06', takeover: false }, { hh: '09', with: '06', takeover: false }]);
    // A companion's own job finds it done; the canary stages alone and takes nobody.
    expect(await executeStep(e.ctx, stageOf(id, '07'))).toBe('already_done');
    expect(await executeStep(e.ctx, stageOf(id, '05'))).toBe('done');
    expect((await statuses(e, id))['10']).toBe('pending');
    expect(Object.values(await stages(e, id)).filter((facts) => facts.status === 'done').map((facts) => facts.attempts)).toEqual([1, 1, 1, 1, 1]);

    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);

    // The same night staged hour by hour records the same figures for every hour.
    const alone = await engineWith({ ...SMALL, SMALL_HOUR_BATCH: '1' });
    const aloneId = await approvedNight15(alone.ctx, 'small stages test');
    expect((await runUntilSettled(alone.ctx, aloneId, () => undefined, alone.notifier)).backfill.state).toBe('done');
    expect((await stagesStarted(alone, aloneId)).every((started) => started.with === null)).toBe(true);
    expect(await stagedFigures(e, id)).toEqual(await stagedFigures(alone, aloneId));
    expect(Object.keys(await stagedFigures(e, id))).toHaveLength(HOURS.length);
  }, 60_000);

  it('undoes a companion whose hour fails alone: the others commit, and it is retried by itself, taking nobody along', async () => {
    const e = await engineWith(SMALL);
    const id = await approvedNight15(e.ctx, 'small stages test');
    const stopFailing = await failStagingOf(e, '08');

    expect(await executeStep(e.ctx, stageOf(id, '06'))).toBe('done');
    const after = await stages(e, id);
    expect(Object.fromEntries(Object.entries(after).map(([hh, facts]) => [hh, facts.status]))).toEqual(
      { '05': 'pending', '06': 'done', '07': 'done', '08': 'pending', '09': 'done', 10: 'pending' });
    // Its attempt counted, with its own error; nothing of it staged.
    expect(after['08']).toMatchObject({ attempts: 1, claimed: false });
    expect(after['08']?.error).toMatch(/source of .* is unreadable/);
    expect(await hoursStaged(e, id)).toEqual(['06', '07', '09']);
    const retried = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'step_retried');
    expect(retried.map((event) => event.detail.key)).toEqual([hourKey('08')]);

    await stopFailing();
    // Having run once, it runs alone: 10:00 (small, never run) stays for its own step.
    expect(await executeStep(e.ctx, stageOf(id, '08'))).toBe('done');
    expect((await statuses(e, id))['10']).toBe('pending');
    expect((await stagesStarted(e, id)).filter((started) => started.hh === '08')).toEqual([{ hh: '08', with: '06', takeover: false }, { hh: '08', with: null, takeover: false }]);

    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);
  }, 60_000);

  it('gives the companions back unrun when the step\'s own hour fails: pending, their attempt not counted, nothing of them staged', async () => {
    const e = await engineWith(SMALL);
    const id = await approvedNight15(e.ctx, 'small stages test');
    const stopFailing = await failStagingOf(e, '06');

    await expect(executeStep(e.ctx, stageOf(id, '06'), { finalAttempt: false })).rejects.toThrow(/source of .* is unreadable/);
    const after = await stages(e, id);
    expect(after['06']).toMatchObject({ status: 'pending', attempts: 1, claimed: false });
    for (const hh of ['07', '08', '09']) expect(after[hh], hh).toEqual({ status: 'pending', attempts: 0, claimed: false, error: null });
    expect(await hoursStaged(e, id)).toEqual([]);
    // They were claimed, and say so in the timeline.
    expect((await stagesStarted(e, id)).filter((started) => started.with === '06').map((started) => started.hh)).toEqual(['07', '08', '09']);

    await stopFailing();
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);
  }, 60_000);

  it('commits no hour of a run a stop caught between two of its hours, and every step of it is skipped', async () => {
    const e = await engineWith(SMALL);
    const id = await approvedNight15(e.ctx, 'small stages test');
    // The run stages 06, 07 and 08, then waits for 09:00's partition lock, held here.
    const holder = await holdPartition(e, '09');
    const run = executeStep(e.ctx, stageOf(id, '06'));
    await waitUntil(() => someoneWaits(e, holder.pid), 'the run to wait for 09:00');
    expect(await statuses(e, id)).toMatchObject({ '06': 'running', '07': 'running', '08': 'running', '09': 'running' });

    await stopBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'wrong step version deployed' });
    await holder.release();
    expect(await run).toBe('not_runnable');
    expect(new Set(Object.values(await statuses(e, id)))).toEqual(new Set(['skipped']));
    expect(await hoursStaged(e, id)).toEqual([]);
    expect((await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'staged')).toEqual([]);
    expect(Object.values(await stages(e, id)).some((facts) => facts.claimed)).toBe(false);
  }, 60_000);

  it('lets another worker take a companion over once the run\'s lease ran out: the run\'s session is ended by the claim\'s name, and no hour is staged twice', async () => {
    const e = await engineWith(SMALL);
    const id = await approvedNight15(e.ctx, 'small stages test');
    const holder = await holdPartition(e, '09');
    const run = executeStep(e.ctx, stageOf(id, '06'), { finalAttempt: false }).then(() => 'finished', (error: unknown) => error);
    await waitUntil(() => someoneWaits(e, holder.pid), 'the run to wait for 09:00');

    // The run's lease runs out (its worker froze, say): 08:00's own job takes it, ending first the session of every
    // claim of the backfill whose lease ran out. The run's companions share its token, so its one session carries
    // their claim's name too, and it holds 06–08's partition locks: without that, the job would wait for them.
    await e.ctx.pool.query(`UPDATE backfill.backfill_steps SET lease_expires_at = clock_timestamp() - interval '1 second'
      WHERE backfill_id = $1 AND kind = 'stage' AND status = 'running'`, [id]);
    const taker = executeStep(e.ctx, stageOf(id, '08'));
    expect(await run).toBeInstanceOf(Error);
    // The run's companions went back unrun; the job may have taken 09:00 with it, which waits for the lock here.
    await holder.release();
    expect(await taker).toBe('done');
    const started = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'step_started' && event.detail.key === hourKey('08'));
    expect(started.map((event) => event.detail.with ?? null)).toEqual([hourKey('06'), null]);
    expect(started[1]?.detail.endedSessions).toHaveLength(1);
    expect(Object.values(await stages(e, id)).some((facts) => facts.status === 'running' || facts.claimed)).toBe(false);

    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
    expect(await dayTotal(e)).toBe(NIGHT_15.correctedTotal);
    // Every hour staged once: the run committed none of its hours.
    const staged = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'staged').map((event) => event.detail.partition);
    expect(staged).toHaveLength(HOURS.length);
    expect(new Set(staged).size).toBe(HOURS.length);
  }, 60_000);
});
