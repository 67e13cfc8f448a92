// The statements a worker runs for every step besides the step's own, prepared under a name so that each
// connection plans them once: the dispatcher's look for runnable steps and a claim's locked check. Each carries
// the step graph's predicate, whose planning (then a dozen subqueries) took 5.5 ms a call where running them took 2.5.
// Read from pg_prepared_statements: the server's own record of what a session prepared and how it planned it.
// Besides those, the bot's own statements of every step (its reads of the backfill, pipeline and target, its
// bookkeeping writes, its claim and finish: src/db/prepared.ts), named after their fixed texts; never a text that
// varies with a run, a pipeline or an hour, which would grow every connection's statements without bound.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction, type PoolClient } from '../../src/db/pool.js';
import { requireBackfill } from '../../src/db/backfills.js';
import { preparedTexts } from '../../src/db/prepared.js';
import { listRunnableSteps, lockStepForClaim } from '../../src/db/steps.js';
import { executeStep } from '../../src/core/procedure.js';
import { stagePartition } from '../../src/core/recompute/stagePublish.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

let engine: TestEngine;
let backfillId: number;

beforeAll(async () => {
  engine = await createTestEngine();
  backfillId = await approvedNight15(engine.ctx, 'prepared statements test');
});

afterAll(async () => {
  await engine.close();
});

interface Prepared { name: string; generic: number; custom: number }

async function preparedOn(client: PoolClient): Promise<Prepared[]> {
  const { rows } = await client.query<Prepared>(
    `SELECT name, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name LIKE 'backfill\\_%' ORDER BY name`);
  return rows;
}

describe('a step\'s fixed statements, planned once per connection', () => {
  it('prepares the look for runnable steps (of a backfill, and of all) and the claim\'s check under their names, and runs them by a kept plan', async () => {
    const client = await engine.ctx.pool.connect();
    try {
      const runs = 8;
      for (let i = 0; i < runs; i += 1) {
        expect((await listRunnableSteps(client, backfillId)).map((step) => step.kind)).toContain('stage');
        await listRunnableSteps(client);
      }
      const [stage] = await listRunnableSteps(client, backfillId);
      if (!stage) throw new Error('no runnable stage');
      for (let i = 0; i < runs; i += 1) {
        await client.query('BEGIN');
        expect((await lockStepForClaim(client, stage))?.runnable).toBe(true);
        await client.query('ROLLBACK');
      }
      // A claim's check is prepared per step kind (this connection may have checked an announcement's before).
      const ran = ['backfill_lock_step_for_claim_stage', 'backfill_runnable_steps', 'backfill_runnable_steps_of'];
      const prepared = (await preparedOn(client)).filter((p) => ran.includes(p.name));
      expect(prepared.map((p) => p.name)).toEqual(ran);
      // After its first few runs (five custom plans), PostgreSQL keeps one generic plan of each: no more planning.
      for (const statement of prepared) expect(statement.generic, statement.name).toBeGreaterThan(0);
    } finally {
      client.release();
    }
  });

  it('gives the same steps through a transaction of the pool as through a connection that prepared them before', async () => {
    const fresh = await withTransaction(engine.ctx.pool, (tx) => listRunnableSteps(tx, backfillId));
    const client = await engine.ctx.pool.connect();
    try {
      expect(await listRunnableSteps(client, backfillId)).toEqual(fresh);
      expect((await listRunnableSteps(client)).filter((step) => step.backfillId === backfillId)).toEqual(fresh);
    } finally {
      client.release();
    }
  });
});

describe('the statements of every step, named after their fixed texts', () => {
  async function preparedBySelf(client: PoolClient): Promise<(Prepared & { statement: string })[]> {
    const { rows } = await client.query<Prepared & { statement: string }>(
      `SELECT name, statement, generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name LIKE 'backfill\\_s\\_%' ORDER BY name`);
    return rows;
  }

  it('stages a partition with its reads and bookkeeping prepared on the connection, each planned no more once it has run a few times', async () => {
    const backfill = await requireBackfill(engine.ctx.pool, backfillId);
    const client = await engine.ctx.pool.connect();
    try {
      const runs = 7;
      for (let i = 0; i < runs; i += 1) {
        await client.query('BEGIN');
        expect(await stagePartition(client, backfill, backfill.firstHour, { swapMinRows: 0 })).toBe('staged');
        await client.query('ROLLBACK');
      }
      const prepared = await preparedBySelf(client);
      const ranBy = (fragment: string) => prepared.filter((p) => p.statement.includes(fragment));
      // The pipeline, the target's columns (a catalog query), the timeline (recordEvent), the target's and the reconciliation's rows.
      for (const fragment of ['estimate_sql AS "estimateSql", source_shards_sql', 'FROM pg_attribute a', 'VALUES ($1::bigint, $2::text, $3::text, $4::jsonb',
        "UPDATE backfill.backfill_targets SET status = 'staged'", 'INSERT INTO backfill.reconciliations']) {
        const [statement, ...others] = ranBy(fragment);
        expect(statement, fragment).toBeDefined();
        expect(others, fragment).toEqual([]);
        // Planned at most five times (custom plans), then one generic plan kept: the rest ran with no planning.
        expect(statement?.custom, fragment).toBeLessThanOrEqual(5);
        expect(statement?.generic, fragment).toBeGreaterThan(0);
      }
    } finally {
      client.release();
    }
  });

  it('names no text tied to a run, a pipeline or an hour, through a whole backfill', async () => {
    for (;;) {
      const runnable = await listRunnableSteps(engine.ctx.pool, backfillId);
      if (runnable.length === 0) break;
      for (const step of runnable) await executeStep(engine.ctx, step);
    }
    expect((await requireBackfill(engine.ctx.pool, backfillId)).state).toBe('done');
    const texts = preparedTexts();
    // The steps named the texts they run: the claim, the finish and the timeline at least.
    for (const fragment of ["SET status = 'running', claim_token = gen_random_uuid()", 'WITH finished AS (', 'VALUES ($1::bigint, $2::text, $3::text, $4::jsonb']) {
      expect(texts.filter((text) => text.includes(fragment)), fragment).toHaveLength(1);
    }
    // No store table of the pipeline (bf_orders), no target (warehouse.), no run's own table (_b<id>), no hour.
    const varying = texts.filter((text) => /bf_orders|warehouse\.|_b\d+|2026-11/.test(text));
    expect(varying).toEqual([]);
  });
});
