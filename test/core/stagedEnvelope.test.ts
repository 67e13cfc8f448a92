import { afterEach, describe, expect, it } from 'vitest';
import { executeStep } from '../../src/core/procedure.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';
import { storedRows } from '../support/storedRows.js';

// The envelope (the staged rows against the rows the plan previewed) is measured by staging's one statement and
// kept with the staged reconciliation (migrations/0026); the publish goes by those figures instead of joining the
// staged rows and the plan's again. A partition staged before they were kept is measured at its publish.

const CANARY = '2026-11-15T05:00Z';

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function stagedEnvelope(e: TestEngine, id: number) {
  const staged = await storedRows(e.ctx.pool, 'staged', 's');
  const { rows } = await e.ctx.pool.query<{ planRows: number | null; lost: number | null; added: number | null; stagedRows: number | null; staged: number; planned: number;
    knownMatches: boolean; totalMatches: boolean; }>(
    `SELECT r.plan_rows AS "planRows", r.plan_lost AS lost, r.plan_added AS added, r.staged_rows AS "stagedRows",
            (SELECT count(*)::int FROM ${staged} WHERE s.bf_backfill = r.backfill_id AND s.partition_hour = r.partition_hour) AS staged,
            (SELECT count(*)::int FROM bf_orders.expected x WHERE x.bf_backfill = r.backfill_id AND x.partition_hour = r.partition_hour) AS planned,
            r.staged_known_total = r.plan_total AS "knownMatches",
            r.staged_total = (SELECT sum(s.amount_base) FROM ${staged} WHERE s.bf_backfill = r.backfill_id AND s.partition_hour = r.partition_hour) AS "totalMatches"
     FROM backfill.reconciliations r WHERE r.backfill_id = $1 AND r.partition_hour = $2 AND r.phase = 'staged'`, [id, CANARY]);
  return rows[0];
}

/** The plan's figure for one of the canary's rows, moved by a cent: what its publish would see if it joined them again. */
async function movePlannedCent(e: TestEngine, id: number): Promise<void> {
  const moved = await e.ctx.pool.query(
    `UPDATE bf_orders.expected SET bf_measure = bf_measure + 0.01
     WHERE bf_backfill = $1 AND partition_hour = $2 AND order_id = (SELECT min(order_id) FROM bf_orders.expected WHERE bf_backfill = $1 AND partition_hour = $2)`, [id, CANARY]);
  expect(moved.rowCount).toBe(1);
}

describe('the envelope, measured at staging', () => {
  it('is kept with the staged reconciliation, and the publish goes by it without reading the plan\'s rows again', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'envelope test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: CANARY })).toBe('done');
    const kept = await stagedEnvelope(e, id);
    expect(kept).toMatchObject({ lost: 0, added: 0, knownMatches: true, totalMatches: true });
    expect(kept?.planRows).toBeGreaterThan(0);
    expect(kept?.planRows).toBe(kept?.planned);
    expect(kept?.stagedRows).toBe(kept?.staged);

    // Were the publish to join the plan's rows again, the cent would breach the envelope.
    await movePlannedCent(e, id);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: CANARY })).toBe('done');
  });

  it('is measured at the publish of a partition staged before it was kept', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'envelope test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: CANARY })).toBe('done');
    await e.ctx.pool.query(
      `UPDATE backfill.reconciliations SET plan_lost = NULL, plan_added = NULL, plan_rows = NULL, plan_total = NULL, staged_known_total = NULL, staged_rows = NULL, staged_total = NULL
       WHERE backfill_id = $1 AND partition_hour = $2 AND phase = 'staged'`, [id, CANARY]);
    await movePlannedCent(e, id);
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: CANARY })).toBe('blocked');
    const { rows } = await e.ctx.pool.query<{ state: string; reason: string }>('SELECT state, paused_reason AS reason FROM backfill.backfills WHERE id = $1', [id]);
    expect(rows[0]?.state).toBe('paused');
    expect(rows[0]?.reason).toMatch(/^2026-11-15 05:00: the staged total over the planned rows is [\d.]+, not the announced [\d.]+$/);
  });
});
