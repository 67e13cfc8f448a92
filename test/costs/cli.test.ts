import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { loadBackfillCost } from '../../src/core/file/costs.js';
import { formatCount, formatDuration } from '../../src/views/costs.js';
import { runCli } from '../support/cli.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

describe('backfill costs --since, in a terminal', () => {
  let engine: TestEngine;
  let backfillId: number;
  const cli = (...args: string[]) => runCli(engine, {}, ...args);
  /** Everything a command could have changed: the timeline, the log rows and their costs. */
  const state = async () => (await engine.ctx.pool.query(
    `SELECT (SELECT count(*) FROM backfill.events)::int AS events, (SELECT count(*) FROM backfill.backfills)::int AS backfills,
            (SELECT count(*) FROM backfill.backfill_costs)::int AS costs, (SELECT max(filed_at) FROM backfill.backfill_costs) AS filed`)).rows[0];

  beforeAll(async () => {
    engine = await createTestEngine();
    backfillId = await approvedNight15(engine.ctx, 'owners agreed in the incident call');
    expect((await runUntilSettled(engine.ctx, backfillId, () => undefined, engine.notifier)).backfill.state).toBe('done');
  });
  afterAll(async () => engine.close());

  it('prints the quarter of the run with the cost the log row filed', async () => {
    const cost = await loadBackfillCost(engine.ctx.pool, backfillId);
    const { rows } = await engine.ctx.pool.query<{ quarter: string }>(`SELECT to_char(announced_at AT TIME ZONE 'UTC', 'YYYY-"Q"Q') AS quarter FROM backfill.backfills WHERE id = $1`, [backfillId]);
    const { code, out } = await cli('costs', '--since', '2026-01-01');
    expect(code).toBe(0);
    expect(out).toContain('What backfills cost since 2026-01-01');
    const line = out.split('\n').find((l) => l.startsWith(rows[0]?.quarter ?? '?'));
    expect(line?.split(/\s{2,}/)).toEqual([
      rows[0]?.quarter, 'orders', '1', '6', formatCount(cost?.rowsRewritten ?? -1), '3', '3',
      formatDuration(cost?.ackWaitMs ?? -1), formatDuration(cost?.ackWaitMs ?? -1), formatDuration(cost?.computeMs ?? -1), '1',
    ]);
  });

  it('refuses a --since that is not a day, naming the right shape, before it opens the database', async () => {
    const before = await state();
    const { code, out } = await cli('costs', '--since', '2026-13-01');
    expect(code).toBe(1);
    expect(out).toContain('`2026-13-01` is not a day of the calendar; write it as YYYY-MM-DD');
    expect(out).toContain('Usage: backfill costs --since <YYYY-MM-DD>');
    // The summary line is what an opened backend prints first: the refusal came before it.
    expect(out).not.toMatch(/PostgreSQL|BullMQ/);
    expect(await state()).toEqual(before);
    expect((await cli('costs')).out).toContain('Missing or extra arguments. Usage: backfill costs --since <YYYY-MM-DD>');
  });
});
