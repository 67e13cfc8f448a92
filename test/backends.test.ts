// The zero-configuration default: with DATABASE_URL and REDIS_URL unset every entry point runs on an embedded
// PostgreSQL of the project's own (a data folder per test here, never the developer's .backfill-bot/pg) with
// BullMQ's queues in it. Real server binaries, real processes, real signals.

import { execFile, spawn } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { mkdir, chmod } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { openBackends } from '../src/backends.js';
import { loadConfig } from '../src/config.js';
import { isAlive } from '../src/db/embeddedPostgres.js';
import { ErrorCode, isBackfillError } from '../src/errors.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const WORKER = fileURLToPath(new URL('../src/workerMain.ts', import.meta.url));
const EMBEDDED = fileURLToPath(new URL('../src/db/embeddedPostgres.ts', import.meta.url));

const scratch = mkdtempSync(path.join(os.tmpdir(), 'backfill-bot-embedded-'));
// mkdtemp makes it 0700; as root the server runs as "postgres", which must pass through it.
chmodSync(scratch, 0o755);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A data folder of the test's own, under a parent every user may enter (the server may run as "postgres"). */
function dataDir(name: string): string {
  return path.join(scratch, name, 'pg');
}

/** The environment of an entry point on a machine where nothing is configured. */
function bareEnv(dir: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const { DATABASE_URL: _database, REDIS_URL: _redis, DEMO_DATABASE_URL: _demo, ...rest } = process.env;
  return { ...rest, EMBEDDED_PG_DIR: dir, ...extra };
}

function serverPid(dir: string): number | undefined {
  try {
    return Number(readFileSync(path.join(dir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return undefined;
  }
}

function alive(pid: number | undefined): boolean {
  return pid !== undefined && isAlive(pid);
}

async function query(url: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end();
  }
}

describe('the embedded default (DATABASE_URL and REDIS_URL unset)', () => {
  it('starts a PostgreSQL of its own with the queues in it; a second user joins it, and the last one out stops it', async () => {
    const dir = dataDir('shared');
    const config = loadConfig({ EMBEDDED_PG_DIR: dir });
    const first = await openBackends(config);
    expect(first.database).toBe('embedded');
    expect(first.queue).toEqual({ kind: 'postgres', databaseUrl: first.config.DATABASE_URL, schema: 'bullmq_backfill' });
    expect(first.summary).toMatch(new RegExp(`^PostgreSQL: embedded, ${dir} on 127\\.0\\.0\\.1:\\d+; queues: BullMQ on PostgreSQL \\(schema bullmq_backfill`));
    // The password is generated and kept beside the data folder; the summary never shows it.
    expect(first.summary).not.toContain(new URL(first.config.DATABASE_URL).password);
    const { rows } = await query(first.config.DATABASE_URL, "SELECT current_database() AS db, current_setting('server_version_num')::int AS version, current_setting('listen_addresses') AS listen");
    expect(rows[0]).toEqual({ db: 'backfill_bot', version: expect.any(Number), listen: '127.0.0.1' });
    expect(rows[0].version).toBeGreaterThanOrEqual(180000);

    const second = await openBackends(config);
    expect(second.summary).toContain('(started by another process)');
    expect(second.config.DATABASE_URL).toBe(first.config.DATABASE_URL);
    const pid = serverPid(dir);
    expect(alive(pid)).toBe(true);

    await first.close();
    // Still in use by the second: still answering.
    expect((await query(second.config.DATABASE_URL, 'SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    await second.close();
    expect(alive(pid)).toBe(false);
    expect(existsSync(path.join(dir, 'postmaster.pid'))).toBe(false);
  });

  it('stops a server left running by a process killed with SIGKILL before it starts its own', async () => {
    const dir = dataDir('killed');
    // A process that opens the server and dies without a chance to stop it.
    const script = `import { openEmbeddedPostgres } from ${JSON.stringify(EMBEDDED)};
      await openEmbeddedPostgres({ dataDir: ${JSON.stringify(dir)} });
      process.kill(process.pid, 'SIGKILL');`;
    const killed = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
    expect(killed.signal).toBe('SIGKILL');
    const orphan = serverPid(dir);
    expect(alive(orphan)).toBe(true);

    const lines: string[] = [];
    const backends = await openBackends(loadConfig({ EMBEDDED_PG_DIR: dir }), { log: (line) => lines.push(line) });
    try {
      expect(lines).toContain(`stopping an embedded PostgreSQL (pid ${orphan}) left running by a process that ended without stopping it`);
      expect(alive(orphan)).toBe(false);
      expect(serverPid(dir)).not.toBe(orphan);
      expect(backends.summary).not.toContain('started by another process');
      expect((await query(backends.config.DATABASE_URL, 'SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    } finally {
      await backends.close();
    }
  });

  it('runs the CLI with nothing configured, names the backends on stderr, and leaves no server behind', async () => {
    const dir = dataDir('cli');
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', CLI, 'status'], { env: bareEnv(dir) });
    expect(stderr).toMatch(/PostgreSQL: embedded, .* queues: BullMQ on PostgreSQL/);
    expect(stdout).toMatch(/No backfills yet|backfill/i);
    expect(existsSync(path.join(dir, 'postmaster.pid'))).toBe(false);
  });

  it('a worker stopped with Ctrl-C closes its workers, queues and pool before it stops the server', async () => {
    const dir = dataDir('worker');
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
      env: bareEnv(dir, { SLACK_BOT_TOKEN: 'xoxb-test', SLACK_SIGNING_SECRET: 'test-signing-secret', WEBHOOK_SIGNING_SECRET: 'test-webhook-signing-secret', SLACK_API_URL: 'http://127.0.0.1:1/api/' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const deadline = Date.now() + 60_000;
    while (!output.includes('workers running') && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
    expect(output).toMatch(/PostgreSQL: embedded, .*; queues: BullMQ on PostgreSQL/);
    expect(output).toContain('workers running');
    const server = serverPid(dir);
    const logFrom = statSync(`${dir}.log`).size;

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    expect(alive(server)).toBe(false);
    // Had the server gone first, every connection still open would have been cut ("terminating connection
    // due to administrator command") and the worker would have logged lost connections.
    const serverLog = readFileSync(`${dir}.log`, 'utf8').slice(logFrom);
    expect(serverLog).toContain('database system is shut down');
    expect(serverLog).not.toMatch(/terminating connection due to administrator command/);
    expect(output).not.toMatch(/connection lost|Connection terminated|ECONNREFUSED/);
  });

  it.skipIf(process.getuid?.() !== 0)('as root, runs the server as the unprivileged user "postgres", and says so when that user cannot reach the data folder', async () => {
    const dir = dataDir('root');
    const backends = await openBackends(loadConfig({ EMBEDDED_PG_DIR: dir }));
    try {
      const postgresUid = Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout.trim());
      expect(statSync(dir).uid).toBe(postgresUid);
      const serverUid = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${serverPid(dir)}/status`, 'utf8'))?.[1];
      expect(Number(serverUid)).toBe(postgresUid);
    } finally {
      await backends.close();
    }

    const closed = path.join(scratch, 'private');
    await mkdir(path.join(closed, 'project'), { recursive: true });
    await chmod(closed, 0o700);
    const error = await openBackends(loadConfig({ EMBEDDED_PG_DIR: path.join(closed, 'project', 'pg') })).catch((e: unknown) => e);
    expect(isBackfillError(error, ErrorCode.Unreachable)).toBe(true);
    expect((error as Error).message).toBe(`The embedded PostgreSQL runs as the user "postgres" (PostgreSQL refuses to run as root), and that user cannot enter ${closed} ` +
      `(mode 700), which holds ${path.join(closed, 'project', 'pg')}. Let it through with \`chmod o+x ${closed}\`, put the project (or EMBEDDED_PG_DIR) under a folder it can enter, ` +
      'or set DATABASE_URL to a PostgreSQL server.');
    expect(existsSync(path.join(closed, 'project', 'pg'))).toBe(false);
  });
});
