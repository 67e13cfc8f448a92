import type { AddressInfo } from 'node:net';
import { LogLevel } from '@slack/bolt';
import { createSlackApp, type SlackApp } from '../../src/app.js';
import { createTestEngine, type TestEngine } from './engine.js';
import { postBlockAction, postShortcut, postSlashCommand, postViewSubmission, startSlackEmulator, type SlackEmulator } from '../../dev/slack-emulator/index.js';

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
  /**
   * Submits `view` (one the bot opened or answered with) as `user`, the fields filled as a person would: `answers`
   * by block id (a select's value, a date, a time, a text, a conversation id; null clears a field), every other
   * field keeping the value the view set. Returns the HTTP status and the bot's answer (response_action …).
   */
  submit(view: ModalLike, answers?: Answers, user?: string, options?: { viewId?: string }): Promise<{ status: number; answer: ViewAnswer | undefined }>;
  /** Uses the global shortcut `callbackId` as `user`. */
  shortcut(callbackId: string, user?: string): Promise<{ status: number }>;
  close(): Promise<void>;
}

/** A modal as the bot sent it to Slack (views.open, views.update, or a response_action: update). */
export interface ModalLike {
  callback_id?: string;
  private_metadata?: string;
  blocks?: unknown[];
}

type Answers = Record<string, string | null>;

/** What the bot answered a submission with. */
interface ViewAnswer {
  response_action?: 'update' | 'errors' | 'clear' | 'push';
  view?: ModalLike & { submit?: { text: string } };
  errors?: Record<string, string>;
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);
const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);

/** One input element's state as Slack sends it in view.state.values, from its answer or its initial value. */
function elementState(element: Record<string, unknown>, answer: string | null | undefined): Record<string, unknown> {
  const type = text(element.type) ?? 'unknown';
  switch (type) {
    case 'static_select': {
      const options = Array.isArray(element.options) ? element.options.filter(isRecord) : [];
      const initial = isRecord(element.initial_option) ? element.initial_option : null;
      const chosen = answer === undefined ? initial : answer === null ? null
        : options.find((o) => o.value === answer) ?? { text: { type: 'plain_text', text: answer }, value: answer };
      return { type, selected_option: chosen };
    }
    case 'datepicker': return { type, selected_date: answer === undefined ? text(element.initial_date) ?? null : answer };
    case 'timepicker': return { type, selected_time: answer === undefined ? text(element.initial_time) ?? null : answer, ...(element.timezone ? { timezone: element.timezone } : {}) };
    case 'conversations_select': return { type, selected_conversation: answer === undefined ? text(element.initial_conversation) ?? null : answer };
    default: return { type, value: answer === undefined ? text(element.initial_value) ?? null : answer };
  }
}

/** view.state.values for `view` filled with `answers`. */
function filledValues(view: ModalLike, answers: Answers = {}): Record<string, Record<string, Record<string, unknown>>> {
  const values: Record<string, Record<string, Record<string, unknown>>> = {};
  for (const block of (view.blocks ?? []).filter(isRecord)) {
    const blockId = text(block.block_id);
    if (block.type !== 'input' || !blockId || !isRecord(block.element)) continue;
    const actionId = text(block.element.action_id) ?? 'value';
    values[blockId] = { [actionId]: elementState(block.element, answers[blockId]) };
  }
  return values;
}

/**
 * The real Bolt app on an ephemeral port with signature verification on, its Web API client pointed at the
 * local emulator, the workers in-process, a database and queue prefix of its own. `workers: false` leaves the steps
 * to the test (nothing moves but what people do, until the test runs the steps itself).
 */
export async function createSlackHarness(env: Record<string, string> = {}, options: { workers?: boolean } = {}): Promise<SlackHarness> {
  const engine = await createTestEngine('month-end', { BACKFILL_OPERATORS: OPERATOR, STATUS_THROTTLE_MS: '0', ...env });
  const slack = await startSlackEmulator();
  const bot = await createSlackApp({
    ctx: { pool: engine.ctx.pool, config: engine.ctx.config },
    slack: { botToken: 'xoxb-test-token', signingSecret: SIGNING_SECRET, apiUrl: slack.url },
    clientOptions: { retryConfig: { retries: 3, factor: 1, minTimeout: 50, maxTimeout: 100 } },
    logLevel: LogLevel.ERROR,
    ...(options.workers === false ? { workers: false } : {}),
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
    async submit(view, answers, user = OPERATOR, options = {}) {
      const response = await postViewSubmission(eventsUrl, SIGNING_SECRET, {
        user,
        view: {
          ...(options.viewId ? { id: options.viewId } : {}),
          callbackId: view.callback_id ?? '', privateMetadata: view.private_metadata ?? '', values: filledValues(view, answers), blocks: view.blocks ?? [],
        },
      });
      const body = await response.text();
      // An empty answer is an ack with nothing to say (the modal closes).
      return { status: response.status, answer: body ? (JSON.parse(body) as ViewAnswer) : undefined };
    },
    async shortcut(callbackId, user = OPERATOR) {
      const response = await postShortcut(eventsUrl, SIGNING_SECRET, { user, callbackId });
      return { status: response.status };
    },
    async close() {
      await bot.stop();
      await slack.close();
      await engine.close();
    },
  };
}
