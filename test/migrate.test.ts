import { createHash, randomBytes } from 'node:crypto';
import { appendFile, cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, MIGRATIONS_DIR, readMigrations } from '../src/db/migrate.js';
import { createPool, quoteIdent } from '../src/db/pool.js';
import { ErrorCode, isBackfillError } from '../src/errors.js';
import { createTestDatabase, databaseUrl, dropDatabase, withAdminClient } from './support/db.js';

/** A database no runner has touched (createTestDatabase migrates its own), with pools that are ended before it is dropped. */
async function unmigratedDatabase(): Promise<{ pool(): pg.Pool; drop(): Promise<void> }> {
  const name = `backfill_bot_test_${randomBytes(6).toString('hex')}`;
  await withAdminClient((client) => client.query(`CREATE DATABASE ${quoteIdent(name)}`));
  const pools: pg.Pool[] = [];
  return {
    pool() {
      const pool = createPool(databaseUrl(name), 'backfill-bot-test');
      pools.push(pool);
      return pool;
    },
    async drop() {
      await Promise.all(pools.map((pool) => pool.end()));
      await dropDatabase(name);
    },
  };
}

/** A copy of the migrations folder a test may edit, as someone would edit the real one. */
async function migrationsCopy(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'backfill-bot-migrations-'));
  await cp(MIGRATIONS_DIR, dir, { recursive: true });
  return dir;
}

async function ledger(pool: pg.Pool): Promise<{ version: number; sha256: string | null }[]> {
  return (await pool.query<{ version: number; sha256: string | null }>('SELECT version, sha256 FROM public.backfill_bot_migrations ORDER BY version')).rows;
}

const sha256 = async (path: string) => createHash('sha256').update(await readFile(path)).digest('hex');

describe('migrations', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    db = await createTestDatabase('empty');
  });
  afterAll(async () => db.drop());

  it('apply once even when several processes start at the same time', async () => {
    const fresh = await unmigratedDatabase();
    try {
      // One pool per process, each already connected, so that the runners all start on an unmigrated
      // database within a moment of one another rather than one after the other's connection setup.
      const runners = Array.from({ length: 4 }, () => fresh.pool());
      await Promise.all(runners.map(async (pool) => (await pool.connect()).release()));
      const outcomes = await Promise.allSettled(runners.map((pool) => migrate(pool)));
      expect(outcomes.flatMap((o) => (o.status === 'rejected' ? [String(o.reason)] : []))).toEqual([]);
      const versions = (await readMigrations()).map((m) => m.version);
      // Each file applied by exactly one of them; the others found it applied.
      const applied = outcomes.flatMap((o) => (o.status === 'fulfilled' ? o.value : []));
      expect(applied.toSorted((a, b) => a - b)).toEqual(versions);
      expect((await ledger(runners[0]!)).map((row) => row.version)).toEqual(versions);
    } finally {
      await fresh.drop();
    }
  });

  it('refuse to start when an applied file was edited since, naming it, and apply nothing', async () => {
    const fresh = await unmigratedDatabase();
    const dir = await migrationsCopy();
    try {
      const pool = fresh.pool();
      const versions = (await migrate(pool, dir));
      expect((await ledger(pool)).map((row) => row.sha256)).toEqual(
        await Promise.all((await readMigrations(dir)).map((m) => sha256(join(dir, m.name)))));

      const edited = join(dir, '0006_typed_row_store.sql');
      const original = await readFile(edited);
      await appendFile(edited, '\n-- a late edit\n');
      // The next free number, whatever the project's migrations come to.
      const next = versions.length + 1;
      const numbered = (n: number) => String(n).padStart(4, '0');
      await writeFile(join(dir, `${numbered(next)}_after_the_edit.sql`), 'CREATE TABLE backfill.after_the_edit (id integer);\n');
      const refused = await migrate(pool, dir).catch((e: unknown) => e);
      expect((refused as Error).message).toBe('migration 0006_typed_row_store.sql has changed since it was applied to this database: ' +
        `put the applied text back and make the change in a new migration (${numbered(next + 1)}_…) instead of editing an applied one`);
      expect(isBackfillError(refused, ErrorCode.Migration)).toBe(true);
      expect((await ledger(pool)).map((row) => row.version)).toEqual(versions);
      expect((await pool.query("SELECT to_regclass('backfill.after_the_edit') AS t")).rows).toEqual([{ t: null }]);

      // Put back, the file is no obstacle: the new migration is what applies.
      await writeFile(edited, original);
      expect(await migrate(pool, dir)).toEqual([next]);
    } finally {
      await fresh.drop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('take the files as they are for a database migrated before the ledger kept hashes, and hold it to them from then on', async () => {
    const fresh = await unmigratedDatabase();
    const dir = await migrationsCopy();
    try {
      const pool = fresh.pool();
      await migrate(pool, dir);
      // The ledger as a runner that kept no hashes left it, and a file edited after it was applied.
      await pool.query('ALTER TABLE public.backfill_bot_migrations DROP COLUMN sha256');
      const edited = join(dir, '0008_publish_by_swap.sql');
      await appendFile(edited, '\n-- edited after it had landed\n');

      expect(await migrate(pool, dir)).toEqual([]);
      expect((await ledger(pool)).map((row) => row.sha256)).toEqual(
        await Promise.all((await readMigrations(dir)).map((m) => sha256(join(dir, m.name)))));

      await appendFile(edited, '-- and edited again\n');
      await expect(migrate(pool, dir)).rejects.toThrow(/^migration 0008_publish_by_swap\.sql has changed since it was applied to this database: /);
    } finally {
      await fresh.drop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuse a database newer than the code', async () => {
    await db.pool.query(`INSERT INTO public.backfill_bot_migrations (version, name) VALUES (999, '0999_future.sql')`);
    await expect(migrate(db.pool)).rejects.toThrow(/database is at migration 999 but this code only knows/);
    await db.pool.query('DELETE FROM public.backfill_bot_migrations WHERE version = 999');
  });

  it('refuse a consumer dependency cycle, naming the consumers in it', async () => {
    const insert = `INSERT INTO backfill.consumers (name, kind, owner, notify_rule, retrigger) VALUES ($1, 'report', 'U1', 'before', '{"kind":"sql","statements":["select 1"]}')`;
    for (const name of ['a_report', 'b_export', 'c_model']) await db.pool.query(insert, [name]);
    await db.pool.query(`INSERT INTO backfill.consumer_dependencies VALUES ('b_export', 'a_report'), ('c_model', 'b_export')`);
    const ranks = await db.pool.query('SELECT name, dependency_rank FROM backfill.consumers ORDER BY name');
    expect(ranks.rows).toEqual([{ name: 'a_report', dependency_rank: 1 }, { name: 'b_export', dependency_rank: 2 }, { name: 'c_model', dependency_rank: 3 }]);
    await expect(db.pool.query(`INSERT INTO backfill.consumer_dependencies VALUES ('a_report', 'c_model')`))
      .rejects.toThrow(/cycle through: a_report, b_export, c_model/);
  });
});
