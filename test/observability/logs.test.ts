import { Writable } from 'node:stream';
import { LogLevel, webApi } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, secretValues } from '../../src/config.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { configureLogging, createLogger, logger } from '../../src/log.js';
import { boltLogger } from '../../src/slack/boltLogger.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { createSlackHarness, INCIDENT_CHANNEL, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

/** The harness's bot token (test/support/slackApp.ts): every Web API call carries it. */
const BOT_TOKEN = 'xoxb-test-token';
const DB_PASSWORD = 'pg-s3cret-pw';
const WEBHOOK_SECRET = 'webhook-secret-0123456789';
const SLACK_SIGNATURE = 'v0=4a1b2c3d4e5f60718293a4b5c6d7e8f9';
const SECRETS = [BOT_TOKEN, SIGNING_SECRET, DB_PASSWORD, WEBHOOK_SECRET, SLACK_SIGNATURE];

/** The configuration a service would have loaded: src/processLifecycle.ts hands its secrets to the logger. */
const config = loadConfig({
  SLACK_BOT_TOKEN: BOT_TOKEN,
  SLACK_SIGNING_SECRET: SIGNING_SECRET,
  DATABASE_URL: `postgres://backfill:${DB_PASSWORD}@db.internal:5432/backfill_bot`,
  WEBHOOK_SIGNING_SECRET: WEBHOOK_SECRET,
});

type Line = Record<string, unknown>;

/** The backfill is done and none of its steps is still to run: no line or observation is still to come. */
const settled = async (h: SlackHarness) => (await h.engine.ctx.pool.query<{ settled: boolean }>(
  `SELECT (SELECT state FROM backfill.backfills WHERE id = 1) = 'done'
          AND NOT EXISTS (SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = 1 AND status IN ('pending', 'running', 'blocked')) AS settled`)).rows[0]?.settled === true;
const postsTo = (h: SlackHarness, channel: string) => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === channel && !c.params.thread_ts);

describe('the services\' log: JSON lines bound to the step, with no secret in them', () => {
  const written: string[] = [];
  let h: SlackHarness;
  const lines = (): Line[] => written.map((line) => JSON.parse(line) as Line);

  beforeAll(async () => {
    // What runSlackService does at start, with the lines kept here instead of on stdout.
    configureLogging({ level: 'debug', name: 'backfill-bot', destination: { write: (line: string) => void written.push(line) }, secrets: secretValues(config) });
    h = await createSlackHarness();
  });
  afterAll(async () => h.close());

  it('binds backfillId, step and key to every line a step writes, through night 15 run from Slack', async () => {
    await h.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => postsTo(h, `D${OWNERS.settlementLead}`).length === 1 && postsTo(h, `D${OWNERS.payouts}`).length === 1, 'two announcements');
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await waitUntil(() => postsTo(h, INCIDENT_CHANNEL).length === 2 && postsTo(h, `D${OWNERS.forecast}`).length === 1, 'the diff and the after-run DM', 30_000);
    await waitUntil(() => settled(h), 'every step finished');
    const { rows } = await h.engine.ctx.pool.query<{ kind: string; step_key: string }>(
      `SELECT kind, step_key FROM backfill.backfill_steps WHERE backfill_id = 1 AND status = 'done'`);
    // One line per finished step, written after its commit: wait for the last one.
    await waitUntil(() => lines().filter((line) => line.outcome === 'done').length === rows.length, 'a line for every finished step');

    // Every line is one JSON object with the logger's fields.
    for (const line of lines()) {
      expect(line).toMatchObject({ name: 'backfill-bot', level: expect.any(Number), time: expect.any(Number), msg: expect.any(String) });
    }
    const stepLines = lines().filter((line) => 'step' in line);
    expect(stepLines.length).toBeGreaterThanOrEqual(rows.length);
    for (const line of stepLines) {
      expect(line).toMatchObject({ backfillId: 1, step: expect.any(String), key: expect.any(String) });
    }
    // Each finished step said so once, under its own kind and key, with how long it took.
    const finished = stepLines.filter((line) => line.outcome === 'done').map((line) => `${String(line.step)} ${String(line.key)}`).sort();
    expect(finished).toEqual(rows.map((row) => `${row.kind} ${row.step_key}`).sort());
    expect(new Set(stepLines.map((line) => line.step))).toEqual(new Set(rows.map((row) => row.kind)));
    expect(stepLines.every((line) => line.outcome !== 'done' || typeof line.durationMs === 'number')).toBe(true);
  });

  it('prints no secret: not the bot token, the signing secrets, a database password in a URL, or an Authorization header', async () => {
    const log = logger();
    // The places secrets come from in practice: the configuration, a connection error naming its URL, a
    // request's headers, a message quoting a header, and the Slack client's own debug lines (through Bolt's logger).
    log.info({ config }, 'configuration loaded');
    log.error({ err: new Error(`connect ECONNREFUSED: ${config.DATABASE_URL ?? ''}`) }, 'postgres unreachable');
    log.warn({ req: { headers: { authorization: `Bearer ${BOT_TOKEN}`, 'x-slack-signature': SLACK_SIGNATURE } } }, 'request refused');
    log.info(`replayed with Authorization: Bearer ${BOT_TOKEN}`);
    log.info({ signingSecret: 'a-value-no-pattern-knows' }, 'a secret under a known key');
    const client = new webApi.WebClient(BOT_TOKEN, { slackApiUrl: h.slack.url, logger: boltLogger(log), logLevel: LogLevel.DEBUG });
    await client.auth.test();

    const text = written.join('');
    for (const secret of SECRETS) expect(text).not.toContain(secret);
    expect(text).not.toContain('a-value-no-pattern-knows');
    // Redacted, not dropped: the lines still say what happened.
    const byMsg = (msg: string) => lines().find((line) => line.msg === msg);
    expect(byMsg('configuration loaded')?.config).toMatchObject({
      DATABASE_URL: 'postgres://backfill:[redacted]@db.internal:5432/backfill_bot',
      SLACK_BOT_TOKEN: '[redacted]', SLACK_SIGNING_SECRET: '[redacted]', WEBHOOK_SIGNING_SECRET: '[redacted]',
    });
    expect(byMsg('postgres unreachable')?.err).toMatchObject({ message: 'connect ECONNREFUSED: postgres://backfill:[redacted]@db.internal:5432/backfill_bot' });
    expect(byMsg('request refused')?.req).toEqual({ headers: { authorization: '[redacted]', 'x-slack-signature': '[redacted]' } });
    expect(byMsg('replayed with Authorization: Bearer [redacted]')).toBeDefined();
    expect(byMsg('a secret under a known key')?.signingSecret).toBe('[redacted]');
    // The Web API client's debug lines came through Bolt's logger, as JSON of the same stream.
    expect(lines().some((line) => line.component === 'bolt' && line.level === 20 && String(line.msg).includes('auth.test'))).toBe(true);
  });
});

describe('on a terminal', () => {
  it('prints pino-pretty\'s lines instead of JSON, scrubbed the same way', async () => {
    let out = '';
    const terminal = new Writable({
      write(chunk: Buffer, _encoding, done) {
        out += chunk.toString();
        done();
      },
    });
    const log = createLogger({ pretty: true, destination: terminal, secrets: [DB_PASSWORD] });
    log.child({ backfillId: 7, step: 'publish', key: '2026-11-15T05:00:00.000Z' }).info({ url: `postgres://backfill:${DB_PASSWORD}@db.internal/x` }, 'publish 2026-11-15T05: done');
    await waitUntil(() => out.includes('publish 2026-11-15T05: done'), 'the pretty line');
    expect(() => JSON.parse(out.split('\n')[0] ?? '')).toThrow();
    expect(out).toContain('backfillId: 7');
    expect(out).toContain('step: "publish"');
    expect(out).not.toContain(DB_PASSWORD);
  });
});
