// Least privilege in the database: the embedded PostgreSQL runs with an environment of its own (none of the bot's
// tokens), the bot connects to it as a role that owns its databases and can reach nothing outside them, a data
// folder from before that role existed is upgraded in place, and a configured role with more than that is
// warned about once at start. A server of the file's own (a data folder under the system's temporary folder), in
// either CI mode: the embedded server is what is tested.

import { existsSync, mkdtempSync, chmodSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openBackends, type Backends } from '../../src/backends.js';
import { loadConfig } from '../../src/config.js';
import { BOT_ROLE, SERVER_ENV } from '../../src/db/embeddedPostgres.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { createLogger } from '../../src/log.js';

const scratch = mkdtempSync(path.join(os.tmpdir(), 'backfill-bot-role-'));
// mkdtemp makes it 0700; as root the server runs as "postgres", which must pass through it.
chmodSync(scratch, 0o755);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const dataDir = (name: string) => path.join(scratch, name, 'pg');

/** Distinct values planted in the bot's environment: none may reach the server's. */
const PLANTED: Record<string, string> = {
  SLACK_BOT_TOKEN: 'xoxb-planted-0000-bot-token',
  SLACK_APP_TOKEN: 'xapp-planted-0000-app-token',
  SLACK_SIGNING_SECRET: 'planted-signing-secret-4e1f',
  WEBHOOK_SIGNING_SECRET: 'planted-webhook-secret-9c2d',
  RETRIGGER_SECRET_PLANTED: 'planted-retrigger-secret-77ab',
  LINEAGE_TOKEN: 'planted-lineage-token-5d3e',
  OPENLINEAGE_API_KEY: 'planted-openlineage-key-a1b2',
};

async function query<R extends pg.QueryResultRow>(url: string, sql: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query<R>(sql, values);
  } finally {
    await client.end();
  }
}

/** The error a statement fails with (undefined when it succeeds). */
async function refusal(url: string, sql: string): Promise<{ code?: string; message: string; detail?: string } | undefined> {
  return query(url, sql).then(() => undefined, (error: unknown) => error as { code?: string; message: string; detail?: string });
}

/** The superuser's URL for one database of the server: what only src/db/embeddedPostgres.ts itself uses. */
function superuserUrl(dir: string, backends: Backends, database: string): string {
  const url = new URL(backends.config.DATABASE_URL);
  url.username = 'postgres';
  url.password = encodeURIComponent(readFileSync(`${dir}.password`, 'utf8').trim());
  url.pathname = `/${database}`;
  return url.toString();
}

function postmasterPid(dir: string): number {
  return Number(readFileSync(path.join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]);
}

/** A logger whose lines the test reads, as the services' would be written. */
function capturedLogger(): { logger: ReturnType<typeof createLogger>; warnings: () => string[] } {
  const lines: string[] = [];
  const destination = new Writable({ write: (chunk: Buffer, _encoding, done) => { lines.push(chunk.toString()); done(); } });
  const logger = createLogger({ level: 'info', pretty: false, destination });
  const warnings = () => lines.map((line) => JSON.parse(line) as { level: number; msg: string }).filter((line) => line.level === 40).map((line) => line.msg);
  return { logger, warnings };
}

describe('the embedded PostgreSQL: a minimal environment and a role that is not a superuser', () => {
  const dir = dataDir('server');
  let backends: Backends;
  let environ: string | undefined;
  const started = capturedLogger();

  beforeAll(async () => {
    // Planted in the environment of the process that starts the server, as a bot's tokens are.
    const saved = Object.fromEntries(Object.keys(PLANTED).map((name) => [name, process.env[name]]));
    Object.assign(process.env, PLANTED);
    try {
      backends = await openBackends(loadConfig({ EMBEDDED_PG_DIR: dir }), { logger: started.logger });
    } finally {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
    }
    // Read now: the server's environment is fixed when it starts.
    const file = `/proc/${postmasterPid(dir)}/environ`;
    environ = existsSync(file) ? readFileSync(file, 'utf8') : undefined;
  });
  afterAll(async () => {
    await backends?.close();
  });

  it('connects the bot as its own role, not a superuser, a member of no role, owning its database and schemas', async () => {
    expect(new URL(backends.config.DATABASE_URL).username).toBe(BOT_ROLE);
    const { rows } = await query<{ role: string; rolsuper: boolean; rolcreaterole: boolean; rolbypassrls: boolean; memberships: string[]; owner: string }>(
      backends.config.DATABASE_URL,
      `SELECT current_user AS role, rolsuper, rolcreaterole, rolbypassrls,
              ARRAY(SELECT roleid::regrole::text FROM pg_auth_members WHERE member = r.oid) AS memberships,
              (SELECT datdba::regrole::text FROM pg_database WHERE datname = current_database()) AS owner
       FROM pg_roles r WHERE rolname = current_user`);
    expect(rows).toEqual([{ role: BOT_ROLE, rolsuper: false, rolcreaterole: false, rolbypassrls: false, memberships: [], owner: BOT_ROLE }]);

    // The migrations run as that role (btree_gist is a trusted extension), and what they make is its own.
    const pool = createPool(backends.config.DATABASE_URL, 'backfill-bot-test');
    try {
      await migrate(pool);
      const owners = await pool.query<{ owner: string }>(
        `SELECT DISTINCT c.relowner::regrole::text AS owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname IN ('backfill', 'public') AND c.relkind IN ('r', 'p', 'S')
         UNION SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'backfill'`);
      expect(owners.rows).toEqual([{ owner: BOT_ROLE }]);
    } finally {
      await pool.end();
    }
  });

  it('cannot run a program, read or write a server file, or read a setting only a superuser may', async () => {
    const url = backends.config.DATABASE_URL;
    await query(url, 'CREATE TABLE IF NOT EXISTS public.probe (line text)');
    const program = await refusal(url, `COPY public.probe FROM PROGRAM 'id'`);
    expect(program).toMatchObject({ code: '42501', detail: expect.stringContaining('"pg_execute_server_program"') });
    const readFile = await refusal(url, `SELECT pg_read_file('postgresql.conf')`);
    expect(readFile).toMatchObject({ code: '42501', message: 'permission denied for function pg_read_file' });
    const copyFile = await refusal(url, `COPY public.probe FROM '/etc/passwd'`);
    expect(copyFile).toMatchObject({ code: '42501', detail: expect.stringContaining('"pg_read_server_files"') });
    const writeFile = await refusal(url, `COPY public.probe TO '/tmp/backfill-bot-probe'`);
    expect(writeFile).toMatchObject({ code: '42501', detail: expect.stringContaining('"pg_write_server_files"') });
    const setting = await refusal(url, `SELECT current_setting('data_directory')`);
    expect(setting).toMatchObject({ code: '42501' });
    // Nor can it give itself what it lacks.
    const grant = await refusal(url, `GRANT pg_execute_server_program TO ${BOT_ROLE}`);
    expect(grant).toMatchObject({ code: '42501' });
  });

  it.skipIf(process.platform !== 'linux')('starts the server with an environment of its own: none of the bot\'s values (read from /proc, Linux only)', () => {
    expect(environ, 'the postmaster\'s /proc/<pid>/environ could not be read').toBeDefined();
    const variables = (environ ?? '').split('\0').filter(Boolean);
    for (const value of Object.values(PLANTED)) expect(environ).not.toContain(value);
    // Only what src/db/embeddedPostgres.ts hands over, and what pg_ctl and the server set themselves.
    const names = variables.map((variable) => variable.slice(0, variable.indexOf('=')));
    const allowed = new Set([...Object.keys(SERVER_ENV), 'PGDATA', 'PG_GRANDPARENT_PID', 'PWD', 'SHLVL', '_', 'OLDPWD', 'PGSYSCONFDIR', 'PGLOCALEDIR']);
    expect(names.filter((name) => !allowed.has(name))).toEqual([]);
    expect(names).not.toContain('DATABASE_URL');
  });

  it('warns, in one sentence, when a configured role is a superuser or holds a server-access role, and not for the bot\'s role', async () => {
    // The embedded start itself: its role has nothing more than it needs.
    expect(started.warnings()).toEqual([]);

    const asSuperuser = capturedLogger();
    const configured = await openBackends(loadConfig({ DATABASE_URL: superuserUrl(dir, backends, 'backfill_bot') }), { logger: asSuperuser.logger, checkQueue: false });
    await configured.close();
    expect(asSuperuser.warnings()).toEqual([
      'The database role "postgres" (DATABASE_URL) is a superuser, so any SQL the bot runs (a catalog\'s re-trigger statement, a pipeline\'s step) ' +
      'could read the server\'s files or run programs as its OS user: give the bot a role that owns its database and nothing more (docs/operating.md, "The database role").',
    ]);

    await query(superuserUrl(dir, backends, 'postgres'),
      `CREATE ROLE planted_runner LOGIN PASSWORD 'planted-runner-pw' IN ROLE pg_execute_server_program, pg_read_server_files`);
    const runnerUrl = new URL(backends.config.DATABASE_URL);
    runnerUrl.username = 'planted_runner';
    runnerUrl.password = 'planted-runner-pw';
    const asRunner = capturedLogger();
    await (await openBackends(loadConfig({ DATABASE_URL: runnerUrl.toString() }), { logger: asRunner.logger, checkQueue: false })).close();
    expect(asRunner.warnings()).toEqual([expect.stringMatching(/^The database role "planted_runner" \(DATABASE_URL\) holds pg_execute_server_program, pg_read_server_files, so any SQL/)]);

    const asBot = capturedLogger();
    await (await openBackends(loadConfig({ DATABASE_URL: backends.config.DATABASE_URL }), { logger: asBot.logger, checkQueue: false })).close();
    expect(asBot.warnings()).toEqual([]);
  });

  it('takes back, at the next start, a power granted to the bot\'s role by hand', async () => {
    await query(superuserUrl(dir, backends, 'postgres'), `ALTER ROLE ${BOT_ROLE} SUPERUSER; GRANT pg_execute_server_program TO ${BOT_ROLE}`);
    const joined = await openBackends(loadConfig({ EMBEDDED_PG_DIR: dir }));
    await joined.close();
    const { rows } = await query<{ rolsuper: boolean; memberships: string[] }>(backends.config.DATABASE_URL,
      `SELECT rolsuper, ARRAY(SELECT roleid::regrole::text FROM pg_auth_members WHERE member = r.oid) AS memberships FROM pg_roles r WHERE rolname = current_user`);
    expect(rows).toEqual([{ rolsuper: false, memberships: [] }]);
  });

  it('names the grant a migration lacks when the role does not own the database, and migrates once it does', async () => {
    await query(superuserUrl(dir, backends, 'postgres'), 'CREATE DATABASE not_the_bots');
    const url = new URL(backends.config.DATABASE_URL);
    url.pathname = '/not_the_bots';
    const pool = createPool(url.toString(), 'backfill-bot-test');
    const ownerFix = 'have an administrator run `ALTER DATABASE "not_the_bots" OWNER TO "backfill_bot"`';
    try {
      const ledger = await migrate(pool).catch((e: unknown) => e);
      expect(isBackfillError(ledger, ErrorCode.Migration)).toBe(true);
      expect((ledger as Error).message).toBe('the migrations\' ledger could not be created: permission denied for schema public. ' +
        `The role "backfill_bot" must own the database and its schemas: ${ownerFix} (docs/operating.md, "The database role"), then start again.`);

      // Allowed to create in public, it gets as far as the first statement that needs more.
      await query(superuserUrl(dir, backends, 'not_the_bots'), `GRANT CREATE ON SCHEMA public TO ${BOT_ROLE}`);
      const extension = await migrate(pool).catch((e: unknown) => e);
      expect(isBackfillError(extension, ErrorCode.Migration)).toBe(true);
      expect((extension as Error).message).toBe('migration 0001_control_schema.sql failed: permission denied to create extension "btree_gist". ' +
        'It creates the extension btree_gist, which needs CREATE on the database (the owner has it) and, for an extension PostgreSQL does not mark trusted, a superuser: ' +
        `${ownerFix} (or \`GRANT CREATE ON DATABASE "not_the_bots" TO "backfill_bot"\`), then start again.`);

      // The sentence's fix is the whole fix.
      await query(superuserUrl(dir, backends, 'postgres'), `ALTER DATABASE not_the_bots OWNER TO ${BOT_ROLE}`);
      expect((await migrate(pool)).length).toBeGreaterThan(0);
    } finally {
      await pool.end();
    }
  });
});

describe('a data folder from before the bot had a role of its own', () => {
  it('is upgraded in place: the role is created and the project\'s databases, with everything in them, become its own', async () => {
    const dir = dataDir('upgrade');
    // The folder as the earlier version left it: the superuser alone, owning the bot's migrated database and a
    // demo database with the warehouse in it, and no password file for a bot role.
    const first = await openBackends(loadConfig({ EMBEDDED_PG_DIR: dir }));
    try {
      const admin = (database: string) => superuserUrl(dir, first, database);
      await query(admin('postgres'), 'DROP DATABASE backfill_bot WITH (FORCE)');
      await query(admin('postgres'), 'CREATE DATABASE backfill_bot');
      await query(admin('postgres'), 'CREATE DATABASE backfill_bot_demo');
      const old = createPool(admin('backfill_bot'), 'backfill-bot-test');
      try {
        await migrate(old);
      } finally {
        await old.end();
      }
      await query(admin('backfill_bot_demo'), `CREATE SCHEMA warehouse;
        CREATE TYPE warehouse.channel AS ENUM ('web', 'store');
        CREATE TABLE warehouse.orders (id bigserial, hour timestamptz NOT NULL, channel warehouse.channel) PARTITION BY RANGE (hour);
        CREATE TABLE warehouse.orders_2026_11 PARTITION OF warehouse.orders FOR VALUES FROM ('2026-11-01') TO ('2026-12-01');
        CREATE FUNCTION warehouse.total() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM warehouse.orders'`);
      await query(admin('postgres'), `DROP ROLE ${BOT_ROLE}`);
    } finally {
      await first.close();
    }
    rmSync(`${dir}.bot-password`);

    const lines: string[] = [];
    const upgraded = await openBackends(loadConfig({ EMBEDDED_PG_DIR: dir }), { log: (line) => lines.push(line) });
    try {
      expect(new URL(upgraded.config.DATABASE_URL).username).toBe(BOT_ROLE);
      const notOwned = `SELECT count(*)::int AS n FROM (
          SELECT relowner AS owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN ('backfill', 'warehouse', 'public') AND c.relkind IN ('r', 'p', 'S', 'v')
          UNION ALL SELECT nspowner FROM pg_namespace WHERE nspname IN ('backfill', 'warehouse')
          UNION ALL SELECT proowner FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname IN ('backfill', 'warehouse')
          UNION ALL SELECT typowner FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname IN ('backfill', 'warehouse') AND t.typtype = 'e'
          UNION ALL SELECT datdba FROM pg_database WHERE datname = current_database()
        ) o WHERE owner <> (SELECT oid FROM pg_roles WHERE rolname = current_user)`;
      expect((await query<{ n: number }>(upgraded.config.DATABASE_URL, notOwned)).rows).toEqual([{ n: 0 }]);
      const demo = new URL(upgraded.config.DATABASE_URL);
      demo.pathname = '/backfill_bot_demo';
      expect((await query<{ n: number }>(demo.toString(), notOwned)).rows).toEqual([{ n: 0 }]);
      // Owning is doing: the bot can alter its tables, and drop the demo database as the demo does on every run.
      await query(upgraded.config.DATABASE_URL, 'BEGIN; ALTER TABLE backfill.pipelines ADD COLUMN probe int; ROLLBACK');
      await query(upgraded.config.DATABASE_URL, 'DROP DATABASE backfill_bot_demo WITH (FORCE)');
      const pool = createPool(upgraded.config.DATABASE_URL, 'backfill-bot-test');
      try {
        expect(await migrate(pool)).toEqual([]);
      } finally {
        await pool.end();
      }
      // And it said what it did.
      expect(lines).toEqual(expect.arrayContaining([
        `creating the role "${BOT_ROLE}" the bot connects as (not a superuser)`,
        `handing the database "backfill_bot" and everything in it to the role "${BOT_ROLE}" (it was the superuser's)`,
        `handing the database "backfill_bot_demo" and everything in it to the role "${BOT_ROLE}" (it was the superuser's)`,
      ]));
    } finally {
      await upgraded.close();
    }
  });
});
