// The kernel's two moves: transition, into an active state, and finishBackfill, the one way into a finished
// state, which files what the backfill cost in the same transaction. A finishing move made by transition would
// leave a finished backfill with no cost on its log row: transition refuses it, before touching anything.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS, finishBackfill, transition, type BackfillEvent } from '../../src/core/lifecycle/stateMachine.js';
import { ACTIVE_STATES, BackfillState, isFinished } from '../../src/core/states.js';
import { withTransaction } from '../../src/db/pool.js';
import { approvedNight15, countRows, createTestEngine, type TestEngine } from '../support/engine.js';

const FINISHED = Object.values(BackfillState).filter((state) => !ACTIVE_STATES.includes(state));
const ALL_EVENTS = Object.keys(EVENTS) as BackfillEvent[];
const finishing = (event: BackfillEvent) => isFinished(EVENTS[event].to);

describe('the events', () => {
  it('move every state somewhere but the two a backfill ends in for good, and reach every state but the first', () => {
    const left = new Set<string>(ALL_EVENTS.flatMap((event) => EVENTS[event].from));
    const entered = new Set(ALL_EVENTS.map((event) => EVENTS[event].to));
    expect(Object.values(BackfillState).filter((state) => !left.has(state)).toSorted()).toEqual(['cancelled', 'rolled_back']);
    // announced is entered by start, which creates the backfill, and by release.
    expect(Object.values(BackfillState).filter((state) => !entered.has(state))).toEqual([]);
    expect(ALL_EVENTS.filter(finishing).toSorted()).toEqual(['cancel', 'fail', 'finish', 'restore', 'stop']);
  });
});

describe('finishing a backfill', () => {
  let engine: TestEngine;
  let id: number;
  beforeAll(async () => {
    engine = await createTestEngine('month-end');
    id = await approvedNight15(engine.ctx, 'the moves');
  });
  afterAll(async () => engine.close());

  it('is finishBackfill\'s alone: transition refuses every event into a finished state, and finishBackfill every other', async () => {
    expect(FINISHED.toSorted()).toEqual(['cancelled', 'done', 'failed', 'rolled_back', 'stopped']);
    expect(FINISHED.every(isFinished)).toBe(true);
    for (const event of ALL_EVENTS.filter(finishing)) {
      await expect(withTransaction(engine.ctx.pool, (tx) => transition(tx, { backfillId: id, event, actor: 'U07TEST' })))
        .rejects.toThrow(`${event} moves it to ${EVENTS[event].to}, which finishes it, and only finishBackfill makes that move`);
    }
    for (const event of ALL_EVENTS.filter((e) => !finishing(e))) {
      await expect(withTransaction(engine.ctx.pool, (tx) => finishBackfill(tx, { backfillId: id, event, actor: 'U07TEST' }))).rejects.toThrow('which is not a state it finishes in');
    }
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'state_changed' AND detail->>'to' = ANY($2)`, [id, FINISHED])).toBe(0);
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfills WHERE id = $1 AND state = $2', [id, 'running'])).toBe(1);
  });

  it('files the cost in the move\'s own transaction', async () => {
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfill_costs WHERE backfill_id = $1', [id])).toBe(0);
    const moved = await withTransaction(engine.ctx.pool, (tx) => finishBackfill(tx, { backfillId: id, event: 'stop', actor: 'U07TEST', set: { stop_reason: 'test', stopped_by: 'U07TEST', finished_at: new Date() } }));
    expect(moved).toBe(true);
    const sameTx = await engine.ctx.pool.query<{ same: boolean }>(
      `SELECT b.xmin = c.xmin AS same FROM backfill.backfills b JOIN backfill.backfill_costs c ON c.backfill_id = b.id WHERE b.id = $1`, [id]);
    expect(sameTx.rows).toEqual([{ same: true }]);
  });
});
