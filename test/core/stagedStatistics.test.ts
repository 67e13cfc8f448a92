// The staged table's statistics at a lower target (analyzeStagedTable), against a full ANALYZE, by the plans of
// the statements that follow it: the publish's and a reader's.
// Real PostgreSQL, on a database of its own with a target built here (no demo world).

import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { explainingPool, type CapturedPlan } from '../../bench/autoExplain.js';
import { snapshotPartition } from '../../src/db/partitions.js';
import type { Pipeline } from '../../src/db/pipelines.js';
import { reconcileByKey } from '../../src/db/reconcile.js';
import { preferHashJoins, tableSource, type RowStore } from '../../src/db/rowStore.js';
import { analyzeStagedTable, carryLateRowsIntoStaged, keepKeysIn } from '../../src/db/swap.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

const HOUR = new Date('2026-11-02T05:00:00Z');
const NEXT = new Date('2026-11-02T06:00:00Z');
const RUN: [number, number, Date] = [1, 1, HOUR];

/** A target shaped like the demo's warehouse.orders, partitioned by hour, in a schema of its own. */
const TARGET = `CREATE SCHEMA w;
  CREATE TABLE w.orders (
    partition_hour timestamptz NOT NULL, order_id bigint NOT NULL, shard smallint NOT NULL, merchant_id integer NOT NULL,
    currency text NOT NULL, amount_local numeric(14, 2) NOT NULL, fx_rate numeric(12, 6) NOT NULL, amount_base numeric(14, 2) NOT NULL,
    PRIMARY KEY (partition_hour, order_id)) PARTITION BY RANGE (partition_hour);
  CREATE TABLE w.orders_p2026110205 PARTITION OF w.orders FOR VALUES FROM ('2026-11-02T05:00Z') TO ('2026-11-02T06:00Z');
  CREATE SCHEMA bf_orders;`;

const STORE: RowStore = {
  schema: 'bf_orders', staged: 'bf_orders.staged', saved: 'bf_orders.saved', baseline: 'bf_orders.baseline', expected: 'bf_orders.expected',
  target: 'w.orders',
  columns: ['partition_hour', 'order_id', 'shard', 'merchant_id', 'currency', 'amount_local', 'fx_rate', 'amount_base'],
  exact: new Set(['partition_hour', 'order_id', 'shard', 'merchant_id', 'currency', 'amount_local', 'fx_rate', 'amount_base']),
  keys: ['order_id'], partition: 'partition_hour', measure: 'amount_base', stepQuery: 'SELECT 1', stepColumns: [],
};

const PIPELINE: Pipeline = {
  name: 'orders', targetTable: 'w.orders', partitionColumn: 'partition_hour', keyColumns: ['order_id'], measureColumn: 'amount_base',
  stepSql: 'SELECT 1', sourceShardsSql: 'SELECT 1', shardsExpected: 1,
};

/** Orders `from`..`to` of the hour, spread over merchants, currencies and shards as the demo's are; `bump` changes every 50th amount. */
const orders = (from: number, to: number, bump: number) =>
  `SELECT '2026-11-02T05:00Z'::timestamptz, g, (g % 8)::smallint, (g::bigint * 7919 % 500)::int, (ARRAY['EUR', 'USD', 'GBP', 'SEK'])[1 + g % 4],
          ((g::bigint * 31) % 100000) / 100.0 + CASE WHEN g % 50 = 0 THEN ${bump} ELSE 0 END, 1.1, ((g::bigint * 31) % 100000) / 110.0
   FROM generate_series(${from}, ${to}) g`;

describe('statistics of a staged partition at a lower target', () => {
  let db: TestDatabase;
  let explaining: pg.Pool;
  let plans: CapturedPlan[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('empty');
    await db.pool.query(TARGET);
    explaining = explainingPool(db.url, 0, false, (plan) => plans.push(plan), 'off');
  });

  afterAll(async () => {
    await explaining.end();
    await db.drop();
  });

  /**
   * Stages `rows` orders as a publish by swap finds them (a tenth of the live keys gone, as many new, every 50th
   * amount changed, a few late rows live), analyzes the staged table as `analyze` says, runs the statements that
   * read it afterwards (the publish's, and a reader's of the partition it becomes), and gives back each one's plan
   * as its nodes and relations (no costs), all rolled back.
   */
  async function planShapes(rows: number, analyze: 'full' | 'staged'): Promise<string[]> {
    const staged = 'bf_orders.p2026110205_b1_g1';
    const live = 'w.orders_p2026110205';
    const client = await explaining.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO w.orders ${orders(1, rows, 0)}`);
      await client.query(`ANALYZE ${live}`);
      await keepKeysIn(client, STORE, 'bf_orders.p2026110205_b1_g1_baseline', tableSource(STORE, live), RUN);
      await client.query(`INSERT INTO w.orders ${orders(2 * rows + 1, 2 * rows + 20, 0)}`);
      await client.query(`CREATE TABLE ${staged} (LIKE w.orders INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
        CHECK (partition_hour IS NOT NULL AND partition_hour >= '${HOUR.toISOString()}' AND partition_hour < '${NEXT.toISOString()}'))`);
      await client.query(`INSERT INTO ${staged} ${orders(Math.floor(rows / 10), rows + Math.floor(rows / 10), 1)}`);
      await client.query(`CREATE UNIQUE INDEX staged_key ON ${staged} (partition_hour, order_id)`);
      if (analyze === 'full') await client.query(`ANALYZE ${staged}`);
      else await analyzeStagedTable(client, staged);
      await preferHashJoins(client);
      plans = [];
      await carryLateRowsIntoStaged(client, STORE, RUN, { live, staged, baseline: 'bf_orders.p2026110205_b1_g1_baseline' });
      await keepKeysIn(client, STORE, 'bf_orders.p2026110205_b1_written', tableSource(STORE, staged), RUN, { rowVersions: true });
      await reconcileByKey(client, STORE, RUN, tableSource(STORE, live), tableSource(STORE, staged));
      await snapshotPartition(client, PIPELINE, HOUR, staged);
      await client.query('RESET enable_nestloop');
      await client.query(`SELECT merchant_id, sum(amount_base) FROM ${staged} WHERE currency = 'SEK' GROUP BY merchant_id`);
      await client.query(`SELECT * FROM ${staged} WHERE merchant_id = 42 AND shard = 3`);
      await client.query(`SELECT * FROM ${staged} WHERE order_id BETWEEN 100 AND 200`);
      return plans.filter((plan) => plan.query.includes(staged) && !plan.query.startsWith('ANALYZE'))
        .map((plan) => `${plan.query.slice(0, 60)}\n${shape(plan.plan)}`);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  }

  it.each([20_000, 200_000])('plans the publish and a reader of %i rows as a full ANALYZE does', async (rows) => {
    const full = await planShapes(rows, 'full');
    const staged = await planShapes(rows, 'staged');
    expect(full.length).toBeGreaterThanOrEqual(7);
    expect(staged).toEqual(full);
  }, 120_000);
});

/**
 * A plan's nodes as a tree, without costs, rows or widths. Which input a hash join builds its table from follows
 * the two sides' estimated sizes: with staged and live rows about as many (as they are in a backfill), a width
 * estimated from another sample may turn it either way at the same cost, so a hash join's inputs are compared as a
 * set (its Hash node left out, Left and Right as one), every other node as printed.
 */
function shape(plan: string): string {
  const nodes = plan.split('\n').filter((line) => line.includes('(cost=')).map((line) => ({
    depth: line.search(/\S/),
    name: line.replace(/\s+\(cost=.*$/, '').replace(/^\s*(->\s+)?/, ''),
  }));
  interface Node { name: string; children: Node[] }
  const root: Node = { name: '', children: [] };
  const open: { depth: number; node: Node }[] = [{ depth: -1, node: root }];
  for (const { depth, name } of nodes) {
    while ((open.at(-1)?.depth ?? -1) >= depth) open.pop();
    const node: Node = { name, children: [] };
    open.at(-1)?.node.children.push(node);
    open.push({ depth, node });
  }
  const canonical = (node: Node): string => {
    const hashJoin = /^Hash (Right |Left )?(.*Join)$/.exec(node.name);
    if (!hashJoin) return `${node.name}(${node.children.map(canonical).join(', ')})`;
    const inputs = node.children.map((child) => (child.name === 'Hash' && child.children[0] ? child.children[0] : child));
    return `Hash ${hashJoin[1] ? 'Outer ' : ''}${hashJoin[2] ?? ''}{${inputs.map(canonical).sort().join(', ')}}`;
  };
  return root.children.map(canonical).join('\n');
}
