// One benchmark worker process: the real step worker and dispatcher sweep (src/worker.ts), with messages
// printed nowhere, against the database, queue prefix and queue backend the parent passes in the environment
// (DATABASE_URL, QUEUE_PREFIX; REDIS_URL for queues on Redis, taken out for queues in PostgreSQL: src/backends.ts
// decides as for every process). Started by bench/workerProcesses.ts as `node --import tsx bench/worker.ts`,
// so /proc/<pid> is this process and not a launcher. It tells the parent it is ready over IPC and stops on
// SIGTERM, or when the parent goes away. Its ready message names the queue
// backend it took, so the parent can check it is the one it measures.
//
// --explain-file <path>: every auto_explain notice (the parent sets PGOPTIONS, bench/autoExplain.ts) is appended
// to the file as one JSON line with its EXPLAIN (ANALYZE, BUFFERS) plan; never on a timed run.

import { appendFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { PrintingMessenger } from '../src/cli/runner.js';
import { queueBackendOf } from '../src/backends.js';
import { loadConfig } from '../src/config.js';
import { createPool, sessionSettings } from '../src/db/pool.js';
import { startWorkers } from '../src/worker.js';
import { listenForPlans } from './autoExplain.js';
import { WORKER_APPLICATION } from './workerProcesses.js';

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { 'explain-file': { type: 'string' } } });
  // The parent names the bench database in DATABASE_URL (on its server, or the embedded one it opened).
  const loaded = loadConfig();
  if (!loaded.DATABASE_URL) throw new Error('bench/worker.ts needs DATABASE_URL: bench/run.ts starts it with the bench database');
  const config = { ...loaded, DATABASE_URL: loaded.DATABASE_URL };
  // The bounds the production worker runs with (src/workerMain.ts).
  const pool = createPool(config.DATABASE_URL, WORKER_APPLICATION, sessionSettings(config));
  const explainFile = values['explain-file'];
  if (explainFile) listenForPlans(pool, (plan) => appendFileSync(explainFile, `${JSON.stringify(plan)}\n`));
  const workers = await startWorkers({ pool, config, messenger: new PrintingMessenger(() => undefined) });
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    workers.close().then(() => pool.end()).then(() => process.exit(0), (error: unknown) => {
      console.error(`bench worker ${process.pid}: ${(error as Error).message}`);
      process.exit(1);
    });
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  process.once('disconnect', stop);
  const queue = queueBackendOf(config);
  process.send?.({ ready: true, pid: process.pid, queue: queue.kind === 'redis' ? `redis:${queue.prefix}` : `postgres:${queue.schema}` });
}

main().catch((error: unknown) => {
  console.error(`bench worker ${process.pid} failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
