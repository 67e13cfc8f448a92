// A port the bot is told to listen on that another process holds (an earlier bot left running after a
// `kill -9` of npm, say): the start stops with one sentence that names the port and the way out, exit 1, no stack.

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testRedisUrl, type TestDatabase } from './support/db.js';

const run = promisify(execFile);
const BOT = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const WORKER = fileURLToPath(new URL('../src/workerMain.ts', import.meta.url));

async function entry(script: string, env: Record<string, string>): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', script], { env: { ...process.env, ...env }, timeout: 60_000 });
    return { code: 0, out: stdout + stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, out: failed.stdout + failed.stderr };
  }
}

/** Holds a free port on every address, as an earlier bot would. */
async function holdPort(): Promise<{ server: Server; port: number }> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, () => resolve());
  });
  return { server, port: (server.address() as AddressInfo).port };
}

describe('a port that is taken', () => {
  let db: TestDatabase;
  let held: { server: Server; port: number };
  let env: Record<string, string>;

  beforeAll(async () => {
    db = await createTestDatabase('empty');
    held = await holdPort();
    const redis = testRedisUrl();
    env = {
      DATABASE_URL: db.url, ...(redis ? { REDIS_URL: redis } : {}), QUEUE_PREFIX: `test-${randomBytes(6).toString('hex')}`,
      SLACK_BOT_TOKEN: 'xoxb-port-test', SLACK_SIGNING_SECRET: 'port-test-signing-secret', WEBHOOK_SIGNING_SECRET: 'port-test-webhook-signing-secret',
      SLACK_API_URL: 'http://127.0.0.1:1/api/',
    };
  });
  afterAll(async () => {
    held.server.close();
    await db.drop();
  });

  it('npm start on a PORT another process holds exits 1 with one sentence: which port, how to find the holder, how to choose another', async () => {
    const { code, out } = await entry(BOT, { ...env, PORT: String(held.port) });
    expect(code).toBe(1);
    const port = held.port;
    expect(out).toContain(`Port ${port} (PORT) is already in use by another process, most likely an earlier backfill-bot left running: ` +
      `find it with \`ss -ltnp 'sport = :${port}'\` or \`lsof -i :${port}\` and stop it, or set PORT to a free port (e.g. PORT=${port + 1}).`);
    expect(out).not.toMatch(/\n\s+at /);
    expect(out).not.toMatch(/EADDRINUSE/);
  });

  it('a worker on a METRICS_PORT another process holds says the same of METRICS_PORT', async () => {
    const { code, out } = await entry(WORKER, { ...env, METRICS_PORT: String(held.port) });
    expect(code).toBe(1);
    expect(out).toContain(`Port ${held.port} (METRICS_PORT) is already in use by another process`);
    expect(out).toContain(`or set METRICS_PORT to a free port (e.g. METRICS_PORT=${held.port + 1}).`);
    expect(out).not.toMatch(/\n\s+at /);
  });
});
