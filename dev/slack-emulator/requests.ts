// Signed requests, shaped like Slack's own, for driving the real Bolt HTTP receiver in tests and the demo.
// Bolt parses a body as a form only when content-type is exactly 'application/x-www-form-urlencoded' (a
// '; charset=…' suffix gets a 400), so bodies are sent as strings with that header set by hand.

import { createHmac, randomBytes } from 'node:crypto';

export interface SignedPostOptions {
  /** Unix seconds used for the header and the signature (set an old one to test the staleness check). */
  timestamp?: number;
  /** Sent instead of the computed signature (a forged request). */
  signature?: string;
}

export interface EventPostOptions extends SignedPostOptions {
  /** event_id of the envelope; defaults to a fresh unique one. Reuse one to simulate a redelivery. */
  eventId?: string;
  teamId?: string;
  /** Sets X-Slack-Retry-Num (and X-Slack-Retry-Reason, default 'http_timeout'), as on Slack's retries. */
  retryNum?: number;
  retryReason?: string;
}

export const TEST_TEAM_ID = 'T0HARBOR';
export const TEST_API_APP_ID = 'A0BACKFILL';
const TEAM_DOMAIN = 'harborlight';
const LEGACY_TOKEN = 'legacy-verification-token';
/** Nothing listens on the discard port: a handler that calls respond() without a response_url fails fast. */
const DEAD_RESPONSE_URL = 'http://127.0.0.1:9/response/unset';

let sequence = 0;
const unique = (): string => `${Date.now().toString(36)}${(sequence += 1).toString(36)}${randomBytes(3).toString('hex')}`;
const triggerId = (): string => `${Date.now()}.${Math.floor(Math.random() * 1e10)}.${randomBytes(16).toString('hex')}`;
const nowSeconds = (): number => Math.floor(Date.now() / 1000);
const actionTs = (): string => (Date.now() / 1000).toFixed(6);

export function signSlackBody(
  rawBody: string,
  secret: string,
  timestamp: number = nowSeconds(),
): { 'x-slack-request-timestamp': string; 'x-slack-signature': string } {
  const signature = `v0=${createHmac('sha256', secret).update(`v0:${timestamp}:${rawBody}`).digest('hex')}`;
  return { 'x-slack-request-timestamp': String(timestamp), 'x-slack-signature': signature };
}

async function postSigned(
  url: string,
  secret: string,
  rawBody: string,
  contentType: 'application/x-www-form-urlencoded' | 'application/json',
  options: SignedPostOptions,
  extraHeaders: Record<string, string> = {},
): Promise<Response> {
  const headers = signSlackBody(rawBody, secret, options.timestamp);
  if (options.signature !== undefined) headers['x-slack-signature'] = options.signature;
  return fetch(url, {
    method: 'POST',
    body: rawBody,
    headers: { 'content-type': contentType, ...headers, ...extraHeaders },
  });
}

export async function postSlashCommand(
  eventsUrl: string,
  secret: string,
  fields: {
    text: string;
    user_id: string;
    channel_id: string;
    response_url: string;
    command?: string;
    team_id?: string;
    user_name?: string;
    channel_name?: string;
    trigger_id?: string;
  },
  options: SignedPostOptions = {},
): Promise<Response> {
  const body = new URLSearchParams({
    token: LEGACY_TOKEN,
    team_id: fields.team_id ?? TEST_TEAM_ID,
    team_domain: TEAM_DOMAIN,
    channel_id: fields.channel_id,
    channel_name: fields.channel_name ?? (fields.channel_id.startsWith('D') ? 'directmessage' : 'backfills'),
    user_id: fields.user_id,
    user_name: fields.user_name ?? fields.user_id.toLowerCase(),
    command: fields.command ?? '/backfill',
    text: fields.text,
    api_app_id: TEST_API_APP_ID,
    is_enterprise_install: 'false',
    response_url: fields.response_url,
    trigger_id: fields.trigger_id ?? triggerId(),
  }).toString();
  return postSigned(eventsUrl, secret, body, 'application/x-www-form-urlencoded', options);
}

/** The id the emulator's Home tab view has in a press from it. */
const HOME_VIEW_ID = 'VHOMETAB01';

/** A press on the Home tab, as Slack sends it: the view for its container, and no channel, message or response_url. */
function onHomeTab(press: { channel: unknown; message: { blocks: unknown[] }; response_url: string } & Record<string, unknown>, teamId: string): Record<string, unknown> {
  const { channel: _channel, message, response_url: _responseUrl, ...rest } = press;
  return { ...rest, container: { type: 'view', view_id: HOME_VIEW_ID }, view: { id: HOME_VIEW_ID, type: 'home', team_id: teamId, blocks: message.blocks, state: { values: {} } } };
}

export async function postBlockAction(
  eventsUrl: string,
  secret: string,
  payload: {
    user: string;
    /** The name Slack sends with the press (the user's handle); their id in lower case when not given. */
    userName?: string;
    actionId: string;
    value: string;
    blockId?: string;
    channel?: string;
    messageTs?: string;
    responseUrl?: string;
    teamId?: string;
    /** The trigger_id the press carries (a fresh one when not given), to find the views.open it led to. */
    triggerId?: string;
    /** Where the button was: a message in `channel` (the default), or the app's Home tab, which has no channel. */
    surface?: 'message' | 'home';
  },
  options: SignedPostOptions = {},
): Promise<Response> {
  const teamId = payload.teamId ?? TEST_TEAM_ID;
  const channel = payload.channel ?? 'C0BACKFILLS';
  const messageTs = payload.messageTs ?? '1764480000.000100';
  const blockId = payload.blockId ?? 'actions';
  const buttonText = { type: 'plain_text', text: payload.actionId, emoji: true };
  const action = { type: 'button', action_id: payload.actionId, block_id: blockId, value: payload.value, text: buttonText, action_ts: actionTs() };
  const message = {
    type: 'block_actions',
    user: { id: payload.user, username: payload.userName ?? payload.user.toLowerCase(), name: payload.userName ?? payload.user.toLowerCase(), team_id: teamId },
    api_app_id: TEST_API_APP_ID,
    token: LEGACY_TOKEN,
    container: { type: 'message', message_ts: messageTs, channel_id: channel, is_ephemeral: false },
    trigger_id: payload.triggerId ?? triggerId(),
    team: { id: teamId, domain: TEAM_DOMAIN },
    enterprise: null,
    is_enterprise_install: false,
    channel: { id: channel, name: channel.startsWith('D') ? 'directmessage' : 'backfills' },
    message: {
      type: 'message',
      subtype: 'bot_message',
      text: 'message with buttons',
      ts: messageTs,
      bot_id: 'BBOT',
      blocks: [
        {
          type: 'actions',
          block_id: blockId,
          elements: [{ type: 'button', action_id: payload.actionId, value: payload.value, text: buttonText }],
        },
      ],
    },
    state: { values: {} },
    response_url: payload.responseUrl ?? DEAD_RESPONSE_URL,
    actions: [action],
  };
  const json = payload.surface === 'home' ? onHomeTab(message, teamId) : message;
  const body = new URLSearchParams({ payload: JSON.stringify(json) }).toString();
  return postSigned(eventsUrl, secret, body, 'application/x-www-form-urlencoded', options);
}

/** A view as Slack sends it back in a submission: the view the app opened, with what the person entered. */
export interface SubmittedView {
  id?: string;
  callbackId: string;
  privateMetadata?: string;
  /** The input blocks' state: block id → action id → the element's value, shaped as Slack sends it. */
  values: Record<string, Record<string, Record<string, unknown>>>;
  blocks?: unknown[];
}

export async function postViewSubmission(
  eventsUrl: string,
  secret: string,
  payload: { user: string; userName?: string; view: SubmittedView; teamId?: string },
  options: SignedPostOptions = {},
): Promise<Response> {
  const teamId = payload.teamId ?? TEST_TEAM_ID;
  const name = payload.userName ?? payload.user.toLowerCase();
  const { view } = payload;
  const json = {
    type: 'view_submission',
    team: { id: teamId, domain: TEAM_DOMAIN },
    user: { id: payload.user, username: name, name, team_id: teamId },
    api_app_id: TEST_API_APP_ID,
    token: LEGACY_TOKEN,
    trigger_id: triggerId(),
    view: {
      id: view.id ?? `V${unique().toUpperCase()}`,
      team_id: teamId,
      type: 'modal',
      blocks: view.blocks ?? [],
      private_metadata: view.privateMetadata ?? '',
      callback_id: view.callbackId,
      state: { values: view.values },
      hash: `${nowSeconds()}.${unique()}`,
      title: { type: 'plain_text', text: 'Modal', emoji: true },
      clear_on_close: false,
      notify_on_close: false,
      close: null,
      submit: { type: 'plain_text', text: 'Submit', emoji: true },
      previous_view_id: null,
      root_view_id: view.id ?? null,
      app_id: TEST_API_APP_ID,
      external_id: '',
      app_installed_team_id: teamId,
      bot_id: 'BBOT',
    },
    response_urls: [],
    is_enterprise_install: false,
    enterprise: null,
  };
  const body = new URLSearchParams({ payload: JSON.stringify(json) }).toString();
  return postSigned(eventsUrl, secret, body, 'application/x-www-form-urlencoded', options);
}

/** A global shortcut (the lightning-bolt menu), with a fresh trigger_id. */
export async function postShortcut(
  eventsUrl: string,
  secret: string,
  payload: { user: string; userName?: string; callbackId: string; teamId?: string },
  options: SignedPostOptions = {},
): Promise<Response> {
  const teamId = payload.teamId ?? TEST_TEAM_ID;
  const name = payload.userName ?? payload.user.toLowerCase();
  const json = {
    type: 'shortcut',
    token: LEGACY_TOKEN,
    action_ts: actionTs(),
    team: { id: teamId, domain: TEAM_DOMAIN },
    user: { id: payload.user, username: name, team_id: teamId },
    is_enterprise_install: false,
    enterprise: null,
    callback_id: payload.callbackId,
    trigger_id: triggerId(),
  };
  const body = new URLSearchParams({ payload: JSON.stringify(json) }).toString();
  return postSigned(eventsUrl, secret, body, 'application/x-www-form-urlencoded', options);
}

export async function postEvent(
  eventsUrl: string,
  secret: string,
  event: Record<string, unknown>,
  options: EventPostOptions = {},
): Promise<Response> {
  const teamId = options.teamId ?? TEST_TEAM_ID;
  const eventTs =
    typeof event.event_ts === 'string' ? event.event_ts : typeof event.ts === 'string' ? event.ts : actionTs();
  const envelope = {
    token: LEGACY_TOKEN,
    team_id: teamId,
    context_team_id: teamId,
    context_enterprise_id: null,
    api_app_id: TEST_API_APP_ID,
    event: { ...event, event_ts: eventTs },
    type: 'event_callback',
    event_id: options.eventId ?? `Ev${unique().toUpperCase()}`,
    event_time: nowSeconds(),
    authorizations: [
      { enterprise_id: null, team_id: teamId, user_id: 'UBOT', is_bot: true, is_enterprise_install: false },
    ],
    is_ext_shared_channel: false,
    event_context: `4-${unique()}`,
  };
  const extra: Record<string, string> = {};
  if (options.retryNum !== undefined) {
    extra['x-slack-retry-num'] = String(options.retryNum);
    extra['x-slack-retry-reason'] = options.retryReason ?? 'http_timeout';
  }
  return postSigned(eventsUrl, secret, JSON.stringify(envelope), 'application/json', options, extra);
}
