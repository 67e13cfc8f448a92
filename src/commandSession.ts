import { readFile } from 'node:fs/promises';
import { checkQueue, queueBackendOf, type RunConfig } from './backends.js';
import type { CommandEffects } from './commands/run.js';
import type { CatalogInput } from './core/catalog/apply.js';
import type { EngineContext } from './core/context.js';
import { migrate } from './db/migrate.js';
import { loadPeople, type People } from './db/people.js';
import { createPool, sessionSettings } from './db/pool.js';
import { BackfillError, ErrorCode } from './errors.js';

// The composition of one CLI command (src/cli/main.ts): a small pool of its own, the migrations applied, who is
// who, and the effects a terminal can have. The queue is loaded only when a stop takes jobs off it.

/** What one CLI command runs with: the engine's context, who is who, and the effects a terminal can have. */
export interface CommandSession {
  ctx: EngineContext;
  /** Slack ids to display names, so that a terminal can say who did what. */
  people: People;
  effects: CommandEffects;
  close(): Promise<void>;
}

/**
 * A CLI command's session: its own small pool, the migrations applied, and the effects of a terminal. It has no
 * Slack to tell (the workers' messages still go out from the bot) and no workers of its own to kick (theirs
 * sweep every few seconds); a stop takes the backfill's jobs off the queue when the queue answers.
 */
export async function openCommandSession(config: RunConfig): Promise<CommandSession> {
  const pool = createPool(config.DATABASE_URL, 'backfill-cli', sessionSettings(config));
  try {
    await migrate(pool);
    const ctx: EngineContext = { pool, config };
    return { ctx, people: await loadPeople(pool), effects: terminalEffects(config), close: () => pool.end() };
  } catch (error) {
    await pool.end();
    throw error;
  }
}

/** A statement PostgreSQL cancelled, said as a sentence: what a terminal prints for it, whatever raised it. */
export { explainCancellation } from './db/pool.js';

function terminalEffects(config: RunConfig): CommandEffects {
  return {
    kick: async () => undefined,
    dequeue: (backfillId) => dequeueWhenReachable(config, backfillId),
    tell: async () => undefined,
    changed: async () => undefined,
    readCatalog: readCatalogFile,
  };
}

/** The stopped backfill's queued jobs taken off the queue; when the queue does not answer, why (the stop stands). */
async function dequeueWhenReachable(config: RunConfig, backfillId: number): Promise<number | Error> {
  const unreachable = await checkQueue(queueBackendOf(config)).then(() => undefined, (error: unknown) => error as Error);
  if (unreachable) return unreachable;
  const { createStepQueue, removeQueuedJobs } = await import('./queue/stepQueue.js');
  const queue = createStepQueue(config);
  try {
    return await removeQueuedJobs(queue, backfillId);
  } finally {
    await queue.close();
  }
}

async function readCatalogFile(file: string): Promise<CatalogInput> {
  try {
    return { text: await readFile(file, 'utf8'), source: file };
  } catch (error) {
    throw new BackfillError(ErrorCode.BadInput, `Cannot read the catalog file ${file}: ${(error as Error).message}. Give the path of a YAML file, e.g. dev/demo/catalog.yml.`, { cause: error });
  }
}
