import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { BackfillError, ErrorCode } from '../errors.js';
import { withClient } from './pool.js';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

// One lock key for every process that migrates this database: concurrent starts apply each file once.
const MIGRATION_LOCK_KEY = 'backfill-bot:migrate';

interface MigrationFile {
  version: number;
  name: string;
  sql: string;
}

export async function readMigrations(dir = MIGRATIONS_DIR): Promise<MigrationFile[]> {
  const names = (await readdir(dir)).filter((name) => name.endsWith('.sql')).sort();
  const files: MigrationFile[] = [];
  for (const name of names) {
    const match = /^(\d{4})_[a-z0-9_]+\.sql$/.exec(name);
    if (!match?.[1]) throw new BackfillError(ErrorCode.Migration, `migration file ${name} must be named NNNN_slug.sql`);
    const version = Number(match[1]);
    if (version !== files.length + 1) {
      throw new BackfillError(ErrorCode.Migration, `migration ${name} breaks the numbering: expected ${String(files.length + 1).padStart(4, '0')}_…`);
    }
    files.push({ version, name, sql: await readFile(new URL(name, `file://${dir}/`), 'utf8') });
  }
  return files;
}

/**
 * Applies the migrations not yet recorded, each in its own transaction together with its ledger row,
 * under a session advisory lock. Refuses a database that is newer than this code.
 */
export async function migrate(pool: pg.Pool, dir = MIGRATIONS_DIR): Promise<number[]> {
  const files = await readMigrations(dir);
  return withClient(pool, async (client) => {
    await client.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [MIGRATION_LOCK_KEY]);
    try {
      await client.query(`CREATE TABLE IF NOT EXISTS public.backfill_bot_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const { rows } = await client.query<{ version: number }>('SELECT version FROM public.backfill_bot_migrations ORDER BY version');
      const applied = new Set(rows.map((row) => row.version));
      const newest = rows.at(-1)?.version ?? 0;
      if (newest > files.length) {
        throw new BackfillError(ErrorCode.Migration,
          `the database is at migration ${newest} but this code only knows ${files.length}: run a newer backfill-bot against it`);
      }
      const done: number[] = [];
      for (const file of files) {
        if (applied.has(file.version)) continue;
        await client.query('BEGIN');
        try {
          await client.query(file.sql);
          await client.query('INSERT INTO public.backfill_bot_migrations (version, name) VALUES ($1, $2)', [file.version, file.name]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw new BackfillError(ErrorCode.Migration, `migration ${file.name} failed: ${(error as Error).message}`, { cause: error });
        }
        done.push(file.version);
      }
      return done;
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [MIGRATION_LOCK_KEY]);
    }
  });
}
