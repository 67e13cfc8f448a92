// Which steps may run: the dispatcher's look (listRunnableSteps) and a claim's locked check (lockStepForClaim)
// against the step graph's predicate as it was first written, one subquery per wait, each reading the backfill's
// steps and targets again. The statements now read each backfill's open steps once and a step's own target by
// its hour (src/db/steps.ts, openOfBackfills and targetOfStep): on random states of a real backfill (its state,
// every step's status and lease, every target's wave and staged table, a rollback's steps beside the run's)
// both must name the same steps; the dispatcher's look, the first of them in its window (DISPATCH_WINDOW).
// Real PostgreSQL, on a database of its own.
// Replay a failure: FC_SEED=<seed> npx vitest run test/db/runnableSteps.test.ts

import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackfillState } from '../../src/core/states.js';
import { ROLLBACK_SUFFIX, SETTLED, STEP_GRAPH, STEP_KINDS, StepStatus, type StepKind, type StepPhase, type WaitRule } from '../../src/core/lifecycle/stepGraph.js';
import type { PoolClient } from '../../src/db/pool.js';
import { migrate } from '../../src/db/migrate.js';
import { insertRollbackSteps, listRunnableSteps, lockStepForClaim } from '../../src/db/steps.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

const SEED = Number(process.env.FC_SEED?.trim() || Math.floor(Math.random() * 2 ** 31));
const RUNS = Number(process.env.FC_RUNS?.trim() || 60);

// ---- the predicate as first written (src/db/steps.ts before it read each backfill once) -------------------------

const settled = (alias: string) => `${alias}.status IN (${SETTLED.map((status) => `'${status}'`).join(', ')})`;
const HOUR_KEY = (alias: string) => `to_char(${alias}.partition_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24":00Z"')`;
const PHASE: Record<StepPhase, string> = {
  forward: `(s.step_key <> 'rollback' AND s.step_key NOT LIKE '%${ROLLBACK_SUFFIX}')`,
  rollback: `(s.step_key = 'rollback' OR s.step_key LIKE '%${ROLLBACK_SUFFIX}')`,
};
const WAITS: Record<WaitRule, string> = {
  'own stage': `NOT EXISTS (SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind = 'stage' AND r.step_key = s.step_key AND NOT ${settled('r')})`,
  'every stage': `NOT EXISTS (SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind = 'stage' AND NOT ${settled('r')})`,
  'earlier waves': `NOT EXISTS (
    SELECT 1 FROM backfill.backfill_steps p
    JOIN backfill.backfill_targets pt ON pt.backfill_id = p.backfill_id AND p.step_key = ${HOUR_KEY('pt')}
    JOIN backfill.backfill_targets st ON st.backfill_id = s.backfill_id AND s.step_key = ${HOUR_KEY('st')}
    WHERE p.backfill_id = s.backfill_id AND p.kind = 'publish' AND NOT ${settled('p')} AND pt.wave < st.wave)`,
  'every publish': `NOT EXISTS (SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind = 'publish' AND NOT ${settled('r')})`,
  'replays depended on': `NOT EXISTS (
    SELECT 1 FROM backfill.backfill_consumers bc
    JOIN backfill.backfill_steps d ON d.backfill_id = bc.backfill_id AND d.kind = 'replay'
      AND split_part(d.step_key, '@', 1) = ANY (bc.depends_on)
      AND (d.step_key LIKE '%${ROLLBACK_SUFFIX}') = (s.step_key LIKE '%${ROLLBACK_SUFFIX}')
    WHERE bc.backfill_id = s.backfill_id AND bc.consumer = split_part(s.step_key, '@', 1) AND NOT ${settled('d')})`,
  'every rollback replay': `NOT EXISTS (SELECT 1 FROM backfill.backfill_steps r WHERE r.backfill_id = s.backfill_id AND r.kind = 'replay'
    AND r.step_key LIKE '%${ROLLBACK_SUFFIX}' AND NOT ${settled('r')})`,
};
const RUNNABLE = `(${Object.entries(STEP_GRAPH).map(([name, spec]) => {
  const [kind, phase] = name.split(':') as [StepKind, StepPhase];
  return `(s.kind = '${kind}' AND ${PHASE[phase]} AND b.state IN (${spec.runsIn.map((state) => `'${state}'`).join(', ')})${spec.waitsFor.map((rule) => ` AND ${WAITS[rule]}`).join('')})`;
}).join('\n OR ')})`;

/** Every step of the backfill, whether it is one the dispatcher would name, and whether the graph lets it run now. */
async function firstWritten(tx: PoolClient, backfillId: number): Promise<{ kind: StepKind; key: string; status: string; listed: boolean; runnable: boolean }[]> {
  const { rows } = await tx.query<{ kind: StepKind; key: string; status: string; listed: boolean; runnable: boolean }>(
    `SELECT s.kind, s.step_key AS key, s.status,
            (s.status = 'pending' OR (s.status = 'running' AND s.lease_expires_at < clock_timestamp())) AND ${RUNNABLE} AS listed,
            ${RUNNABLE} AS runnable
     FROM backfill.backfill_steps s JOIN backfill.backfills b ON b.id = s.backfill_id
     WHERE s.backfill_id = $1::bigint
     ORDER BY array_position($2::text[], s.kind), s.step_key`, [backfillId, [...STEP_KINDS]]);
  return rows;
}

// ---- random states of one backfill ------------------------------------------------------------------------------

const STATES = Object.values(BackfillState);
const STATUSES = Object.values(StepStatus);

interface Drawn {
  state: (typeof STATES)[number];
  /** Per step (in key order), its status and whether its lease ran out; per target, its wave and whether it is staged apart. */
  steps: { status: (typeof STATUSES)[number]; expired: boolean }[];
  targets: { wave: number; swap: boolean }[];
}

function drawn(steps: number, targets: number): fc.Arbitrary<Drawn> {
  // Mostly settled or pending, as a backfill under way is; every status now and then.
  const status = fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom<(typeof STATUSES)[number]>('done', 'pending') },
    { weight: 1, arbitrary: fc.constantFrom(...STATUSES) },
  );
  return fc.record({
    // Mostly the states whose steps wait on one another.
    state: fc.oneof({ weight: 3, arbitrary: fc.constantFrom<(typeof STATES)[number]>('running', 'replaying', 'rolling_back') }, { weight: 1, arbitrary: fc.constantFrom(...STATES) }),
    steps: fc.array(fc.record({ status, expired: fc.boolean() }), { minLength: steps, maxLength: steps }),
    targets: fc.array(fc.record({ wave: fc.integer({ min: 0, max: 4 }), swap: fc.boolean() }), { minLength: targets, maxLength: targets }),
  });
}

async function apply(tx: PoolClient, backfillId: number, draw: Drawn): Promise<void> {
  await tx.query('UPDATE backfill.backfills SET state = $2::text WHERE id = $1::bigint', [backfillId, draw.state]);
  await tx.query(
    `UPDATE backfill.backfill_steps s SET status = d.status, claim_token = CASE WHEN d.status = 'running' THEN gen_random_uuid() END,
            lease_expires_at = CASE WHEN d.expired THEN clock_timestamp() - interval '1 minute' ELSE clock_timestamp() + interval '1 hour' END
     FROM (SELECT kind, step_key, row_number() OVER (ORDER BY kind, step_key) AS n FROM backfill.backfill_steps WHERE backfill_id = $1::bigint) k
     JOIN unnest($2::text[], $3::boolean[]) WITH ORDINALITY AS d(status, expired, n) ON d.n = k.n
     WHERE s.backfill_id = $1::bigint AND s.kind = k.kind AND s.step_key = k.step_key`,
    [backfillId, draw.steps.map((step) => step.status), draw.steps.map((step) => step.expired)]);
  await tx.query(
    `UPDATE backfill.backfill_targets t SET wave = d.wave, staged_relid = CASE WHEN d.swap THEN 'backfill.backfills'::regclass::oid END
     FROM (SELECT partition_hour, row_number() OVER (ORDER BY partition_hour) AS n FROM backfill.backfill_targets WHERE backfill_id = $1::bigint) k
     JOIN unnest($2::int[], $3::boolean[]) WITH ORDINALITY AS d(wave, swap, n) ON d.n = k.n
     WHERE t.backfill_id = $1::bigint AND t.partition_hour = k.partition_hour`,
    [backfillId, draw.targets.map((target) => target.wave), draw.targets.map((target) => target.swap)]);
}

describe('which steps may run, read once per backfill', () => {
  let engine: TestEngine;
  let backfillId: number;
  let counts: { steps: number; targets: number };

  beforeAll(async () => {
    engine = await createTestEngine();
    backfillId = await approvedNight15(engine.ctx, 'runnable steps test');
    // A rollback's steps beside the run's: their waits are the graph's too.
    await insertRollbackSteps(engine.ctx.pool, backfillId, ROLLBACK_SUFFIX);
    const { rows } = await engine.ctx.pool.query<{ steps: number; targets: number }>(
      `SELECT (SELECT count(*) FROM backfill.backfill_steps WHERE backfill_id = $1::bigint)::int AS steps,
              (SELECT count(*) FROM backfill.backfill_targets WHERE backfill_id = $1::bigint)::int AS targets`, [backfillId]);
    counts = rows[0] ?? { steps: 0, targets: 0 };
  });

  afterAll(async () => {
    await engine.close();
  });

  it('names the steps the predicate as first written names, in the dispatcher\'s look (the first of them, stages last, in its window) and in a claim\'s check', async () => {
    console.log(`runnable steps: FC_SEED=${SEED}`);
    // Several partitions, so that waves and stages wait on one another.
    expect(counts.targets).toBeGreaterThan(2);
    let listed = 0;
    let waiting = 0;
    let clipped = 0;
    await fc.assert(fc.asyncProperty(drawn(counts.steps, counts.targets), fc.integer({ min: 1, max: 12 }), async (draw, window) => {
      const client = await engine.ctx.pool.connect();
      try {
        await client.query('BEGIN');
        await apply(client, backfillId, draw);
        const expected = await firstWritten(client, backfillId);
        const names = (steps: { kind: string; key: string }[]) => steps.map((step) => `${step.kind} ${step.key}`);
        const expectedListed = expected.filter((step) => step.listed);
        expect(names(await listRunnableSteps(client, backfillId, counts.steps))).toEqual(names(expectedListed));
        expect(names((await listRunnableSteps(client, undefined, counts.steps)).filter((step) => step.backfillId === backfillId))).toEqual(names(expectedListed));
        // A look names the first `window` of them, every other kind before the stages; in kind order still.
        const inWindow = new Set(names([...expectedListed.filter((step) => step.kind !== 'stage'), ...expectedListed.filter((step) => step.kind === 'stage')].slice(0, window)));
        const windowed = names(expectedListed).filter((name) => inWindow.has(name));
        expect(names(await listRunnableSteps(client, backfillId, window))).toEqual(windowed);
        expect(names((await listRunnableSteps(client, undefined, window)).filter((step) => step.backfillId === backfillId))).toEqual(windowed);
        if (windowed.length < expectedListed.length) clipped += 1;
        for (const step of expected) {
          const claim = await lockStepForClaim(client, { backfillId, kind: step.kind, key: step.key });
          expect(claim?.runnable, `${step.kind} ${step.key} (${step.status}) in ${draw.state}`).toBe(step.runnable);
        }
        listed += expectedListed.length;
        waiting += expected.filter((step) => !step.runnable && step.status === 'pending' && STEP_GRAPH[`${step.kind}:forward`]?.runsIn.includes(draw.state)).length;
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    }), { seed: SEED, numRuns: RUNS });
    // Both answers were given: steps that may run, and steps that must wait although their state would let them.
    expect(listed).toBeGreaterThan(0);
    expect(waiting).toBeGreaterThan(0);
    // And windows that left runnable steps out of a look.
    expect(clipped).toBeGreaterThan(0);
  });
});

describe('the hour of a stage or a publish (migrations/0030)', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => {
    await engine.close();
  });

  it('is given to the steps of a backfill made before it, and every stage and publish has one, and no other step', async () => {
    const backfillId = await approvedNight15(engine.ctx, 'step hours test');
    const pool = engine.ctx.pool;
    const hours = async () => (await pool.query<{ kind: string; key: string; hour: string | null }>(
      `SELECT kind, step_key AS key, to_char(partition_hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24":00Z"') AS hour
       FROM backfill.backfill_steps WHERE backfill_id = $1::bigint ORDER BY kind, step_key`, [backfillId])).rows;
    const made = await hours();
    // As the database was before the migration: no column, and the migration not applied yet.
    await pool.query('ALTER TABLE backfill.backfill_steps DROP COLUMN partition_hour');
    await pool.query('DELETE FROM public.backfill_bot_migrations WHERE version = 30');
    expect(await migrate(pool)).toEqual([30]);
    const migrated = await hours();
    expect(migrated).toEqual(made);
    const partitionSteps = migrated.filter((step) => step.kind === 'stage' || step.kind === 'publish');
    expect(partitionSteps.length).toBeGreaterThan(2);
    for (const step of migrated) expect(step.hour, `${step.kind} ${step.key}`).toBe(partitionSteps.includes(step) ? step.key : null);
    await expect(pool.query(`UPDATE backfill.backfill_steps SET partition_hour = NULL WHERE backfill_id = $1::bigint AND kind = 'publish'`, [backfillId]))
      .rejects.toThrow(/backfill_steps_hour_of_partition_steps/);
    await expect(pool.query(`UPDATE backfill.backfill_steps SET partition_hour = now() WHERE backfill_id = $1::bigint AND kind = 'watermark'`, [backfillId]))
      .rejects.toThrow(/backfill_steps_hour_of_partition_steps/);
  });
});
