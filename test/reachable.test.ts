// A configured PostgreSQL or Redis that is not there: every entry point says so in one sentence (the URL without
// its password, what was tried, how to fix it), exits non-zero, prints no stack trace, and creates nothing.

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { requireRedis } from '../src/db/reachable.js';
import { ErrorCode, isBackfillError } from '../src/errors.js';
import { databaseUrl, dropDatabase, withAdminClient } from './support/db.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));
const WORKER = fileURLToPath(new URL('../src/workerMain.ts', import.meta.url));
/** Port 1 on the loopback: nothing listens there, so a connection is refused at once. */
const NOWHERE_PG = 'postgres://postgres:s3cret-pw@127.0.0.1:1/backfill_bot';
const NOWHERE_REDIS = 'redis://:s3cret-pw@127.0.0.1:1';

async function entry(script: string, args: string[], env: Record<string, string>): Promise<{ code: number; out: string; stdout: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', script, ...args], { env: { ...process.env, ...env } });
    return { code: 0, out: stdout + stderr, stdout };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, out: failed.stdout + failed.stderr, stdout: failed.stdout };
  }
}

async function databaseExists(name: string): Promise<boolean> {
  return withAdminClient(async (client) => (await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name])).rowCount === 1);
}

const missing = `backfill_bot_test_missing_${randomBytes(4).toString('hex')}`;
afterAll(async () => dropDatabase(missing));

describe('a service that is not there', () => {
  it('the CLI names the database URL without its password, says what to do, and prints no stack', async () => {
    const { code, out } = await entry(CLI, ['status'], { DATABASE_URL: NOWHERE_PG });
    expect(code).toBe(1);
    expect(out.trim()).toBe('PostgreSQL did not answer at 127.0.0.1:1 (DATABASE_URL=postgres://postgres:***@127.0.0.1:1/backfill_bot): ' +
      'the connection was refused (nothing listens there). Start PostgreSQL there, or set DATABASE_URL to a server that answers.');
  });

  it('a database that does not exist is not created: the CLI names migrate --create, which does create it', async () => {
    const url = databaseUrl(missing);
    const refused = await entry(CLI, ['status'], { DATABASE_URL: url });
    expect(refused.code).toBe(1);
    const server = new URL(url).host.replaceAll('.', '\\.');
    expect(refused.out).toMatch(new RegExp(`The database "${missing}" does not exist on ${server} .*Create it with \`npx backfill migrate --create\`, or correct the database name in DATABASE_URL\\. Nothing was created\\.`));
    expect(refused.out).not.toMatch(/\n\s+at /);
    expect(await databaseExists(missing)).toBe(false);

    const created = await entry(CLI, ['migrate', '--create'], { DATABASE_URL: url });
    expect(created.code).toBe(0);
    expect(created.stdout).toBe('Migrations applied.\n');
    expect(await databaseExists(missing)).toBe(true);
  });

  it('a worker whose Redis does not answer exits 1 with one sentence', async () => {
    const { code, out } = await entry(WORKER, [], {
      DATABASE_URL: databaseUrl('postgres'), REDIS_URL: NOWHERE_REDIS, SLACK_BOT_TOKEN: 'xoxb-test', SLACK_SIGNING_SECRET: 'test-signing-secret', WEBHOOK_SIGNING_SECRET: 'test-webhook-signing-secret',
    });
    expect(code).toBe(1);
    expect(out.trim()).toBe('Redis did not answer at 127.0.0.1:1 (REDIS_URL=redis://:***@127.0.0.1:1): the connection was refused (nothing listens there). ' +
      'Start Redis there, or set REDIS_URL to one that answers.');
  });

  it('requireRedis refuses with a coded error', async () => {
    const error = await requireRedis(NOWHERE_REDIS).catch((e: unknown) => e);
    expect(isBackfillError(error, ErrorCode.Unreachable)).toBe(true);
    expect((error as Error).message).not.toContain('s3cret');
  });
});
