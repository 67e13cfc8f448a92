// The compiled build, as production runs it: `node --enable-source-maps dist/src/main.js` (npm start) stops in
// order on SIGTERM on a busy machine, exit 0; `npx backfill` (bin/backfill.mjs) runs dist/ in its own process,
// loads for `help` and `status` only what they need, and says what to do in one sentence when dist/ is missing.

import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startBackfill } from '../src/core/announce/start.js';
import { MIGRATION_LOCK_KEY } from '../src/db/migrate.js';
import { startSlackEmulator, type SlackEmulator } from '../dev/slack-emulator/index.js';
import { createTestDatabase, testRedisUrl, type TestDatabase } from './support/db.js';
import { createTestEngine, type TestEngine } from './support/engine.js';
import { waitUntil } from './support/wait.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BOT = path.join(ROOT, 'dist/src/main.js');
const BIN = path.join(ROOT, 'bin/backfill.mjs');

/** The newest modification of the TypeScript the build compiles. */
function newestSource(folder: string): number {
  let newest = 0;
  for (const entry of readdirSync(folder, { withFileTypes: true })) {
    const file = path.join(folder, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(file));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(file).mtimeMs);
  }
  return newest;
}

/**
 * Builds dist/ when it is missing (a clean clone whose install skipped scripts) or older than the sources, so the
 * tests run the code they sit beside. tsc writes every output on each build, so dist/src/main.js dates the build.
 */
async function ensureBuilt(): Promise<void> {
  const built = existsSync(BOT) ? statSync(BOT).mtimeMs : 0;
  if (built > Math.max(...['src', 'handlers', 'jobs'].map((folder) => newestSource(path.join(ROOT, folder))))) return;
  await run('npm', ['run', 'build'], { cwd: ROOT, timeout: 240_000 });
}

/** Two processes that keep two cores busy until they are killed: the machine the bot stops on is not idle. */
function burnCpu(): ChildProcess[] {
  return [0, 1].map(() => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
}

/** Which of `packages` (from node_modules, all CommonJS, so in require.cache) a `node` run of `args` loaded. */
async function packagesLoaded(args: string[], env: Record<string, string>, packages: string[]): Promise<string[]> {
  const dir = await mkdtemp(path.join(tmpdir(), 'backfill-loaded-'));
  const listFile = path.join(dir, 'loaded.json');
  // Written on exit, which the CLI's process.exit still fires.
  const preload = `data:text/javascript,${encodeURIComponent(`
    import { createRequire } from 'node:module';
    import { writeFileSync } from 'node:fs';
    const cache = createRequire(${JSON.stringify(BIN)}).cache;
    process.on('exit', () => writeFileSync(${JSON.stringify(listFile)}, JSON.stringify(Object.keys(cache))));`)}`;
  try {
    await run(process.execPath, ['--import', preload, ...args], { env: { ...process.env, ...env }, timeout: 60_000 });
    const files = JSON.parse(await readFile(listFile, 'utf8')) as string[];
    return packages.filter((name) => files.some((file) => file.includes(`${path.sep}node_modules${path.sep}${name}${path.sep}`)));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

beforeAll(ensureBuilt, 300_000);

describe('npm start on the compiled build', () => {
  let db: TestDatabase;
  let slack: SlackEmulator;
  let children: ChildProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('empty');
    slack = await startSlackEmulator();
  });
  afterEach(() => {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    children = [];
  });
  afterAll(async () => {
    await slack.close();
    await db.drop();
  });

  /** The compiled bot on the test's database and the Slack emulator: its process, what it printed so far, and its exit. */
  function startBot(): { bot: ChildProcess; output: () => string; exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> } {
    const redis = testRedisUrl();
    const bot = spawn(process.execPath, ['--enable-source-maps', BOT], {
      env: {
        ...process.env, DATABASE_URL: db.url, ...(redis ? { REDIS_URL: redis } : {}), QUEUE_PREFIX: `test-${randomBytes(6).toString('hex')}`,
        SLACK_BOT_TOKEN: 'xoxb-compiled-test', SLACK_SIGNING_SECRET: 'compiled-test-signing-secret',
        WEBHOOK_SIGNING_SECRET: 'compiled-test-webhook-signing-secret', SLACK_API_URL: slack.url, PORT: '0', LOG_LEVEL: 'info',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(bot);
    let out = '';
    bot.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    bot.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => bot.once('exit', (code, signal) => resolve({ code, signal })));
    return { bot, output: () => out, exited };
  }

  it('stops in order on SIGTERM while the machine is busy: the shutdown lines, then exit 0', async () => {
    children.push(...burnCpu());
    const { bot, output, exited } = startBot();

    await waitUntil(() => output().includes('backfill-bot listening on') || bot.exitCode !== null, 'the compiled bot to say it listens', 90_000);
    expect(output()).toContain('backfill-bot listening on');
    bot.kill('SIGTERM');
    const { code, signal } = await exited;

    // Ended by its own handler (node, no relay in between), not by the signal's default action.
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    const messages = output().split('\n').filter((line) => line.startsWith('{')).map((line) => (JSON.parse(line) as { msg: string }).msg);
    const stopping = messages.findIndex((msg) => msg.startsWith('SIGTERM: stopping'));
    expect(stopping).toBeGreaterThan(messages.findIndex((msg) => msg.startsWith('backfill-bot listening on')));
    expect(messages.at(-1)).toBe('stopped');
  }, 180_000);

  it('stops as soon as it has started on a SIGTERM sent while it starts, exit 0', async () => {
    // Its start held in place: another session holds the migrations' lock, and the bot waits on it.
    const holder = await db.pool.connect();
    try {
      await holder.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [MIGRATION_LOCK_KEY]);
      const { bot, output, exited } = startBot();
      const waiting = async () => (await holder.query(
        `SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND datname = current_database()`)).rowCount === 1;
      await waitUntil(waiting, 'the bot to wait on the migrations\' lock', 90_000);
      bot.kill('SIGTERM');
      await waitUntil(() => output().includes('SIGTERM: stopping as soon as the start is done') || bot.exitCode !== null || bot.signalCode !== null,
        'the bot to say it stops once started');
      // Not ended by the signal's default action before its stop could run.
      expect({ code: bot.exitCode, signal: bot.signalCode }).toEqual({ code: null, signal: null });
      await holder.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [MIGRATION_LOCK_KEY]);
      const { code, signal } = await exited;
      expect({ code, signal }).toEqual({ code: 0, signal: null });
      const messages = output().split('\n').filter((line) => line.startsWith('{')).map((line) => (JSON.parse(line) as { msg: string }).msg);
      const order = ['SIGTERM: stopping as soon as the start is done', 'backfill-bot listening on', 'SIGTERM: stopping (running steps', 'stopped']
        .map((start) => messages.findIndex((msg) => msg.startsWith(start)));
      expect(order.every((at) => at >= 0)).toBe(true);
      expect([...order].sort((a, b) => a - b)).toEqual(order);
    } finally {
      holder.release();
    }
  }, 180_000);
});

describe('npx backfill on the compiled build', () => {
  let engine: TestEngine;
  let env: Record<string, string>;

  beforeAll(async () => {
    engine = await createTestEngine('month-end');
    env = { DATABASE_URL: engine.ctx.config.DATABASE_URL, QUEUE_PREFIX: engine.ctx.config.QUEUE_PREFIX };
  });
  afterAll(async () => engine.close());

  it('answers help without loading PostgreSQL, BullMQ or Bolt', async () => {
    const { stdout } = await run(process.execPath, [BIN, 'help'], { env: { ...process.env, ...env } });
    expect(stdout).toContain('status');
    expect(await packagesLoaded([BIN, 'help'], env, ['pg', 'bullmq', 'ioredis', '@slack/bolt'])).toEqual([]);
  });

  it('answers status <id> without loading BullMQ, Bolt or resvg', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: 'U07ONCALL' });
    const { stdout } = await run(process.execPath, [BIN, 'status', String(backfill.id)], { env: { ...process.env, ...env } });
    expect(stdout).toContain(`Backfill #${backfill.id} of orders`);
    expect(await packagesLoaded([BIN, 'status', String(backfill.id)], env, ['pg', 'bullmq', '@slack/bolt', '@resvg/resvg-js'])).toEqual(['pg']);
  });

  it('says in one sentence to build when dist/ is missing, exit 1', async () => {
    // The entry as a checkout holds it, in a checkout of its own with nothing built.
    const checkout = await mkdtemp(path.join(tmpdir(), 'backfill-unbuilt-'));
    try {
      await mkdir(path.join(checkout, 'bin'));
      await copyFile(BIN, path.join(checkout, 'bin/backfill.mjs'));
      const failed = await run(process.execPath, [path.join(checkout, 'bin/backfill.mjs'), 'help']).then(() => undefined, (error: unknown) => error as { code: number; stdout: string; stderr: string });
      expect(failed?.code).toBe(1);
      expect(failed?.stdout).toBe('');
      expect(failed?.stderr.trim()).toBe('The backfill CLI is not built yet (there is no dist/ in this checkout): run npm run build, then run the command again.');
    } finally {
      await rm(checkout, { recursive: true, force: true });
    }
  });
});
