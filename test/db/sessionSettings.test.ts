// The settings a step changes for a moment of its transaction, each in one round trip with the statement it
// serves: a lock try's lock_timeout, the staged table's statistics target, a claim's transaction name. Each comes
// back as it was (or, for the name, goes with the transaction), whatever the try's outcome: the rest of the step's
// transaction, and the next one on the pooled connection, must not run under a setting meant for one statement.

import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction, withTransactionsNamed, type Pool, type PoolClient } from '../../src/db/pool.js';
import { analyzeStagedTable, tryTableLocks } from '../../src/db/swap.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

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
