// Self-test of the Slack emulator (dev/slack-emulator) against the real @slack/web-api client that Bolt uses, and
// of the signed request helpers (dev/slack-emulator/requests.ts) against the real Bolt receiver.

import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { App, type BlockButtonAction, isValidSlackRequest, LogLevel, webApi } from '@slack/bolt';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { postBlockAction, postEvent, postSlashCommand, signSlackBody, startSlackEmulator, type SlackEmulator } from '../../dev/slack-emulator/index.js';

// @slack/web-api is a dependency of Bolt, not of this project: reach it through Bolt's `webApi` re-export.
const { WebClient, WebClientEvent, WebAPIPlatformError, WebAPIHTTPError, WebAPIRequestError, ErrorCode } = webApi;

const CHANNEL = 'C0BACKFILLS';

let emu: SlackEmulator;

function client(): InstanceType<typeof WebClient> {
  return new WebClient('xoxb-test', {
    slackApiUrl: emu.url,
    retryConfig: { retries: 2, factor: 1, minTimeout: 10, maxTimeout: 20 },
    logLevel: LogLevel.ERROR,
  });
}

beforeAll(async () => {
  emu = await startSlackEmulator();
});

afterAll(async () => {
  await emu.close();
});

beforeEach(() => {
  emu.reset();
});

describe('the Slack emulator', () => {
  it('answers on 127.0.0.1 with the documented base URL, and refuses calls without a bot token', async () => {
    expect(emu.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/api\/$/);
    expect(emu.url.startsWith(emu.origin)).toBe(true);

    const anonymous = await fetch(`${emu.url}chat.postMessage`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'channel=C1&text=hi',
    });
    expect(anonymous.status).toBe(200);
    expect(anonymous.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await anonymous.json()).toEqual({ ok: false, error: 'not_authed' });

    const viaTokenParam = await fetch(`${emu.url}auth.test`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ token: 'xoxb-in-body' }),
    });
    expect(await viaTokenParam.json()).toMatchObject({ ok: true, user_id: 'UBOT' });

    const web = client();
    await expect(web.auth.test()).resolves.toMatchObject({
      ok: true,
      user_id: 'UBOT',
      bot_id: 'BBOT',
      team_id: 'T0HARBOR',
      team: 'Harborlight',
    });
    expect(emu.calls.map((call) => call.method)).toEqual(['chat.postMessage', 'auth.test', 'auth.test']);
  });

  it('records form fields with blocks parsed, and shows a message and its update in place in the transcript', async () => {
    const web = client();
    const first = await web.chat.postMessage({
      channel: CHANNEL,
      text: 'Backfill #1 planned',
      blocks: [
        { type: 'header', text: { type: 'plain_text', text: 'Backfill #1: orders, night 2026-11-15' } },
        {
          type: 'section',
          text: { type: 'mrkdwn', text: '*Reason:* currency parsed as text' },
          fields: [
            { type: 'mrkdwn', text: '*Partitions:* 24' },
            { type: 'mrkdwn', text: '*Signed figures:* 1' },
          ],
        },
        { type: 'context', elements: [{ type: 'mrkdwn', text: 'requested by <@U07ONCALL>' }] },
        { type: 'divider' },
        {
          type: 'actions',
          elements: [
            { type: 'button', action_id: 'start', text: { type: 'plain_text', text: 'Start' }, value: '1' },
            { type: 'button', action_id: 'cancel', text: { type: 'plain_text', text: 'Cancel' }, value: '1' },
          ],
        },
      ],
    });
    const second = await web.chat.postMessage({ channel: CHANNEL, text: 'Something else' });
    expect(first.ts).toMatch(/^\d{10}\.\d{6}$/);
    expect(Number(second.ts)).toBeGreaterThan(Number(first.ts));
    expect(first.channel).toBe(CHANNEL);
    expect(first.message?.text).toBe('Backfill #1 planned');

    const [recorded] = emu.callsTo('chat.postMessage');
    expect(recorded?.params.channel).toBe(CHANNEL);
    expect(Array.isArray(recorded?.params.blocks)).toBe(true);

    const updated = await web.chat.update({
      channel: CHANNEL,
      ts: first.ts ?? '',
      text: 'Backfill #1 running',
      blocks: [
        { type: 'header', text: { type: 'plain_text', text: 'Backfill #1: orders, night 2026-11-15' } },
        { type: 'section', text: { type: 'mrkdwn', text: 'Running: 3 of 24 partitions' } },
      ],
    });
    expect(updated).toMatchObject({ ok: true, channel: CHANNEL, ts: first.ts });

    // A DM by user ID lands in the D… conversation conversations.open would have given.
    const opened = await web.conversations.open({ users: 'U07SETTLE' });
    expect(opened.channel?.id).toBe('DU07SETTLE');
    const dm = await web.chat.postMessage({ channel: 'U07SETTLE', text: 'Please acknowledge backfill #1' });
    expect(dm.channel).toBe('DU07SETTLE');
    const ephemeral = await web.chat.postEphemeral({ channel: CHANNEL, user: 'U07ONCALL', text: 'Only you can see this' });

    expect(emu.transcript()).toBe(
      [
        `=== ${CHANNEL} ===`,
        `-- ${first.ts} (edited ×1)`,
        '  Backfill #1: orders, night 2026-11-15',
        '  Running: 3 of 24 partitions',
        `-- ${second.ts}`,
        '  Something else',
        `-- ${ephemeral.message_ts} (ephemeral, only U07ONCALL sees it)`,
        '  Only you can see this',
        '',
        '=== DU07SETTLE ===',
        `-- ${dm.ts}`,
        '  Please acknowledge backfill #1',
        '',
      ].join('\n'),
    );
  });

  it('renders every common block type to plain text', async () => {
    const web = client();
    await web.chat.postMessage({
      channel: CHANNEL,
      text: 'fallback, not shown when there are blocks',
      blocks: [
        { type: 'header', text: { type: 'plain_text', text: 'Plan' } },
        {
          type: 'section',
          text: { type: 'mrkdwn', text: '*Owners*\n<@U07SETTLE>' },
          accessory: { type: 'button', action_id: 'x', text: { type: 'plain_text', text: 'Details' } },
        },
        { type: 'section', fields: [{ type: 'mrkdwn', text: '*a*' }, { type: 'plain_text', text: 'b' }] },
        {
          type: 'context',
          elements: [
            { type: 'mrkdwn', text: 'ctx one' },
            { type: 'plain_text', text: 'ctx two' },
          ],
        },
        { type: 'divider' },
        {
          type: 'actions',
          elements: [
            { type: 'button', action_id: 'a', style: 'primary', text: { type: 'plain_text', text: 'Acknowledge' } },
            { type: 'button', action_id: 'h', style: 'danger', text: { type: 'plain_text', text: 'Hold' } },
          ],
        },
      ],
    });
    expect(emu.transcript().split('\n').slice(2, -1)).toEqual([
      '  Plan',
      '  *Owners*',
      '  <@U07SETTLE> [Details]',
      '  *a*',
      '  b',
      '  ctx one ctx two',
      '  ----------',
      '  [Acknowledge] [Hold]',
    ]);
  });

  it('rateLimit: the client waits Retry-After, then succeeds; attempts keep the 429, calls only the success', async () => {
    const web = client();
    const rateLimited: number[] = [];
    web.on(WebClientEvent.RATE_LIMITED, (retrySec: number) => rateLimited.push(retrySec));
    emu.rateLimit('chat.postMessage', 1, 1);

    const started = Date.now();
    const result = await web.chat.postMessage({ channel: CHANNEL, text: 'after the limit' });
    const elapsed = Date.now() - started;

    expect(result.ok).toBe(true);
    // At least the Retry-After; how much longer is the machine's, not asserted (the attempts below show one wait, one retry).
    expect(elapsed).toBeGreaterThanOrEqual(1000);
    expect(rateLimited).toEqual([1]);
    expect(emu.attempts.map((call) => call.status)).toEqual([429, 200]);
    const [limited, succeeded] = emu.attempts;
    expect((succeeded?.at ?? 0) - (limited?.at ?? 0)).toBeGreaterThanOrEqual(1000);
    expect(emu.callsTo('chat.postMessage')).toHaveLength(1);
    expect(emu.transcript()).toContain('after the limit');
  });

  it('rateLimit past the retry budget rejects with a WebAPIRequestError (not WebAPIRateLimitedError)', async () => {
    const web = client();
    emu.rateLimit('chat.postMessage', 3, 0);
    const error = await web.chat.postMessage({ channel: CHANNEL, text: 'never' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WebAPIRequestError);
    expect((error as Error).message).toMatch(/rate limit was exceeded/);
    expect(emu.attempts.map((call) => call.status)).toEqual([429, 429, 429]);
    expect(emu.calls).toEqual([]);
  });

  it('failHttp: a 500 is retried by the client; attempts keep it, calls do not', async () => {
    const web = client();
    emu.failHttp('chat.update', 1, 500);
    const posted = await web.chat.postMessage({ channel: CHANNEL, text: 'v1' });
    await expect(web.chat.update({ channel: CHANNEL, ts: posted.ts ?? '', text: 'v2' })).resolves.toMatchObject({
      ok: true,
    });
    expect(emu.attempts.map((call) => `${call.method} ${call.status}`)).toEqual([
      'chat.postMessage 200',
      'chat.update 500',
      'chat.update 200',
    ]);
    expect(emu.callsTo('chat.update')).toHaveLength(1);
    expect(emu.transcript()).toContain('  v2');

    emu.failHttp('chat.update', 3, 503);
    const error = await web.chat.update({ channel: CHANNEL, ts: posted.ts ?? '', text: 'v3' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WebAPIHTTPError);
    expect((error as InstanceType<typeof WebAPIHTTPError>).statusCode).toBe(503);
  });

  it('failWith: answers ok:false, which the client throws as a WebAPIPlatformError without retrying', async () => {
    const web = client();
    emu.failWith('chat.postMessage', 1, 'not_in_channel');
    const error = await web.chat.postMessage({ channel: CHANNEL, text: 'x' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WebAPIPlatformError);
    const platform = error as InstanceType<typeof WebAPIPlatformError>;
    expect(platform.code).toBe(ErrorCode.PlatformError);
    expect(platform.data.error).toBe('not_in_channel');
    expect(emu.attempts).toHaveLength(1);
    expect(emu.callsTo('chat.postMessage')).toMatchObject([
      { status: 200, response: { ok: false, error: 'not_in_channel' } },
    ]);

    // Only the next call failed; chat.update of a ts never posted is the emulator's own message_not_found.
    await expect(web.chat.postMessage({ channel: CHANNEL, text: 'y' })).resolves.toMatchObject({ ok: true });
    const missing = await web.chat
      .update({ channel: CHANNEL, ts: '1700000000.000100', text: 'z' })
      .catch((e: unknown) => e);
    expect((missing as InstanceType<typeof WebAPIPlatformError>).data.error).toBe('message_not_found');
  });

  it('conversations.history: newest first, replies left to conversations.replies, metadata only when asked', async () => {
    const web = client();
    const metadata = { event_type: 'backfill_bot_message', event_payload: { intent: 'bf1:diff:orders', backfill_id: 1 } };
    const first = await web.chat.postMessage({ channel: CHANNEL, text: 'first', metadata });
    const second = await web.chat.postMessage({ channel: CHANNEL, text: 'second' });
    const reply = await web.chat.postMessage({ channel: CHANNEL, text: 'in the thread', thread_ts: first.ts ?? '', metadata });
    await web.chat.postMessage({ channel: 'C0ELSEWHERE', text: 'another channel' });

    const plain = await web.conversations.history({ channel: CHANNEL, limit: 10 });
    expect(plain.messages?.map((m) => m.text)).toEqual(['second', 'first']);
    expect(plain.messages?.[1]?.metadata).toBeUndefined();
    expect(plain.has_more).toBe(false);

    const withMetadata = await web.conversations.history({ channel: CHANNEL, include_all_metadata: true });
    expect(withMetadata.messages?.[1]).toMatchObject({ type: 'message', ts: first.ts, bot_id: 'BBOT', metadata });
    expect((await web.conversations.history({ channel: CHANNEL, limit: 1 })).has_more).toBe(true);
    const before = await web.conversations.history({ channel: CHANNEL, latest: second.ts ?? '' });
    expect(before.messages?.map((m) => m.ts)).toEqual([first.ts]);

    const thread = await web.conversations.replies({ channel: CHANNEL, ts: first.ts ?? '', include_all_metadata: true });
    expect(thread.messages?.map((m) => m.ts)).toEqual([first.ts, reply.ts]);
    expect(thread.messages?.[1]?.metadata).toEqual(metadata);
    expect(emu.messagesIn(CHANNEL).map((m) => m.text)).toEqual(['first', 'second', 'in the thread']);
  });

  it('pages conversations.replies and conversations.history by cursor, as Slack documents: limit, has_more, next_cursor', async () => {
    const web = client();
    const parent = await web.chat.postMessage({ channel: CHANNEL, text: 'parent' });
    for (let i = 0; i < 5; i += 1) await web.chat.postMessage({ channel: CHANNEL, text: `reply ${i}`, thread_ts: parent.ts ?? '' });
    const texts: string[] = [];
    const more: boolean[] = [];
    let cursor: string | undefined;
    do {
      const page = await web.conversations.replies({ channel: CHANNEL, ts: parent.ts ?? '', limit: 2, ...(cursor ? { cursor } : {}) });
      texts.push(...(page.messages ?? []).map((m) => m.text ?? ''));
      more.push(page.has_more ?? false);
      cursor = page.response_metadata?.next_cursor || undefined;
    } while (cursor);
    // The whole thread once, oldest first, the parent on the first page only; the last page says it is the last.
    expect(texts).toEqual(['parent', 'reply 0', 'reply 1', 'reply 2', 'reply 3', 'reply 4']);
    expect(more).toEqual([true, true, false]);

    await web.chat.postMessage({ channel: CHANNEL, text: 'later' });
    const first = await web.conversations.history({ channel: CHANNEL, limit: 1 });
    expect(first.messages?.map((m) => m.text)).toEqual(['later']);
    const second = await web.conversations.history({ channel: CHANNEL, limit: 1, cursor: first.response_metadata?.next_cursor ?? '' });
    expect(second.messages?.map((m) => m.text)).toEqual(['parent']);
    expect(second.response_metadata?.next_cursor).toBe('');
    const invalid = await web.conversations.history({ channel: CHANNEL, cursor: 'not-a-cursor' }).catch((error: unknown) => error);
    expect((invalid as InstanceType<typeof WebAPIPlatformError>).data.error).toBe('invalid_cursor');
  });

  it('rateLimit with a channel limits only the posts to that conversation', async () => {
    const web = new WebClient('xoxb-test', { slackApiUrl: emu.url, rejectRateLimitedCalls: true, logLevel: LogLevel.ERROR });
    emu.rateLimit('chat.postMessage', 1, 7, 'U07SETTLE');
    await web.chat.postMessage({ channel: CHANNEL, text: 'not limited' });
    const limited = await web.chat.postMessage({ channel: 'DU07SETTLE', text: 'limited' }).catch((error: unknown) => error);
    expect(limited).toMatchObject({ code: ErrorCode.RateLimitedError, retryAfter: 7 });
    await web.chat.postMessage({ channel: 'DU07SETTLE', text: 'now through' });
    expect(emu.attempts.map((a) => [a.params.channel, a.status])).toEqual([[CHANNEL, 200], ['DU07SETTLE', 429], ['DU07SETTLE', 200]]);
  });

  it('dropAnswer: the message is posted but the client sees a 500 (or a closed connection), and its retry posts again', async () => {
    const web = client();
    emu.dropAnswer('chat.postMessage', 1);
    await expect(web.chat.postMessage({ channel: CHANNEL, text: 'retried by the client' })).resolves.toMatchObject({ ok: true });
    // This is why the bot posts step messages without client retries: the lost answer became a second message.
    expect(emu.messagesIn(CHANNEL).map((m) => m.text)).toEqual(['retried by the client', 'retried by the client']);
    expect(emu.attempts.map((call) => call.status)).toEqual([500, 200]);
    expect(emu.callsTo('chat.postMessage')).toHaveLength(1);

    emu.reset();
    const once = new WebClient('xoxb-test', { slackApiUrl: emu.url, retryConfig: { retries: 0 }, logLevel: LogLevel.ERROR });
    emu.dropAnswer('chat.postMessage', 1, 'hangup');
    const error = await once.chat.postMessage({ channel: CHANNEL, text: 'answer lost' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WebAPIRequestError);
    expect(emu.messagesIn(CHANNEL).map((m) => m.text)).toEqual(['answer lost']);
    expect(emu.attempts.map((call) => call.status)).toEqual([0]);
    emu.failWith('conversations.open', 1, 'user_not_found');
    const refused = await once.conversations.open({ users: 'U0GONE' }).catch((e: unknown) => e);
    expect((refused as InstanceType<typeof WebAPIPlatformError>).data.error).toBe('user_not_found');
  });

  it('filesUploadV2: the bytes reach the upload URL and the nested files shape comes back', async () => {
    const web = client();
    const bytes = Buffer.from('night,signed,rebuilt\n2026-11-15,1284310.55,1271902.10\n');
    const result = await web.filesUploadV2({
      channel_id: CHANNEL,
      file: bytes,
      filename: 'diff-night-15.csv',
      title: 'Diff, night 15',
      initial_comment: 'The diff for backfill #1',
    });

    const fileId = result.files[0]?.files?.[0]?.id;
    expect(fileId).toMatch(/^F\d+$/);
    expect(result.files[0]?.files?.[0]?.title).toBe('Diff, night 15');
    expect(emu.uploads.get(fileId ?? '')?.equals(bytes)).toBe(true);
    expect(emu.calls.map((call) => call.method)).toEqual([
      'files.getUploadURLExternal',
      'files.completeUploadExternal',
    ]);
    expect(emu.callsTo('files.getUploadURLExternal')[0]?.params).toMatchObject({
      filename: 'diff-night-15.csv',
      length: String(bytes.length),
    });
    expect(emu.callsTo('files.completeUploadExternal')[0]?.params).toMatchObject({
      files: [{ id: fileId, title: 'Diff, night 15' }],
      channel_id: CHANNEL,
    });
    expect(emu.transcript()).toContain(`The diff for backfill #1\n  [file: Diff, night 15 (${fileId})]`);
  });

  it('records response_url replies and App Home views, and serves usergroups', async () => {
    const url = emu.responseUrl('cmd-1');
    expect(url).toBe(`${emu.origin}/response/cmd-1`);
    expect(emu.responseUrl()).not.toBe(emu.responseUrl());
    const reply = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ response_type: 'ephemeral', replace_original: true, text: 'Plan for orders' }),
    });
    expect(reply.status).toBe(200);
    expect(emu.responses).toEqual([
      { path: '/response/cmd-1', body: { response_type: 'ephemeral', replace_original: true, text: 'Plan for orders' } },
    ]);

    const web = client();
    await web.views.publish({
      user_id: 'U07ONCALL',
      view: { type: 'home', blocks: [{ type: 'section', text: { type: 'mrkdwn', text: 'No backfill running' } }] },
    });
    emu.setUsergroup('S0FINANCE', ['U07SETTLE', 'U07PAYOUTS']);
    await expect(web.usergroups.users.list({ usergroup: 'S0FINANCE' })).resolves.toMatchObject({
      users: ['U07SETTLE', 'U07PAYOUTS'],
    });
    await expect(web.usergroups.users.list({ usergroup: 'S0OTHER' })).resolves.toMatchObject({ users: [] });
    await expect(web.apiCall('reactions.add', { channel: CHANNEL, name: 'eyes' })).resolves.toMatchObject({ ok: true });

    expect(emu.transcript()).toBe(
      [
        '=== response_url cmd-1 ===',
        '-- reply (ephemeral, replace_original)',
        '  Plan for orders',
        '',
        '=== App Home of U07ONCALL ===',
        '-- home view (published ×1)',
        '  No backfill running',
        '',
      ].join('\n'),
    );
  });

  it('waitFor resolves once enough calls arrived and names what it saw when it gives up', async () => {
    const web = client();
    setTimeout(() => void web.chat.postMessage({ channel: CHANNEL, text: 'late' }), 50);
    const calls = await emu.waitFor('chat.postMessage', 1, 2000);
    expect(calls).toHaveLength(1);

    emu.failHttp('chat.update', 1, 500);
    await fetch(`${emu.url}chat.update`, { method: 'POST', headers: { authorization: 'Bearer xoxb-t' } });
    await expect(emu.waitFor('chat.update', 1, 100)).rejects.toThrow(
      "waitFor('chat.update', 1) timed out after 100 ms with 0. Calls seen: chat.postMessage ×1. " +
        'Attempts answered 429/5xx: chat.update ×1.',
    );
  });
});

describe('signed requests drive a real Bolt HTTP receiver', () => {
  const secret = 'test-signing-secret';
  let app: App;
  let eventsUrl: string;

  beforeAll(async () => {
    // The emulator is up before new App(): Bolt calls auth.test from its constructor.
    app = new App({
      token: 'xoxb-test',
      signingSecret: secret,
      logLevel: LogLevel.ERROR,
      clientOptions: { slackApiUrl: emu.url, retryConfig: { retries: 0 } },
    });
    app.command('/backfill', async ({ ack, command, respond }) => {
      await ack();
      await respond({ response_type: 'ephemeral', text: `plan ${command.text} for <@${command.user_id}>` });
    });
    app.action<BlockButtonAction>('backfill_ack', async ({ ack, body, action, respond, client: web }) => {
      await ack();
      await respond({ replace_original: true, text: `acknowledged ${action.value ?? ''}` });
      await web.chat.postMessage({ channel: body.channel?.id ?? '', text: `<@${body.user.id}> acknowledged` });
    });
    app.event('app_mention', async ({ event, client: web, context }) => {
      await web.chat.postMessage({ channel: event.channel, text: `hello <@${event.user ?? ''}> (retry ${context.retryNum ?? 0})` });
    });
    const server = (await app.start(0)) as Server;
    eventsUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/slack/events`;
  });

  afterAll(async () => {
    await app.stop();
  });

  it('signs the way Bolt verifies', () => {
    const body = 'command=%2Fbackfill&text=help';
    const check = (rawBody: string, timestamp?: number): boolean => {
      const headers = signSlackBody(body, secret, timestamp);
      return isValidSlackRequest({
        signingSecret: secret,
        body: rawBody,
        headers: { ...headers, 'x-slack-request-timestamp': Number(headers['x-slack-request-timestamp']) },
      });
    };
    expect(check(body)).toBe(true);
    expect(check(`${body}x`)).toBe(false);
    expect(check(body, Math.floor(Date.now() / 1000) - 600)).toBe(false);
    expect(signSlackBody(body, secret, 1764480000)['x-slack-request-timestamp']).toBe('1764480000');
  });

  it('a slash command is acked and answered through response_url', async () => {
    const responseUrl = emu.responseUrl('slash-1');
    const res = await postSlashCommand(eventsUrl, secret, {
      text: 'plan orders 2026-11-15 currency parsed as text',
      user_id: 'U07ONCALL',
      channel_id: CHANNEL,
      response_url: responseUrl,
    });
    expect(res.status).toBe(200);
    await vi.waitFor(() => expect(emu.responses).toHaveLength(1));
    expect(emu.responses[0]?.body).toEqual({
      response_type: 'ephemeral',
      text: 'plan plan orders 2026-11-15 currency parsed as text for <@U07ONCALL>',
    });
  });

  it('forged and stale signatures get a 401', async () => {
    const fields = { text: 'help', user_id: 'U1', channel_id: CHANNEL, response_url: emu.responseUrl() };
    const forged = await postSlashCommand(eventsUrl, secret, fields, { signature: 'v0=' + '0'.repeat(64) });
    expect(forged.status).toBe(401);
    const stale = await postSlashCommand(eventsUrl, secret, fields, { timestamp: Math.floor(Date.now() / 1000) - 6 * 60 });
    expect(stale.status).toBe(401);
    const wrongSecret = await postSlashCommand(eventsUrl, 'another-secret', fields);
    expect(wrongSecret.status).toBe(401);
    expect(emu.responses).toEqual([]);
  });

  it('a button click reaches app.action with its value, channel and response_url', async () => {
    const res = await postBlockAction(eventsUrl, secret, {
      user: 'U07SETTLE',
      actionId: 'backfill_ack',
      value: 'backfill:1',
      channel: CHANNEL,
      responseUrl: emu.responseUrl('action-1'),
    });
    expect(res.status).toBe(200);
    const [posted] = await emu.waitFor('chat.postMessage');
    expect(posted?.params).toMatchObject({ channel: CHANNEL, text: '<@U07SETTLE> acknowledged' });
    expect(emu.responses).toEqual([
      { path: '/response/action-1', body: { replace_original: true, text: 'acknowledged backfill:1' } },
    ]);
  });

  it('an event reaches app.event, with Slack retry headers passed through', async () => {
    const mention = { type: 'app_mention', user: 'U07ONCALL', text: '<@UBOT> status', ts: '1764480001.000100', channel: CHANNEL };
    expect((await postEvent(eventsUrl, secret, mention)).status).toBe(200);
    expect((await postEvent(eventsUrl, secret, mention, { eventId: 'Ev0SAME', retryNum: 1 })).status).toBe(200);
    const calls = await emu.waitFor('chat.postMessage', 2);
    expect(calls.map((call) => call.params.text).sort()).toEqual(['hello <@U07ONCALL> (retry 0)', 'hello <@U07ONCALL> (retry 1)']);
  });
});
