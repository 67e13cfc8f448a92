import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { BackfillError, ErrorCode } from '../errors.js';
import { quoteIdent, withClient } from './pool.js';
import { hasSqlState, SqlState } from './sqlState.js';

// The project's migrations/, from src/db/ when run from source and from dist/src/db/ once built (npm run build).
export const MIGRATIONS_DIR = fileURLToPath(new URL(import.meta.url.endsWith('.js') ? '../../../migrations/' : '../../migrations/', import.meta.url));

// One lock key for every process that migrates this database: concurrent starts apply each file once.
export const MIGRATION_LOCK_KEY = 'backfill-bot:migrate';

// What the migrations need of the role that runs them: to own the database
// (docs/operating.md, "The database role"), and nothing more. 0001's CREATE EXTENSION btree_gist is of a trusted
// extension (PostgreSQL 13 and newer), which whoever may CREATE in the database installs, and the owner may. A
// migration that needs more than that (an untrusted extension, a role, a setting of the server's) says so in a
// `-- needs: <the grant>` line, which the runner's sentence quotes when the server refuses it.

interface MigrationFile {
  version: number;
  name: string;
  sql: string;
  /** sha256 of the file's bytes, hex: what the ledger keeps to tell an applied file that was edited afterwards. */
  sha256: string;
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
    const bytes = await readFile(new URL(name, `file://${dir}/`));
    files.push({ version, name, sql: bytes.toString('utf8'), sha256: createHash('sha256').update(bytes).digest('hex') });
  }
  return files;
}

/** Which grant a refused migration needs, as a sentence naming the role, the database and the statement to run. */
async function missingGrant(client: pg.PoolClient, file?: MigrationFile): Promise<string> {
  const { rows } = await client.query<{ role: string; database: string }>('SELECT current_user AS role, current_database() AS database');
  const role = quoteIdent(rows[0]?.role ?? 'the role');
  const database = quoteIdent(rows[0]?.database ?? 'the database');
  const sql = file?.sql ?? '';
  const declared = [...sql.matchAll(/^--\s*needs:\s*(.+)$/gm)].map((match) => match[1]?.trim()).filter(Boolean);
  if (declared.length > 0) return `It needs ${declared.join('; ')}, which the role ${role} lacks: have an administrator grant it, then start again.`;
  const extension = /CREATE\s+EXTENSION\s+(?:IF\s+NOT\s+EXISTS\s+)?"?(\w+)/i.exec(sql)?.[1];
  const ownerFix = `have an administrator run \`ALTER DATABASE ${database} OWNER TO ${role}\``;
  return extension
    ? `It creates the extension ${extension}, which needs CREATE on the database (the owner has it) and, for an extension PostgreSQL does not mark trusted, a superuser: ${ownerFix} (or \`GRANT CREATE ON DATABASE ${database} TO ${role}\`), then start again.`
    : `The role ${role} must own the database and its schemas: ${ownerFix} (docs/operating.md, "The database role"), then start again.`;
}

/**
 * The applied files whose text is no longer what was applied. A database migrated before the ledger kept hashes
 * has none for its files: the text here at the first start that knows hashes is taken as what was applied and
 * recorded then (by the caller), not refused. Nothing else could be known of it, and it is also the rule for the
 * files edited after they had landed (0006 and 0008, from before the ledger kept hashes): their current text is
 * the one that counts.
 */
function changedSinceApplied(files: readonly MigrationFile[], applied: ReadonlyMap<number, string | null>): MigrationFile[] {
  return files.filter((file) => {
    const recorded = applied.get(file.version);
    return recorded !== undefined && recorded !== null && recorded !== file.sha256;
  });
}

/**
 * Applies the migrations not yet recorded, each in its own transaction together with its ledger row (and the
 * file's hash), under a session advisory lock. Refuses a database that is newer than this code, and one whose
 * applied files were edited since: a database migrated with the earlier text would silently differ from one
 * migrated with the new.
 */
export async function migrate(pool: pg.Pool, dir = MIGRATIONS_DIR): Promise<number[]> {
  const files = await readMigrations(dir);
  return withClient(pool, async (client) => {
    await client.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [MIGRATION_LOCK_KEY]);
    try {
      try {
        await client.query(`CREATE TABLE IF NOT EXISTS public.backfill_bot_migrations (
          version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), sha256 text)`);
        // A ledger from before it kept hashes gains the column once; looked up first, so that every other start
        // takes no lock on the ledger beyond the advisory one.
        const { rowCount } = await client.query(`SELECT 1 FROM pg_attribute
          WHERE attrelid = 'public.backfill_bot_migrations'::regclass AND attname = 'sha256' AND NOT attisdropped`);
        if (rowCount === 0) await client.query('ALTER TABLE public.backfill_bot_migrations ADD COLUMN sha256 text');
      } catch (error) {
        // PostgreSQL 15 and newer let only the database's owner create in its public schema.
        if (!hasSqlState(error, SqlState.InsufficientPrivilege)) throw error;
        throw new BackfillError(ErrorCode.Migration, `the migrations' ledger could not be created: ${(error as Error).message}. ${await missingGrant(client)}`, { cause: error });
      }
      const { rows } = await client.query<{ version: number; sha256: string | null }>('SELECT version, sha256 FROM public.backfill_bot_migrations ORDER BY version');
      const applied = new Map(rows.map((row) => [row.version, row.sha256]));
      const newest = rows.at(-1)?.version ?? 0;
      if (newest > files.length) {
        throw new BackfillError(ErrorCode.Migration,
          `the database is at migration ${newest} but this code only knows ${files.length}: run a newer backfill-bot against it`);
      }
      const changed = changedSinceApplied(files, applied);
      if (changed.length > 0) {
        const names = changed.map((file) => file.name).join(', ');
        throw new BackfillError(ErrorCode.Migration,
          `${changed.length === 1 ? `migration ${names} has` : `migrations ${names} have`} changed since ${changed.length === 1 ? 'it was' : 'they were'} applied to this database: ` +
          `put the applied text back and make the change in a new migration (${String(files.length + 1).padStart(4, '0')}_…) instead of editing an applied one`);
      }
      const unhashed = files.filter((file) => applied.get(file.version) === null);
      if (unhashed.length > 0) {
        await client.query(`UPDATE public.backfill_bot_migrations AS m SET sha256 = f.sha256
          FROM unnest($1::int[], $2::text[]) AS f(version, sha256) WHERE m.version = f.version AND m.sha256 IS NULL`,
        [unhashed.map((file) => file.version), unhashed.map((file) => file.sha256)]);
      }
      const done: number[] = [];
      for (const file of files) {
        if (applied.has(file.version)) continue;
        await client.query('BEGIN');
        try {
          await client.query(file.sql);
          await client.query('INSERT INTO public.backfill_bot_migrations (version, name, sha256) VALUES ($1, $2, $3)', [file.version, file.name, file.sha256]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          const missing = hasSqlState(error, SqlState.InsufficientPrivilege) ? `. ${await missingGrant(client, file)}` : '';
          throw new BackfillError(ErrorCode.Migration, `migration ${file.name} failed: ${(error as Error).message}${missing}`, { cause: error });
        }
        done.push(file.version);
      }
      return done;
    } finally {
      await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [MIGRATION_LOCK_KEY]);
    }
  });
}
