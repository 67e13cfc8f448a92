// The statements a worker runs for every step besides the step's own, prepared under a name so that each
// connection plans them once: the dispatcher's look for runnable steps and a claim's locked check. Each carries
// the step graph's predicate, whose planning (then a dozen subqueries) took 5.5 ms a call where running them took 2.5.
// Read from pg_prepared_statements: the server's own record of what a session prepared and how it planned it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction, type PoolClient } from '../../src/db/pool.js';
import { listRunnableSteps, lockStepForClaim } from '../../src/db/steps.js';
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
