// Jobs per second of one queue backend: N no-op jobs added with one addBulk, then processed by one BullMQ
// Worker (concurrency 8) in this process, both built by src/queue/connection.ts on that backend as the bot
// builds its own. The jobs carry the options dispatch gives a step job (attempts, exponential backoff,
// removeOnComplete by age and count), so the backend does the bookkeeping it does for the bot. What it
// measures is the queue alone: a backfill's steps take hundreds of milliseconds each and number a few dozen.

import type { Queue } from 'bullmq';
import type { QueueBackend } from '../src/backends.js';
import { quoteIdent, type Pool } from '../src/db/pool.js';
import { createQueue, createWorker } from '../src/queue/connection.js';

export const NOOP_CONCURRENCY = 8;
const PROCESS_TIMEOUT_MS = 300_000;

export interface JobsPass {
  /** addBulk of every job, in seconds. */
  addSeconds: number;
  /** The worker's first fetch to its last job completed, in seconds. */
  processSeconds: number;
}

/** A queue of its own for the no-op jobs, beside the bench's step queue on the same backend. */
export function noopQueueName(rep: number | 'warm-up'): string {
  return `bench-noop-${rep}`;
}

/**
 * One pass: a fresh queue, `jobs` jobs added (timed), a worker started and run until every job completed
 * (timed), then the queue obliterated (not timed).
 */
export async function jobsPass(backend: QueueBackend, name: string, jobs: number, options: { attempts: number; backoffMs: number }): Promise<JobsPass> {
  const queue = createQueue(backend, name);
  try {
    await queue.waitUntilReady();
    const bulk = Array.from({ length: jobs }, (_, n) => ({
      name: 'noop',
      data: { n },
      opts: {
        attempts: options.attempts,
        backoff: { type: 'exponential', delay: options.backoffMs },
        removeOnComplete: { age: 24 * 3600, count: 5000 },
        removeOnFail: { age: 7 * 24 * 3600 },
      },
    }));
    const addStarted = performance.now();
    await queue.addBulk(bulk);
    const addSeconds = (performance.now() - addStarted) / 1000;
    const processSeconds = await processAll(backend, name, jobs);
    return { addSeconds, processSeconds };
  } finally {
    await obliterate(queue);
  }
}

async function processAll(backend: QueueBackend, name: string, jobs: number): Promise<number> {
  const worker = createWorker(backend, name, async () => undefined, { concurrency: NOOP_CONCURRENCY, autorun: false });
  let failure: Error | undefined;
  worker.on('error', (error) => {
    failure ??= error;
  });
  try {
    await worker.waitUntilReady();
    let completed = 0;
    const done = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${completed} of ${jobs} no-op jobs completed after ${PROCESS_TIMEOUT_MS / 1000} s${failure ? ` (${failure.message})` : ''}`)), PROCESS_TIMEOUT_MS);
      worker.on('completed', () => {
        completed += 1;
        if (completed === jobs) {
          clearTimeout(timer);
          resolve();
        }
      });
      worker.on('failed', (_job, error) => {
        clearTimeout(timer);
        reject(new Error(`a no-op job failed: ${error.message}`));
      });
    });
    const started = performance.now();
    const running = worker.run();
    await done;
    const seconds = (performance.now() - started) / 1000;
    await worker.close();
    await running;
    return seconds;
  } finally {
    await worker.close(true);
  }
}

async function obliterate(queue: Queue): Promise<void> {
  try {
    await queue.obliterate({ force: true });
  } finally {
    await queue.close();
  }
}

/**
 * Autovacuum may be off (it is on the bench machine): the PostgreSQL backend's tables would carry every
 * earlier pass's dead rows into the next. Run before every timed pass and backfill on that backend, never timed.
 */
export async function vacuumQueueSchema(pool: Pool, backend: QueueBackend): Promise<void> {
  if (backend.kind !== 'postgres') return;
  const { rows } = await pool.query<{ name: string }>(
    `SELECT tablename AS name FROM pg_tables WHERE schemaname = $1::text ORDER BY tablename`, [backend.schema]);
  for (const { name } of rows) await pool.query(`VACUUM ANALYZE ${quoteIdent(backend.schema)}.${quoteIdent(name)}`);
}
