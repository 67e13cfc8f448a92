import { randomBytes } from 'node:crypto';
import { Queue } from 'bullmq';
import { loadConfig } from '../../src/config.js';
import type { Messenger, OwnerMessage, StepContext } from '../../src/core/steps.js';
import { STEP_QUEUE } from '../../jobs/registry.js';
import { redisConnection } from '../../src/queue/stepQueue.js';
import { createTestDatabase } from './db.js';

/** Records what would have been delivered; the engine's own behaviour around it is real. */
export class RecordingMessenger implements Messenger {
  readonly announced: OwnerMessage[] = [];
  readonly sent: OwnerMessage[] = [];
  readonly diffs: number[] = [];

  async announce(message: OwnerMessage): Promise<undefined> {
    this.announced.push(message);
    return undefined;
  }

  async notifyOwner(message: OwnerMessage): Promise<void> {
    this.sent.push(message);
  }

  async reportDiff(backfillId: number): Promise<void> {
    this.diffs.push(backfillId);
  }

  readonly reconciliations: number[] = [];

  async reportReconciliation(backfillId: number): Promise<void> {
    this.reconciliations.push(backfillId);
  }

  readonly reminded: OwnerMessage[] = [];
  readonly direct: { user: string; text: string }[] = [];

  async directMessage(user: string, text: string): Promise<void> {
    this.direct.push({ user, text });
  }


  async remind(message: OwnerMessage): Promise<void> {
    this.reminded.push(message);
  }

  async changed(): Promise<void> {}
}

export interface TestEngine {
  ctx: StepContext;
  notifier: RecordingMessenger;
  close(): Promise<void>;
}

/**
 * A real database cloned from a seeded template and a queue prefix of its own in the real Redis, so tests
 * never see each other's rows or jobs. Short backoffs keep retry tests quick; nothing here is mocked.
 */
export async function createTestEngine(scenario: 'month-end' | 'night-9-outage' | 'empty' = 'month-end', env: Record<string, string> = {}): Promise<TestEngine> {
  const db = await createTestDatabase(scenario);
  const prefix = `test-${randomBytes(6).toString('hex')}`;
  const config = loadConfig({
    DATABASE_URL: db.url,
    REDIS_URL: process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379',
    QUEUE_PREFIX: prefix,
    JOB_BACKOFF_MS: '50',
    WEBHOOK_TIMEOUT_MS: '2000',
    ...env,
  });
  const notifier = new RecordingMessenger();
  return {
    ctx: { pool: db.pool, config, messenger: notifier },
    notifier,
    async close() {
      const queue = new Queue(STEP_QUEUE, { connection: redisConnection(config), prefix });
      await queue.obliterate({ force: true });
      await queue.close();
      await db.drop();
    },
  };
}

export async function countRows(ctx: StepContext, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${sql}) q`, params);
  return rows[0]?.n ?? -1;
}
