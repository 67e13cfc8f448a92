import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { TestEngine } from './engine.js';

const WORKER = fileURLToPath(new URL('../../src/workerMain.ts', import.meta.url));

/**
 * `npm run worker` (the production entry point) as a child process on the engine's database, queues and prefix,
 * its Slack calls answered by the emulator at `apiUrl`; `env` over the defaults. The child is added to `started`
 * at once, so the caller's teardown stops it even when it never gets ready. Resolves once it says its workers run.
 */
export function startWorkerProcess(e: TestEngine, apiUrl: string, started: ChildProcess[], env: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
    env: {
      // An unset REDIS_URL stays unset (the child uses the PostgreSQL queues, like the engine): spawn leaves
      // undefined values out.
      ...process.env, DATABASE_URL: e.ctx.config.DATABASE_URL, REDIS_URL: e.ctx.config.REDIS_URL, QUEUE_PREFIX: e.ctx.config.QUEUE_PREFIX,
      SLACK_BOT_TOKEN: 'xoxb-test', SLACK_SIGNING_SECRET: 'test-signing-secret', WEBHOOK_SIGNING_SECRET: 'test-webhook-signing-secret',
      SLACK_API_URL: apiUrl, WORKER_CONCURRENCY: '2', STATUS_THROTTLE_MS: '0', ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  started.push(child);
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('workers running')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`a worker process exited with ${code ?? 'a signal'} before it was ready`)));
  });
}
