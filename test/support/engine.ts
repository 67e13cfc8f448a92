import { randomBytes } from 'node:crypto';
import type { RunConfig } from '../../src/backends.js';
import { loadConfig } from '../../src/config.js';
import type { EscalationMessage, EscalationReach, Messenger, OwnerMessage } from '../../src/core/messenger.js';
import type { Notice } from '../../src/core/notices.js';
import { backticks, slackNoticeText } from '../../src/views/notices.js';
import { escalationText } from '../../src/views/waiting.js';
import { slackPerson } from '../../src/views/format.js';
import { slackText } from '../../src/markup.js';
import { startApproved } from '../../src/core/lifecycle/dispatch.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { executeStep, type StepContext } from '../../src/core/procedure.js';
import { createStepQueue } from '../../src/queue/stepQueue.js';
import { createTestDatabase, testRedisUrl, type TestScenario } from './db.js';

type MessengerMethod = keyof Messenger;

/**
 * Records what would have been delivered; the engine's own behaviour around it is real. Like the Slack
 * messenger it delivers each intent at most once: a second call with an intent already delivered is ignored
 * (counted in duplicatesSuppressed). failNext makes a method throw, to stand for Slack refusing or failing.
 */
/** A delivered owner message with the words Slack would show, for assertions on what was said. */
export type Told = OwnerMessage & { text: string };

const told = (message: OwnerMessage): Told => ({ ...message, text: slackNoticeText(message.notice) });

export class RecordingMessenger implements Messenger {
  readonly announced: Told[] = [];
  readonly sent: Told[] = [];
  readonly diffs: number[] = [];
  readonly reconciliations: number[] = [];
  readonly reminded: Told[] = [];
  readonly direct: { user: string; notice: Notice; text: string; intent: string }[] = [];
  readonly incidentNotices: { backfillId: number; notice: Notice; text: string; intent: string }[] = [];
  /** Each escalation step delivered, one entry per person told (or the channel), with the words Slack would show. */
  readonly escalations: { backfillId: number; consumer: string; step: number; to: string; text: string; intent: string }[] = [];
  /** The members escalate() finds in a user group, by its id (none unless a test sets them). */
  readonly usergroups = new Map<string, string[]>();
  /** Every delivery in order: which method, which intent (the diffs and reconciliations keep theirs here). */
  readonly deliveries: { method: MessengerMethod; intent: string }[] = [];
  /** Calls whose intent was delivered already, and so were not delivered again. */
  duplicatesSuppressed = 0;
  private readonly delivered = new Set<string>();
  private readonly faults = new Map<MessengerMethod, { error: Error; remaining: number }[]>();

  /** The next `times` calls of `method` throw `error` (and deliver nothing); queued after earlier failNexts. */
  failNext(method: MessengerMethod, error: Error, times = 1): void {
    if (!Number.isInteger(times) || times < 1) throw new Error(`times must be a positive integer, got ${times}`);
    const queue = this.faults.get(method) ?? [];
    queue.push({ error, remaining: times });
    this.faults.set(method, queue);
  }

  async announce(message: OwnerMessage): Promise<undefined> {
    if (this.deliver('announce', message.intent)) this.announced.push(told(message));
    return undefined;
  }

  async notifyOwner(message: OwnerMessage): Promise<void> {
    if (this.deliver('notifyOwner', message.intent)) this.sent.push(told(message));
  }

  async reportDiff(backfillId: number, intent: string): Promise<void> {
    if (this.deliver('reportDiff', intent)) this.diffs.push(backfillId);
  }

  async reportReconciliation(backfillId: number, intent: string): Promise<void> {
    if (this.deliver('reportReconciliation', intent)) this.reconciliations.push(backfillId);
  }

  async directMessage(user: string, notice: Notice, intent: string): Promise<void> {
    if (this.deliver('directMessage', intent)) this.direct.push({ user, notice, text: slackNoticeText(notice), intent });
  }

  async remind(message: OwnerMessage): Promise<void> {
    if (this.deliver('remind', message.intent)) this.reminded.push(told(message));
  }

  /**
   * Like the Slack messenger: a channel's post under the step's intent, each person's DM under `<intent>:<user>`,
   * each at most once; a user group's members are its entry in `usergroups`.
   */
  async escalate(message: EscalationMessage): Promise<EscalationReach> {
    const { to } = message;
    const text = escalationText(message, slackPerson, backticks, slackText);
    const record = (whom: string, intent: string) => {
      if (this.deliver('escalate', intent)) this.escalations.push({ backfillId: message.backfillId, consumer: message.consumer, step: message.facts.step, to: whom, text, intent });
    };
    if (to.kind === 'channel') {
      record(to.channel, message.intent);
      return { users: [], channel: to.channel, unreachable: [] };
    }
    const users = to.kind === 'delegates' ? to.users : 'user' in to ? [to.user] : (this.usergroups.get(to.usergroup) ?? []);
    for (const user of users) record(user, `${message.intent}:${user}`);
    return { users, unreachable: [] };
  }

  async incidentNotice(backfillId: number, notice: Notice, intent: string): Promise<void> {
    if (this.deliver('incidentNotice', intent)) this.incidentNotices.push({ backfillId, notice, text: slackNoticeText(notice), intent });
  }

  async changed(): Promise<void> {
    this.throwIfFailing('changed');
  }

  /** True when this call delivers `intent`; false when it was delivered before; throws an injected failure. */
  private deliver(method: MessengerMethod, intent: string): boolean {
    if (this.delivered.has(intent)) {
      this.duplicatesSuppressed += 1;
      return false;
    }
    this.throwIfFailing(method);
    this.delivered.add(intent);
    this.deliveries.push({ method, intent });
    return true;
  }

  private throwIfFailing(method: MessengerMethod): void {
    const queue = this.faults.get(method);
    const head = queue?.[0];
    if (!queue || !head) return;
    head.remaining -= 1;
    if (head.remaining <= 0) queue.shift();
    throw head.error;
  }
}

export interface TestEngine {
  ctx: StepContext;
  notifier: RecordingMessenger;
  close(): Promise<void>;
}

/** The webhook signing secret of every test engine (a test may give its own in `env`). */
export const TEST_WEBHOOK_SECRET = 'test-webhook-signing-secret-harborlight';

/**
 * A real database cloned from a seeded template and a queue prefix of its own in the real Redis, so tests
 * never see each other's rows or jobs. Short backoffs keep retry tests quick; nothing here is mocked.
 */
export async function createTestEngine(scenario: TestScenario = 'month-end', env: Record<string, string> = {}): Promise<TestEngine> {
  const db = await createTestDatabase(scenario);
  const prefix = `test-${randomBytes(6).toString('hex')}`;
  const config: RunConfig = { ...loadConfig({
    // Unset: BullMQ's PostgreSQL backend, its schema inside the test's own database.
    ...(testRedisUrl() ? { REDIS_URL: testRedisUrl() } : {}),
    QUEUE_PREFIX: prefix,
    JOB_BACKOFF_MS: '50',
    WEBHOOK_TIMEOUT_MS: '2000',
    // Set explicitly: there is no default, and the webhook tests verify signatures with it.
    WEBHOOK_SIGNING_SECRET: TEST_WEBHOOK_SECRET,
    // The demo's hours are 60 rows, far below SWAP_MIN_ROWS: a partition of its own hour is published by swap
    // whatever its size, as the swap's tests mean it to be; test/core/swapSize.test.ts takes the default.
    SWAP_MIN_ROWS: '0',
    ...env,
  }), DATABASE_URL: db.url };
  const notifier = new RecordingMessenger();
  return {
    ctx: { pool: db.pool, config, messenger: notifier },
    notifier,
    async close() {
      // Jobs kept in PostgreSQL go with the database; Redis keeps them under the test's prefix.
      if (config.REDIS_URL) {
        const queue = createStepQueue(config);
        await queue.obliterate({ force: true });
        await queue.close();
      }
      await db.drop();
    },
  };
}

export async function countRows(ctx: StepContext, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${sql}) q`, params);
  return rows[0]?.n ?? -1;
}

/**
 * Starts night 15 of the orders pipeline, opens its gate by an operator's override (`why`) and delivers the
 * owners' announcements: approved and ready to run.
 */
export async function approvedNight15(ctx: StepContext, why: string): Promise<number> {
  const operator = 'U07ONCALL';
  const { backfill } = await startBackfill(ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: operator });
  await overrideGate(ctx, { backfillId: backfill.id, actor: operator, reason: why });
  for (const key of ['payout_export', 'settlement_report']) {
    const outcome = await executeStep(ctx, { backfillId: backfill.id, kind: 'announce', key });
    if (outcome !== 'done') throw new Error(`the announcement to ${key} of backfill #${backfill.id} ended ${outcome}`);
  }
  await startApproved(ctx, backfill.id);
  return backfill.id;
}
