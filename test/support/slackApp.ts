import type { AddressInfo } from 'node:net';
import { LogLevel } from '@slack/bolt';
import { createSlackApp, type SlackApp } from '../../src/app.js';
import { createTestEngine, type TestEngine } from './engine.js';
import { postBlockAction, postSlashCommand, startSlackEmulator, type SlackEmulator } from '../../dev/slack-emulator/index.js';

export const SIGNING_SECRET = 'test-signing-secret-harborlight';
export const INCIDENT_CHANNEL = 'C0INCIDENT';
export const OPERATOR = 'U07ONCALL';

export interface SlackHarness {
  engine: TestEngine;
  slack: SlackEmulator;
  bot: SlackApp;
  eventsUrl: string;
  /** Types /backfill <text> as `user` in `channel` and returns the HTTP status and the ephemeral reply. */
  command(text: string, user?: string, channel?: string, options?: { timestamp?: number; signature?: string }): Promise<{ status: number; reply: string | undefined }>;
  /** Presses a button of an announcement as `user`. */
  press(actionId: string, value: string, user: string, options?: { timestamp?: number; signature?: string }): Promise<{ status: number; reply: string | undefined }>;
  close(): Promise<void>;
}

/**
 * The real Bolt app on an ephemeral port with signature verification on, its Web API client pointed at the
 * local emulator, the workers in-process, a database and queue prefix of its own.
 */
export async function createSlackHarness(env: Record<string, string> = {}): Promise<SlackHarness> {
  const engine = await createTestEngine('month-end', { BACKFILL_OPERATORS: OPERATOR, STATUS_THROTTLE_MS: '0', ...env });
  const slack = await startSlackEmulator();
  const bot = await createSlackApp({
    ctx: { pool: engine.ctx.pool, config: engine.ctx.config },
    slack: { botToken: 'xoxb-test-token', signingSecret: SIGNING_SECRET, apiUrl: slack.url },
    clientOptions: { retryConfig: { retries: 3, factor: 1, minTimeout: 50, maxTimeout: 100 } },
    logLevel: LogLevel.ERROR,
  });
  const server = await bot.start(0);
  const eventsUrl = `http://127.0.0.1:${(server?.address() as AddressInfo).port}/slack/events`;
  let replies = 0;
  const lastReply = async (id: string, before: number) => {
    // The listener acks first and answers through response_url a moment later.
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const found = slack.responses.filter((r) => r.path.endsWith(`/${id}`));
      if (found.length > before) {
        const body = found.at(-1)?.body as { text?: string } | undefined;
        return body?.text;
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return undefined;
  };
  return {
    engine,
    slack,
    bot,
    eventsUrl,
    async command(text, user = OPERATOR, channel = INCIDENT_CHANNEL, options) {
      const id = `cmd${(replies += 1)}`;
      const response = await postSlashCommand(eventsUrl, SIGNING_SECRET, { text, user_id: user, channel_id: channel, response_url: slack.responseUrl(id) }, options);
      return { status: response.status, reply: response.status === 200 ? await lastReply(id, 0) : undefined };
    },
    async press(actionId, value, user, options) {
      const id = `btn${(replies += 1)}`;
      const response = await postBlockAction(eventsUrl, SIGNING_SECRET, { user, actionId, value, responseUrl: slack.responseUrl(id) }, options);
      if (response.status !== 200) return { status: response.status, reply: undefined };
      // A successful press answers by updating the DM, not through response_url; give it a moment either way.
      const reply = await Promise.race([lastReply(id, 0), new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 300))]);
      return { status: response.status, reply };
    },
    async close() {
      await bot.stop();
      await slack.close();
      await engine.close();
    },
  };
}
