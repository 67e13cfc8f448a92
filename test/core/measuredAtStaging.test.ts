// A publish reads what staging measured (the reconciliation, the live rows counted; by swap, the staged rows'
// checksum too) when nothing live changed since, and measures again when anything did: a row written, updated (even
// to the same values) or deleted by another writer between the stage and the publish. Whichever way it went, what
// the publish recorded must be what one measure of both sides after the commit finds: the saved rows (the
// partition swapped out, or the rows the rewrite deleted) against the live ones, by key, with the live partition's
// snapshot. Night 15 on both shapes of the target, real PostgreSQL; the other writer is a connection of the test,
// committing before the publish starts.

import { afterEach, describe, expect, it } from 'vitest';
import { executeStep } from '../../src/core/procedure.js';
import { rowStoreOf } from '../../src/core/recompute/rowStore.js';
import { keepBaseline } from '../../src/core/recompute/storeTables.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { acceptTargets } from '../../src/db/targets.js';
import { reconcileWithSnapshot } from '../../src/db/reconcile.js';
import { liveSource, runSource, STAGED_RUN, tableSource, type RowSource, type RowStore } from '../../src/db/rowStore.js';
import { approvedNight15, createTestEngine, type TestEngine } from '../support/engine.js';

const NIGHT = '2026-11-15';
const HOURS = ['05', '06', '07', '08', '09', '10'];
const hourKey = (hh: string) => `${NIGHT}T${hh}:00Z`;
const HOUR = '05';
/** Far from the demo's order ids (1e8 + …) and the bench's (1e9 + …). */
const LATE_ORDER_ID = 9_000_000_001;

let engine: TestEngine | undefined;

afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

/** What another writer does to the live hour between its stage and its publish. */
const CHANGES = {
  nothing: [],
  'a row updated': [`UPDATE warehouse.orders SET amount_base = amount_base + 1 WHERE partition_hour = $1 AND order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = $1)`],
  'a row updated to the same values': [`UPDATE warehouse.orders SET amount_base = amount_base WHERE partition_hour = $1 AND order_id = (SELECT max(order_id) FROM warehouse.orders WHERE partition_hour = $1)`],
  'a row deleted': [`DELETE FROM warehouse.orders WHERE partition_hour = $1 AND order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = $1)`],
  'a row written (a late row)': [
    `INSERT INTO warehouse.orders (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
     SELECT $1, ${LATE_ORDER_ID}, 1, merchant_id, 'USD', 10.00, 1, 10.00 FROM warehouse.orders WHERE partition_hour = $1 LIMIT 1`,
  ],
  'a row deleted and written again with its key': [
    `WITH gone AS (DELETE FROM warehouse.orders WHERE partition_hour = $1 AND order_id = (SELECT min(order_id) FROM warehouse.orders WHERE partition_hour = $1) RETURNING *)
     INSERT INTO warehouse.orders SELECT * FROM gone`,
  ],
} as const;

interface Recorded {
  keysMissing: number;
  keysAdded: number;
  keysChanged: number;
  keysDuplicated: number;
  lateRows: number;
  totalBefore: string;
  totalAfter: string;
  rowsAfter: number;
  checksumAfter: string;
  rowsSaved: number;
}

/** What the publish of the hour recorded: its reconciliation, the target's snapshot after, the rows it saved. */
async function recorded(e: TestEngine, id: number): Promise<Recorded> {
  const { rows } = await e.ctx.pool.query<Recorded>(
    `SELECT r.keys_missing AS "keysMissing", r.keys_added AS "keysAdded", r.keys_changed AS "keysChanged", r.keys_duplicated AS "keysDuplicated",
            r.late_rows AS "lateRows", r.total_before::text AS "totalBefore", r.total_after::text AS "totalAfter",
            t.rows_after::int AS "rowsAfter", t.checksum_after AS "checksumAfter", p.rows_saved::int AS "rowsSaved"
     FROM backfill.reconciliations r
     JOIN backfill.backfill_targets t ON t.backfill_id = r.backfill_id AND t.partition_hour = r.partition_hour
     JOIN backfill.preserved_partitions p ON p.backfill_id = r.backfill_id AND p.partition_hour = r.partition_hour
     WHERE r.backfill_id = $1 AND r.generation = $2 AND r.partition_hour = $3 AND r.phase = 'published'`, [id, STAGED_RUN, hourKey(HOUR)]);
  const row = rows[0];
  if (!row) throw new Error('the publish recorded nothing');
  return row;
}

/** Where the publish put the rows it replaced: the partition a swap detached, or the rewrite's saved rows of the run. */
async function savedSource(e: TestEngine, id: number, store: RowStore): Promise<RowSource> {
  const { rows } = await e.ctx.pool.query<{ table: string | null }>(
    'SELECT saved_table AS table FROM backfill.preserved_partitions WHERE backfill_id = $1 AND partition_hour = $2', [id, hourKey(HOUR)]);
  const table = rows[0]?.table;
  return table ? tableSource(store, table) : runSource(store, `bf_orders."p20261115${HOUR}_b${id}_g1_saved"`);
}

/** One measure of both sides after the commit: the saved rows against the live ones. */
async function measuredAfter(e: TestEngine, id: number): Promise<Recorded> {
  const pipeline = await requirePipeline(e.ctx.pool, 'orders');
  const store = await rowStoreOf(e.ctx.pool, pipeline);
  const run: [number, number, Date] = [id, STAGED_RUN, new Date(hourKey(HOUR))];
  const m = await reconcileWithSnapshot(e.ctx.pool, store, run, await savedSource(e, id, store), liveSource(store));
  const { rows: late } = await e.ctx.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM warehouse.orders WHERE order_id = $1', [LATE_ORDER_ID]);
  return { ...m.reconciliation, lateRows: late[0]?.n ?? 0, rowsAfter: m.after.rows, checksumAfter: m.after.checksum, rowsSaved: m.beforeRows };
}

describe.each([
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
] as const)('a publish by $by ($shape target) reads what staging measured only while nothing live changed since', ({ scenario, by }) => {
  it.each(Object.entries(CHANGES))('%s between the stage and the publish', async (change, statements) => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'measured at staging');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    for (const statement of statements) expect((await e.ctx.pool.query(statement, [hourKey(HOUR)])).rowCount).toBe(1);

    const publishStatements: string[] = [];
    e.ctx.hooks = { afterStatement: async (_backfillId, _hour, statement) => { publishStatements.push(statement); } };
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey(HOUR) })).toBe('done');
    e.ctx.hooks = undefined;
    const { rows: published } = await e.ctx.pool.query<{ by: string }>(
      `SELECT detail ->> 'publishedBy' AS by FROM backfill.events WHERE backfill_id = $1 AND kind = 'recomputed'`, [id]);
    expect(published).toEqual([{ by }]);

    const after = await measuredAfter(e, id);
    expect(await recorded(e, id)).toEqual({ ...after, keysDuplicated: 0 });
    if (change === 'a row written (a late row)') expect(after.lateRows).toBe(1);
    if (change === 'a row deleted') expect(after.rowsSaved).toBe((await recordedAtStaging(e, id)).liveRows - 1);

    // The way it went: both sides are joined again (the reconciliation's statement), and late rows looked for
    // (by swap, carried into the staged table; by rewrite, among the rows deleted), only when something changed.
    expect(publishStatements.some((statement) => statement.includes(') a FULL JOIN (SELECT t.* FROM'))).toBe(change !== 'nothing');
    const carry = by === 'swap' ? /^INSERT INTO \S*p2026111505_b\d+_g1"? \(/ : /late_rows AS \(\s+INSERT INTO/;
    expect(publishStatements.some((statement) => carry.test(statement))).toBe(change !== 'nothing');
    // Told by the snapshot staging read the live rows in (by swap liveUnchangedSince, by rewrite saveAndDeleteSince),
    // not by the baseline's row versions.
    expect(publishStatements.filter((statement) => statement.includes('age(xid(')).length).toBe(1);
    expect(publishStatements.some((statement) => statement.includes('AS changed'))).toBe(false);
  });
});

// Another writer's transaction that began before the stage and committed after it: staging did not see its change,
// yet a version it wrote may carry a transaction id below the ones that committed before the stage. Its update keeps
// the partition's count, so only the row versions tell. In a savepoint its rows carry the subtransaction's id, which
// a snapshot's list of running transactions does not hold (pg_visible_in_snapshot would call it visible).
const RUNNING_WRITERS = {
  'an update': ['BEGIN', CHANGES['a row updated'][0], 'COMMIT'],
  'an update in a savepoint': ['BEGIN', 'SAVEPOINT before_stage', CHANGES['a row updated'][0], 'RELEASE SAVEPOINT before_stage', 'COMMIT'],
} as const;

describe.each([
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
] as const)('a publish by $by ($shape target) with another writer running while the partition was staged', ({ scenario }) => {
  it.each(Object.entries(RUNNING_WRITERS))('%s, begun before the stage and committed after it, is measured again', async (_writer, statements) => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'measured at staging');
    const writer = await e.ctx.pool.connect();
    try {
      const [begin, ...rest] = statements;
      await writer.query(begin);
      // Everything but the commit, before the stage: the writer's ids are taken and its update is not committed.
      for (const statement of rest.slice(0, -1)) await writer.query(statement, statement.includes('$1') ? [hourKey(HOUR)] : []);
      for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
      await writer.query('COMMIT');
    } finally {
      writer.release();
    }
    const publishStatements: string[] = [];
    e.ctx.hooks = { afterStatement: async (_backfillId, _hour, statement) => { publishStatements.push(statement); } };
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey(HOUR) })).toBe('done');
    e.ctx.hooks = undefined;
    const after = await measuredAfter(e, id);
    expect(await recorded(e, id)).toEqual({ ...after, keysDuplicated: 0 });
    expect(after.rowsSaved).toBe((await recordedAtStaging(e, id)).liveRows);
    expect(publishStatements.some((statement) => statement.includes(') a FULL JOIN (SELECT t.* FROM'))).toBe(true);
  });
});

describe.each([
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
] as const)('a publish by $by ($shape target) of a partition staged before staging kept its snapshot (migrations/0029)', ({ scenario }) => {
  it.each(['nothing', 'a row updated'] as const)('%s between the stage and the publish: compared with the baseline as before', async (change) => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'measured at staging');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    expect((await e.ctx.pool.query(`UPDATE backfill.reconciliations SET live_snapshot_xmin = NULL WHERE backfill_id = $1 AND phase = 'staged'`, [id])).rowCount).toBe(HOURS.length);
    await keptWholeAsBefore0029(e, id);
    for (const statement of CHANGES[change]) expect((await e.ctx.pool.query(statement, [hourKey(HOUR)])).rowCount).toBe(1);
    const publishStatements: string[] = [];
    e.ctx.hooks = { afterStatement: async (_backfillId, _hour, statement) => { publishStatements.push(statement); } };
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey(HOUR) })).toBe('done');
    e.ctx.hooks = undefined;
    expect(await recorded(e, id)).toEqual({ ...(await measuredAfter(e, id)), keysDuplicated: 0 });
    // The baseline's keys and row versions were read (versionsAgainstBaseline), not the snapshot's xmin.
    expect(publishStatements.some((statement) => statement.includes('AS changed'))).toBe(true);
    expect(publishStatements.some((statement) => statement.includes('age(xid('))).toBe(false);
    expect(publishStatements.some((statement) => statement.includes(') a FULL JOIN (SELECT t.* FROM'))).toBe(change !== 'nothing');
  });
});

/** The baselines as staging kept them before it kept a snapshot: every live key of the hour with its row version. */
async function keptWholeAsBefore0029(e: TestEngine, id: number): Promise<void> {
  const client = await e.ctx.pool.connect();
  try {
    const store = await rowStoreOf(client, await requirePipeline(client, 'orders'));
    for (const hh of HOURS) await keepBaseline(client, store, [id, STAGED_RUN, new Date(hourKey(hh))], liveSource(store), { rowVersions: true });
  } finally {
    client.release();
  }
}

// A transaction older than the live rows, running from before the stage to after the publish: another database's on
// the same server, a session holding a row FOR UPDATE. Staging's snapshot xmin is the server's oldest running
// transaction, so every row written after it began is at or above that xmin; staging keeps the writers of those it
// read (migrations/0031), and the publish counts them as seen. Another writer's change still tells.
const BESIDE_AN_OLDER_TRANSACTION = {
  'nothing changed': { after: [], running: false, measuredAgain: false },
  'a row updated after the stage': { after: CHANGES['a row updated'], running: false, measuredAgain: true },
  'a writer running through the stage, in a savepoint': { after: [], running: true, measuredAgain: true },
} as const;

describe.each([
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
] as const)('a publish by $by ($shape target) beside a transaction older than the live rows', ({ scenario }) => {
  it.each(Object.entries(BESIDE_AN_OLDER_TRANSACTION))('%s: measured again only when something changed', async (_case, { after: changes, running, measuredAgain }) => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'measured at staging');
    const older = await e.ctx.pool.connect();
    const writer = await e.ctx.pool.connect();
    try {
      await older.query('BEGIN');
      const { rows: [holding] } = await older.query<{ xid: string }>('SELECT pg_current_xact_id()::text AS xid');
      // Every live row of the hour written again (to the same values) after the older transaction began.
      const rewritten = await e.ctx.pool.query('UPDATE warehouse.orders SET amount_base = amount_base WHERE partition_hour = $1', [hourKey(HOUR)]);
      expect(rewritten.rowCount).toBeGreaterThan(0);
      if (running) {
        await writer.query('BEGIN');
        await writer.query('SAVEPOINT before_stage');
        expect((await writer.query(CHANGES['a row updated'][0], [hourKey(HOUR)])).rowCount).toBe(1);
        await writer.query('RELEASE SAVEPOINT before_stage');
      }
      for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
      if (running) await writer.query('COMMIT');
      for (const statement of changes) expect((await e.ctx.pool.query(statement, [hourKey(HOUR)])).rowCount).toBe(1);

      // Staging read the rewritten rows above its snapshot's xmin (the older transaction's) and kept their one writer.
      const { rows: atStaging } = await e.ctx.pool.query<{ xmin: string; seen: string[] | null }>(
        `SELECT live_snapshot_xmin::text AS xmin, live_versions_seen::text[] AS seen FROM backfill.reconciliations
         WHERE backfill_id = $1 AND partition_hour = $2 AND phase = 'staged'`, [id, hourKey(HOUR)]);
      expect(BigInt(atStaging[0]?.xmin ?? '0')).toBeLessThanOrEqual(BigInt(holding?.xid ?? '-1'));
      expect(atStaging[0]?.seen).toHaveLength(1);

      const publishStatements: string[] = [];
      e.ctx.hooks = { afterStatement: async (_backfillId, _hour, statement) => { publishStatements.push(statement); } };
      expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey(HOUR) })).toBe('done');
      e.ctx.hooks = undefined;
      expect(publishStatements.some((statement) => statement.includes(') a FULL JOIN (SELECT t.* FROM'))).toBe(measuredAgain);
      expect(await recorded(e, id)).toEqual({ ...(await measuredAfter(e, id)), keysDuplicated: 0 });
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      writer.release();
      await older.query('ROLLBACK');
      older.release();
    }
  });
});

describe('a publish by rewrite (plain target) with another writer beside it', () => {
  it('measures both sides when a row another writer committed after its delete is live beside the rows it wrote', async () => {
    engine = await createTestEngine('month-end');
    const e = engine;
    const id = await approvedNight15(e.ctx, 'measured at staging');
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    const publishStatements: string[] = [];
    e.ctx.hooks = {
      afterStatement: async (_backfillId, _hour, statement) => {
        publishStatements.push(statement);
        // A key of its own, so it waits for nothing the publish holds.
        if (statement.startsWith('WITH gone AS (DELETE')) await e.ctx.pool.query(CHANGES['a row written (a late row)'][0], [hourKey(HOUR)]);
      },
    };
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey(HOUR) })).toBe('done');
    e.ctx.hooks = undefined;
    const after = await measuredAfter(e, id);
    expect(after.lateRows).toBe(1);
    // Not carried (the delete did not see it): live beside the written rows, in the snapshot, not among the saved.
    expect(await recorded(e, id)).toEqual({ ...after, keysDuplicated: 0, lateRows: 0 });
    expect(publishStatements.some((statement) => statement.includes(') a FULL JOIN (SELECT t.* FROM'))).toBe(true);
  });
});

// The baseline holds only the live keys the staged rows lack (measureStaged): a key the step no longer produces is
// one of them, so a writer's change to its live row after the stage is not a late row and the publish drops it as it
// would have; a new key written after the stage is a late row and is carried.
describe.each([
  { shape: 'partitioned by hour', scenario: 'month-end-partitioned', by: 'swap' },
  { shape: 'plain', scenario: 'month-end', by: 'rewrite' },
] as const)('a publish by $by ($shape target) of a partition whose step dropped a live key', ({ scenario }) => {
  it('drops that key though another writer changed its row after the stage, and carries a key written since', async () => {
    engine = await createTestEngine(scenario);
    const e = engine;
    const id = await approvedNight15(e.ctx, 'measured at staging');
    const dropped = (await e.ctx.pool.query<{ id: string }>(
      `DELETE FROM warehouse.orders_raw WHERE order_id = (SELECT min(order_id) FROM warehouse.orders_raw WHERE event_hour = $1) RETURNING order_id::text AS id`, [hourKey(HOUR)])).rows[0]?.id;
    expect(dropped).toBeDefined();
    for (const hh of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: hourKey(hh) })).toBe('done');
    const staged = await e.ctx.pool.query<{ missing: number }>(
      `SELECT keys_missing AS missing FROM backfill.reconciliations WHERE backfill_id = $1 AND partition_hour = $2 AND phase = 'staged'`, [id, hourKey(HOUR)]);
    expect(staged.rows).toEqual([{ missing: 1 }]);
    const baseline = await e.ctx.pool.query<{ id: string }>(`SELECT order_id::text AS id FROM bf_orders."p20261115${HOUR}_b${id}_g1_baseline"`);
    expect(baseline.rows).toEqual([{ id: dropped }]);
    // A key lost is outside the envelope: accepted by name, as an operator would.
    await acceptTargets(e.ctx.pool, id, [new Date(hourKey(HOUR))], 'U0TEST', 'the step drops this order now');
    expect((await e.ctx.pool.query(`UPDATE warehouse.orders SET amount_base = amount_base + 1 WHERE partition_hour = $1 AND order_id = $2`, [hourKey(HOUR), dropped])).rowCount).toBe(1);
    expect((await e.ctx.pool.query(CHANGES['a row written (a late row)'][0], [hourKey(HOUR)])).rowCount).toBe(1);

    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: hourKey(HOUR) })).toBe('done');
    const live = await e.ctx.pool.query<{ id: string }>(
      'SELECT order_id::text AS id FROM warehouse.orders WHERE partition_hour = $1 AND order_id = ANY ($2::bigint[]) ORDER BY 1', [hourKey(HOUR), [dropped, LATE_ORDER_ID]]);
    expect(live.rows).toEqual([{ id: String(LATE_ORDER_ID) }]);
    const after = await measuredAfter(e, id);
    expect(after.lateRows).toBe(1);
    expect(await recorded(e, id)).toEqual({ ...after, keysDuplicated: 0 });
    expect(after.keysMissing).toBe(1);
  });
});

async function recordedAtStaging(e: TestEngine, id: number): Promise<{ liveRows: number }> {
  const { rows } = await e.ctx.pool.query<{ liveRows: number }>(
    `SELECT live_rows::int AS "liveRows" FROM backfill.reconciliations WHERE backfill_id = $1 AND partition_hour = $2 AND phase = 'staged'`, [id, hourKey(HOUR)]);
  return rows[0] ?? { liveRows: -1 };
}
