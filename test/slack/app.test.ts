import { LogLevel, SocketModeReceiver } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, requireSlack } from '../../src/config.js';
import { createSlackApp } from '../../src/app.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { createSlackHarness, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { signSlackBody } from '../../dev/slack-emulator/index.js';

describe('running the bot', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness();
  });
  afterAll(async () => h.close());

  it('answers GET /healthz with 200 once the database and Redis are reachable', async () => {
    const response = await fetch(h.eventsUrl.replace('/slack/events', '/healthz'));
    expect(response.status).toBe(200);
    expect(await response.text()).toBe('ok');
  });

  it('answers Slack\'s url_verification challenge on /slack/events', async () => {
    const body = JSON.stringify({ type: 'url_verification', challenge: 'harbor-challenge', token: 'x' });
    const response = await fetch(h.eventsUrl, {
      method: 'POST', body, headers: { 'content-type': 'application/json', ...signSlackBody(body, SIGNING_SECRET) },
    });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ challenge: 'harbor-challenge' });
  });

  it('uses Socket Mode when an app token is set', async () => {
    const bot = await createSlackApp({
      ctx: h.engine.ctx,
      slack: { botToken: 'xoxb-test', signingSecret: 'unused-in-socket-mode', appToken: 'xapp-1-test', apiUrl: h.slack.url },
      logLevel: LogLevel.ERROR,
      workers: false,
    });
    try {
      expect((bot.app as unknown as { receiver: unknown }).receiver).toBeInstanceOf(SocketModeReceiver);
    } finally {
      await bot.stop();
    }
  });

  it('refuses to start without a bot token and signing secret, saying where to find them', () => {
    const attempt = () => requireSlack(loadConfig({}));
    expect(attempt).toThrowError(/SLACK_BOT_TOKEN \(xoxb-…, OAuth & Permissions page\) and SLACK_SIGNING_SECRET/);
    try {
      attempt();
    } catch (error) {
      expect(isBackfillError(error, ErrorCode.Config)).toBe(true);
    }
    expect(() => loadConfig({ SLACK_BOT_TOKEN: 'xoxp-user-token' })).toThrowError(/must be a bot token starting with xoxb-/);
    expect(() => loadConfig({ BACKFILL_OPERATORS: 'U1,alice' })).toThrowError(/"alice" is not a Slack user id/);
  });
});
