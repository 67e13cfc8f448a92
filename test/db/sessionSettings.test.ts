// The settings a step changes for a moment of its transaction, each in one round trip with the statement it
// serves: a lock try's lock_timeout, the staged table's statistics target, a claim's transaction name. Each comes
// back as it was (or, for the name, goes with the transaction), whatever the try's outcome: the rest of the step's
// transaction, and the next one on the pooled connection, must not run under a setting meant for one statement.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { createPool, quoteIdent, sessionSettings, withTransaction, withTransactionsNamed, type Pool, type PoolClient } from '../../src/db/pool.js';
import { analyzeStagedTable, tryTableLocks } from '../../src/db/swap.js';
import { createTestDatabase, withAdminClient, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('empty');
  await db.pool.query('CREATE TABLE public.held (id int PRIMARY KEY); INSERT INTO public.held SELECT generate_series(1, 100)');
});
afterAll(async () => {
  await db.drop();
});

async function setting(tx: PoolClient | Pool, name: string): Promise<string | undefined> {
  const { rows } = await tx.query<{ value: string }>('SELECT current_setting($1::text) AS value', [name]);
  return rows[0]?.value;
}

describe('settings a step changes for one statement come back', () => {
  it('a lock try gives the transaction its lock_timeout back when the locks are held, when one is not granted, and after a probe', async () => {
    const holder = new pg.Client({ connectionString: db.url, application_name: 'session-settings-holder' });
    await holder.connect();
    try {
      await withTransaction(db.pool, async (tx) => {
        await tx.query(`SET LOCAL lock_timeout = '7s'`);
        expect(await tryTableLocks(tx, [{ table: 'public.held', mode: 'EXCLUSIVE' }], 50, { restoreMs: 7000 })).toEqual({ held: true });
        expect(await setting(tx, 'lock_timeout')).toBe('7s');
      });
      await withTransaction(db.pool, async (tx) => {
        await tx.query(`SET LOCAL lock_timeout = '7s'`);
        expect(await tryTableLocks(tx, [{ table: 'public.held', mode: 'ACCESS EXCLUSIVE' }], 50, { release: true, restoreMs: 7000 })).toEqual({ held: true });
        expect(await setting(tx, 'lock_timeout')).toBe('7s');
        // The probe gave the lock back: another session takes it at once.
        await holder.query(`SET lock_timeout = '1s'; BEGIN; LOCK TABLE public.held IN ACCESS SHARE MODE`);
        await holder.query('COMMIT');
      });
      // A reader holds the table: the try waits its 50 ms, is not granted, and withdraws.
      await holder.query('BEGIN; LOCK TABLE public.held IN ACCESS SHARE MODE');
      await withTransaction(db.pool, async (tx) => {
        await tx.query(`SET LOCAL lock_timeout = '7s'`);
        expect(await tryTableLocks(tx, [{ table: 'public.held', mode: 'ACCESS EXCLUSIVE' }], 50, { restoreMs: 7000 })).toEqual({ held: false, waitingOn: 'public.held' });
        expect(await setting(tx, 'lock_timeout')).toBe('7s');
        // The transaction is usable after the withdrawn try.
        expect((await tx.query<{ n: number }>('SELECT count(*)::int AS n FROM public.held')).rows[0]?.n).toBe(100);
      });
      await holder.query('COMMIT');
    } finally {
      await holder.end();
    }
  });

  it('refuses a lock timeout that is not a whole number of milliseconds', async () => {
    const locks = [{ table: 'public.held', mode: 'EXCLUSIVE' as const }];
    await expect(withTransaction(db.pool, (tx) => tryTableLocks(tx, locks, Number.POSITIVE_INFINITY, { restoreMs: 0 }))).rejects.toThrow(/not a lock timeout: Infinity ms/);
    await expect(withTransaction(db.pool, (tx) => tryTableLocks(tx, locks, 50, { restoreMs: Number.NaN }))).rejects.toThrow(/not a lock timeout: NaN ms/);
  });

  it('analyzes a staged table at the low target and gives the transaction its own target back', async () => {
    await withTransaction(db.pool, async (tx) => {
      await tx.query('SET LOCAL default_statistics_target = 250');
      await analyzeStagedTable(tx, 'public.held');
      expect(await setting(tx, 'default_statistics_target')).toBe('250');
      // The statistics it wrote are the low target's: 100 distinct ids get 11 histogram bounds at 10 (101 at 100).
      const { rows } = await tx.query<{ bounds: number }>(
        `SELECT cardinality(histogram_bounds::text::int[]) AS bounds FROM pg_stats WHERE schemaname = 'public' AND tablename = 'held' AND attname = 'id'`);
      expect(rows[0]?.bounds).toBe(11);
    });
    // Only the transaction's: the next one on the pool has the server's.
    expect(await setting(db.pool, 'default_statistics_target')).toBe('100');
  });

  it('names a transaction from its BEGIN, and the name goes with it', async () => {
    const name = "backfill-bot bf1 stage o'brien"; // a quote, escaped as a literal
    await withTransactionsNamed(name, () => withTransaction(db.pool, async (tx) => {
      expect(await setting(tx, 'application_name')).toBe(name);
      // The name is set inside the transaction the BEGIN opened, where a takeover looks for it.
      const { rows } = await tx.query<{ named: string }>(
        'SELECT application_name AS named FROM pg_stat_activity WHERE pid = pg_backend_pid() AND xact_start IS NOT NULL');
      expect(rows[0]?.named).toBe(name);
    }));
    await withTransaction(db.pool, async (tx) => {
      expect(await setting(tx, 'application_name')).toBe('backfill-bot-test');
    });
  });
});

// PostgreSQL decides to JIT-compile a plan from its estimated total cost alone, then compiles the expressions of
// every node it initializes, pruned partitions included. A consumer's replay joining a day to a target of 720
// hourly partitions, pruned only at execution, spent 2.4 s compiling 4,300 functions to read 0.5 s of rows.
describe('JIT in the sessions of the bot', () => {
  /** A target of many hourly partitions, read the way a consumer's replay reads it: a day joined by range. */
  const REPLAY = `SELECT d.day, count(o.id) FROM (SELECT DISTINCT (h AT TIME ZONE 'UTC')::date AS day FROM unnest($1::timestamptz[]) AS h) d
                  LEFT JOIN public.hourly o ON o.hour >= d.day::timestamp AT TIME ZONE 'UTC' AND o.hour < (d.day + 1)::timestamp AT TIME ZONE 'UTC'
                  GROUP BY d.day`;
  const PARTITIONS = 120;

  beforeAll(async () => {
    const partitions = Array.from({ length: PARTITIONS }, (_, i) => {
      const from = new Date(Date.UTC(2026, 10, 1, i)).toISOString();
      const to = new Date(Date.UTC(2026, 10, 1, i + 1)).toISOString();
      return `CREATE TABLE public.hourly_${i} PARTITION OF public.hourly FOR VALUES FROM ('${from}') TO ('${to}');`;
    });
    await db.pool.query(`CREATE TABLE public.hourly (hour timestamptz NOT NULL, id int NOT NULL, PRIMARY KEY (hour, id)) PARTITION BY RANGE (hour);
      ${partitions.join('\n')}
      INSERT INTO public.hourly SELECT '2026-11-01'::timestamptz + make_interval(hours => h), n FROM generate_series(0, ${PARTITIONS - 1}) h, generate_series(1, 10) n;
      ANALYZE public.hourly`);
  });

  /** The replay's plan, as a pool of these settings runs it, with JIT's threshold at 0 so that cost never decides. */
  async function replayPlan(pool: Pool): Promise<{ rows: number; jitFunctions: number | undefined }> {
    const client = await pool.connect();
    try {
      await client.query('SET jit_above_cost = 0');
      const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: { 'Actual Rows': number }; JIT?: { Functions: number } }] }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) ${REPLAY}`, [['2026-11-02T05:00:00Z']]);
      const explained = rows[0]?.['QUERY PLAN'][0];
      return { rows: explained?.Plan['Actual Rows'] ?? -1, jitFunctions: explained?.JIT?.Functions };
    } finally {
      client.release();
    }
  }

  it('is off by default, the options the URL gives kept beside it; DATABASE_JIT=server leaves the server its own', async () => {
    const config = loadConfig({});
    expect(config.DATABASE_JIT).toBe('off');
    const given = new URL(db.url);
    given.searchParams.set('options', '-c work_mem=8MB');
    const bots = createPool(given.toString(), 'session-settings-jit', sessionSettings(config));
    const servers = createPool(given.toString(), 'session-settings-jit', sessionSettings(loadConfig({ DATABASE_JIT: 'server' })));
    try {
      expect(await setting(bots, 'jit')).toBe('off');
      expect(await setting(bots, 'work_mem')).toBe('8MB');
      expect(await setting(servers, 'jit')).toBe(await setting(db.pool, 'jit'));
      expect(await setting(servers, 'work_mem')).toBe('8MB');
      // The timeouts are still the config's.
      expect(await setting(bots, 'statement_timeout')).toBe('15min');
    } finally {
      await Promise.all([bots.end(), servers.end()]);
    }
  });

  it('keeps a URL whose user and password need escaping as it was, the setting added', async () => {
    const role = `jit test@${randomBytes(3).toString('hex')}`;
    const password = 'p@ss/w:rd?#%';
    await withAdminClient((client) => client.query(`CREATE ROLE ${quoteIdent(role)} LOGIN PASSWORD ${client.escapeLiteral(password)}`));
    const url = new URL(db.url);
    url.username = encodeURIComponent(role);
    url.password = encodeURIComponent(password);
    const pool = createPool(url.toString(), 'session-settings-jit', sessionSettings(loadConfig({})));
    try {
      const { rows } = await pool.query<{ who: string; jit: string }>(`SELECT current_user AS who, current_setting('jit') AS jit`);
      expect(rows[0]).toEqual({ who: role, jit: 'off' });
    } finally {
      await pool.end();
      await withAdminClient((client) => client.query(`DROP ROLE ${quoteIdent(role)}`));
    }
  });

  it("compiles nothing of a replay over many partitions, which the server's setting would compile node by node", async () => {
    const bots = createPool(db.url, 'session-settings-jit', sessionSettings(loadConfig({})));
    const servers = createPool(db.url, 'session-settings-jit', sessionSettings(loadConfig({ DATABASE_JIT: 'server' })));
    try {
      const bot = await replayPlan(bots);
      expect(bot).toEqual({ rows: 1, jitFunctions: undefined });
      const { rows } = await db.pool.query<{ available: boolean; on: boolean }>(`SELECT pg_jit_available() AS available, current_setting('jit')::bool AS on`);
      const server = await replayPlan(servers);
      expect(server.rows).toBe(1);
      // A server built without LLVM (or with jit off) compiles nothing either way; one with it compiles more
      // functions than the target has partitions, though one day's 24 are all the replay reads.
      if (rows[0]?.available && rows[0].on) expect(server.jitFunctions).toBeGreaterThan(PARTITIONS);
      else expect(server.jitFunctions).toBeUndefined();
    } finally {
      await Promise.all([bots.end(), servers.end()]);
    }
  });

  it('refuses a DATABASE_JIT of another value, naming the two it takes', () => {
    expect(() => loadConfig({ DATABASE_JIT: 'on' })).toThrowError(/DATABASE_JIT must be off \(the default\) or server \(the server's own jit setting\)/);
  });
});
