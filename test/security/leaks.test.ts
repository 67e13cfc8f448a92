// The leak hunt: a distinct secret planted in each way one reaches the bot (a re-trigger URL's password, a
// credential query parameter, an orchestrator echoing the headers it was sent, a consumer queue's connection
// secret, a statement quoting a configured secret, the lineage tokens, the Slack and webhook secrets), real
// backfills failing through every re-trigger kind and the lineage routes, then every place the bot writes
// searched for every planted value: the database (pg_dump), what Slack was sent (the emulator's records), the
// log, the incident package, the CLI's status text and what went to the OpenLineage receiver. Each scenario
// also asserts that its failure happened and was recorded, so that a search of nothing cannot pass.

import { execFile } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { webApi } from '@slack/bolt';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildIncidentPackage } from '../../src/core/file/incidentPackage.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { startSlackEmulator, type RecordedCall } from '../../dev/slack-emulator/index.js';
import { configureLogging } from '../../src/log.js';
import { Metrics } from '../../src/metrics.js';
import { redactingFetch } from '../../src/slack/delivery/outgoing.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { incidentPackageJson, incidentPackageMarkdown } from '../../src/views/incidentPackage.js';
import { renderStatus } from '../../src/views/text.js';
import { createTestEngine } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const run = promisify(execFile);
const hex = () => randomBytes(12).toString('hex');

/** The harness's bot token (test/support/slackApp.ts). */
const BOT_TOKEN = 'xoxb-test-token';
/** Each planted secret, distinct; some with characters that percent-encoding and JSON escaping change. */
const PLANTED = {
  urlPassword: `pw1${hex()}`,
  queryKey: `pw2${hex()}`,
  orchestratorHeader: `pw3+${hex()}/x=`,
  bearer: `pw4${hex()}`,
  upstreamBearer: `pw10${hex()}`,
  queuePassword: `pw5${hex()}`,
  lineageToken: `pw6${hex()}`,
  openLineageKey: `pw7${hex()}`,
  statementSecret: `pw8"${hex()}\\`,
  webhookSecret: `pw9${hex()}`,
  botToken: BOT_TOKEN,
  signingSecret: SIGNING_SECRET,
};

/** The configuration every scenario runs with: each configured secret registered, as loadConfig does at start. */
const CONFIGURED = {
  SLACK_BOT_TOKEN: BOT_TOKEN,
  SLACK_SIGNING_SECRET: SIGNING_SECRET,
  WEBHOOK_SIGNING_SECRET: PLANTED.webhookSecret,
  LINEAGE_TOKEN: PLANTED.lineageToken,
  OPENLINEAGE_API_KEY: PLANTED.openLineageKey,
  RETRIGGER_SECRET_ORCH: PLANTED.orchestratorHeader,
  RETRIGGER_SECRET_BEARER: `Bearer ${PLANTED.bearer}`,
  RETRIGGER_SECRET_QUEUE: `redis://:${PLANTED.queuePassword}@127.0.0.1:1/0`,
  RETRIGGER_SECRET_STATEMENT: PLANTED.statementSecret,
  // Loopback receivers are the test's own; a URL policy allowing hosts lets them through.
  RETRIGGER_ALLOWED_HOSTS: '127.0.0.1,localhost',
  BACKFILL_CHANNELS: INCIDENT_CHANNEL,
  JOB_ATTEMPTS: '2',
  WEBHOOK_TIMEOUT_MS: '500',
};

/**
 * The ways a planted value can be written: as it is, percent-encoded, form-encoded, JSON-escaped, each of those
 * cut to its first 12 characters (a quote cut before it was redacted leaves a part no value matches), and the
 * random part of a generated secret alone, which reads the same under any escaping (pg_dump's COPY text doubles
 * the backslashes of a JSON-escaped value, for one).
 */
function formsOf(value: string): string[] {
  const whole = [value, encodeURIComponent(value), new URLSearchParams({ v: value }).toString().slice(2), JSON.stringify(value).slice(1, -1)];
  const random = /[0-9a-f]{24}/.exec(value)?.[0];
  return [...new Set([...whole, ...whole.map((form) => form.slice(0, 12)), ...(random ? [random.slice(0, 12)] : [])])];
}

/** Where each planted value was found: `name in place: …context…`. */
function hunt(places: Record<string, string>): string[] {
  const hits: string[] = [];
  for (const [name, value] of Object.entries(PLANTED)) {
    for (const form of formsOf(value)) {
      for (const [place, text] of Object.entries(places)) {
        const at = text.indexOf(form);
        if (at >= 0) hits.push(`${name} in ${place}: …${text.slice(Math.max(0, at - 60), at + form.length + 20)}…`);
      }
    }
  }
  return hits;
}

interface Receiver {
  server: Server;
  url: string;
  /** What each request carried. */
  requests: { url: string; headers: IncomingHttpHeaders; body: string }[];
}

/** A loopback HTTP server answering each request with `answer(request)`. */
async function startReceiver(answer: (request: Receiver['requests'][number]) => { status: number; body: string }): Promise<Receiver> {
  const requests: Receiver['requests'] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => { body += chunk.toString(); });
    req.on('end', () => {
      const request = { url: req.url ?? '', headers: req.headers, body };
      requests.push(request);
      const { status, body: out } = answer(request);
      res.writeHead(status, { 'content-type': 'application/json' }).end(out);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests };
}

const closeServer = (server: Server) => new Promise((resolve) => server.close(resolve));

/** The whole test database as text: every schema, every table, every row. */
async function dumpDatabase(url: string): Promise<string> {
  const { stdout } = await run('pg_dump', ['--no-owner', '--no-privileges', url], { maxBuffer: 512 * 1024 * 1024 });
  return stdout;
}

/**
 * What the bot sent Slack: each call's method and parameters, every attempt (those answered 429 or 5xx too).
 * Not the `token` parameter, the bot's credential going to Slack itself (Bolt's auth.test sends it so), nor
 * the emulator's own answers.
 */
const sentToSlack = (calls: RecordedCall[]) => JSON.stringify(calls.map(({ method, params: { token: _token, ...params } }) => ({ method, params })));

const state = async (h: SlackHarness) => (await h.engine.ctx.pool.query<{ state: string }>('SELECT state FROM backfill.backfills WHERE id = 1')).rows[0]?.state;

describe('no planted secret leaves: every re-trigger kind and lineage failing, searched everywhere the bot writes', () => {
  const written: string[] = [];
  let openLineage: Receiver;
  let h: SlackHarness | undefined;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    // Every line any part of the process logs, as a service's standard output would carry it.
    configureLogging({ level: 'debug', name: 'backfill-bot', destination: { write: (line: string) => void written.push(line) } });
    // An OpenLineage endpoint that refuses every event and echoes the key it was sent.
    openLineage = await startReceiver((request) => ({ status: 500, body: JSON.stringify({ error: 'unauthorised', got: request.headers.authorization }) }));
  });
  afterAll(async () => closeServer(openLineage.server));
  afterEach(async () => {
    await h?.close();
    h = undefined;
    for (const receiver of receivers.splice(0)) await closeServer(receiver.server);
  });

  /**
   * Night 15 from Slack with settlement_report's re-trigger set to `retrigger` (written straight into the
   * catalog's row, as the catalog file would not take it): started, acknowledged, run by the workers until it
   * failed, its status asked for and its incident package uploaded. Then the planted definition is put back, and
   * everything the bot wrote is searched.
   */
  async function failNight15(retrigger: Record<string, unknown>, during: (harness: SlackHarness) => Promise<void> = async () => undefined): Promise<{ stepError: string; failure: string; hits: string[] }> {
    written.length = 0;
    openLineage.requests.length = 0;
    h = await createSlackHarness({ ...CONFIGURED, OPENLINEAGE_URL: `${openLineage.url}/api/v1/lineage` });
    const harness = h;
    await harness.engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1::jsonb WHERE name = 'settlement_report'`, [JSON.stringify(retrigger)]);
    await during(harness);
    await harness.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => harness.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length >= 2, 'the announcements');
    await harness.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await harness.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await waitUntil(async () => (await state(harness)) === 'failed', 'the backfill to fail', 30_000);
    // The failure reaches the incident channel: the status message, updated in place.
    await waitUntil(() => harness.slack.callsTo('chat.update').some((c) => c.params.channel === INCIDENT_CHANNEL && JSON.stringify(c.params).includes('failed')), 'the status message saying failed');
    await waitUntil(async () => (await harness.engine.ctx.pool.query(`SELECT 1 FROM backfill.lineage_emissions WHERE backfill_id = 1 AND event_type = 'FAIL' AND error IS NOT NULL`)).rowCount === 1, 'the FAIL run event sent');
    const status = await harness.command('status 1');
    expect(status.reply).toBeDefined();
    await harness.command('log 1');
    await harness.slack.waitFor('files.completeUploadExternal', 1, 30_000);

    const pool = harness.engine.ctx.pool;
    const { rows: [step] } = await pool.query<{ error: string | null; status: string }>(
      `SELECT error, status FROM backfill.backfill_steps WHERE backfill_id = 1 AND kind = 'replay' AND step_key = 'settlement_report'`);
    const { rows: [backfill] } = await pool.query<{ failure: string | null }>('SELECT failure FROM backfill.backfills WHERE id = 1');
    expect(step?.status).toBe('failed');
    expect(step?.error).toBeTruthy();
    expect(backfill?.failure).toContain('replay settlement_report failed');
    // The timeline recorded the failed attempts and the failure.
    expect((await pool.query(`SELECT 1 FROM backfill.events WHERE backfill_id = 1 AND kind IN ('step_retried', 'step_failed', 'failed')`)).rowCount).toBeGreaterThan(0);

    const pkg = await buildIncidentPackage(pool, 1);
    const cliStatus = renderStatus(await loadBackfillReport(pool, 1));
    // The planted definition is the test's input, not something the bot wrote: put back before the dump.
    await pool.query(`UPDATE backfill.consumers SET retrigger = '{"kind":"sql","statements":["SELECT 1"]}'::jsonb WHERE name = 'settlement_report'`);
    const places = {
      'the database': await dumpDatabase(harness.engine.ctx.config.DATABASE_URL),
      'the Slack calls': sentToSlack(harness.slack.attempts),
      'the response_url replies': JSON.stringify(harness.slack.responses),
      'the uploaded files': [...harness.slack.uploads.values()].map((bytes) => bytes.toString('utf8')).join('\n'),
      'the log': written.join(''),
      'the incident package (md)': incidentPackageMarkdown(pkg),
      'the incident package (json)': incidentPackageJson(pkg),
      "the CLI's status": cliStatus,
      'what went to OpenLineage': openLineage.requests.map((request) => request.body).join('\n'),
    };
    // Not vacuous: each place holds the backfill's story.
    expect(places['the uploaded files']).toContain('replay settlement_report failed');
    expect(places['the log']).not.toBe('');
    expect(places["the CLI's status"]).toContain('failed');
    return { stepError: step?.error ?? '', failure: backfill?.failure ?? '', hits: hunt(places) };
  }

  // The call-time URL policy refuses both webhooks below (the catalog file would not take them either); the
  // refusal is stored, posted and logged like any failure, and must not quote what it refused.
  it('a webhook whose URL carries a password', async () => {
    const hook = await startReceiver(() => ({ status: 200, body: '{}' }));
    receivers.push(hook);
    const url = hook.url.replace('http://', `http://leaky:${PLANTED.urlPassword}@`);
    const { stepError, hits } = await failNight15({ kind: 'webhook', url: `${url}/hooks/settlement` });
    expect(hits).toEqual([]);
    expect(stepError).toContain('settlement_report');
  });

  it('a webhook with a credential query parameter', async () => {
    const hook = await startReceiver(() => ({ status: 500, body: '{"error":"down"}' }));
    receivers.push(hook);
    const { stepError, hits } = await failNight15({ kind: 'webhook', url: `${hook.url}/hooks/settlement?team=finance&api_key=${PLANTED.queryKey}` });
    expect(hits).toEqual([]);
    expect(stepError).toContain('api_key=[redacted]');
  });

  it("an orchestrator whose 500 echoes the request's secret headers, and the bot's other secrets", async () => {
    const orchestrator = await startReceiver((request) => ({
      status: 500,
      body: JSON.stringify({
        error: 'run refused',
        echo: { 'x-orch-token': request.headers['x-orch-token'], authorization: request.headers.authorization },
        // A credential of the orchestrator's own, configured nowhere in the bot: only its shape gives it away.
        upstream: `Bearer ${PLANTED.upstreamBearer}`,
        env: `SLACK_BOT_TOKEN=${BOT_TOKEN} SLACK_SIGNING_SECRET=${SIGNING_SECRET} WEBHOOK_SIGNING_SECRET=${PLANTED.webhookSecret}`,
      }),
    }));
    receivers.push(orchestrator);
    const lineageIn = async (harness: SlackHarness) => {
      // OpenLineage in, with the token: an unknown job becomes a proposal posted to the incident channel.
      const lineageUrl = harness.eventsUrl.replace('/slack/events', '/lineage');
      const event = {
        eventType: 'COMPLETE', eventTime: '2026-11-25T06:00:00Z', producer: 'https://github.com/apache/airflow', schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
        run: { runId: randomUUID() }, job: { namespace: 'airflow-prod', name: 'finance.reconcile' },
        inputs: [{ namespace: 'postgres://warehouse:5432', name: 'harborlight.warehouse.orders', facets: { backfillPartitions: { hours: ['2026-12-01T05:00:00Z'] } } }], outputs: [],
      };
      const sent = await fetch(lineageUrl, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${PLANTED.lineageToken}` }, body: JSON.stringify(event) });
      // 202: taken, and a proposal for the unknown job.
      expect(sent.status).toBe(202);
      const refused = await fetch(lineageUrl, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${PLANTED.lineageToken}x` }, body: JSON.stringify(event) });
      expect(refused.status).toBe(401);
      await waitUntil(() => harness.slack.callsTo('chat.postMessage').some((c) => String(c.params.text).startsWith('Lineage proposal')), 'the lineage proposal');
    };
    const { stepError, failure, hits } = await failNight15({
      kind: 'rest', url: `${orchestrator.url}/api/dags/settlement/runs`,
      headers: { 'X-Orch-Token': { env: 'RETRIGGER_SECRET_ORCH' }, Authorization: { env: 'RETRIGGER_SECRET_BEARER' } },
    }, lineageIn);
    expect(hits).toEqual([]);
    // The secrets were sent and echoed: the search above was of an answer that held them.
    expect(orchestrator.requests[0]?.headers['x-orch-token']).toBe(PLANTED.orchestratorHeader);
    expect(orchestrator.requests[0]?.headers.authorization).toBe(`Bearer ${PLANTED.bearer}`);
    expect(stepError).toContain('answered 500');
    expect(stepError).toContain('[redacted]');
    expect(failure).toContain('[redacted]');
    // The OpenLineage endpoint was sent the key, refused, and its echo of it was kept nowhere.
    expect(openLineage.requests.some((request) => request.headers.authorization === `Bearer ${PLANTED.openLineageKey}`)).toBe(true);
  });

  it("a BullMQ re-trigger whose queue's connection secret holds a password, and whose Redis does not answer", async () => {
    const { stepError, hits } = await failNight15({ kind: 'bullmq', queue: 'settlement-rebuilds', jobName: 'rebuild', connection: { env: 'RETRIGGER_SECRET_QUEUE' }, wait: true, pollMs: 20, timeoutMs: 1000 });
    expect(hits).toEqual([]);
    expect(stepError).toContain('did not answer');
    // The queue's connection error was logged: the log holds the line the password could have been in.
    expect(written.some((line) => line.includes("a consumer's replay queue cannot reach its backend"))).toBe(true);
  });

  it('a SQL re-trigger whose statement fails quoting a configured secret', async () => {
    const quoted = PLANTED.statementSecret.replaceAll("'", "''");
    const { stepError, failure, hits } = await failNight15({ kind: 'sql', statements: [`SELECT '${quoted}'::int`] });
    expect(hits).toEqual([]);
    expect(stepError).toContain('invalid input syntax for type integer: "[redacted]"');
    expect(failure).toContain('[redacted]');
  });
});

describe('Slack and metrics: the last doors out', () => {
  it('redacts every string of a message and its blocks, a view and a reply, whichever client or fetch sends it; labels are redacted and bounded', async () => {
    const slack = await startSlackEmulator();
    const engine = await createTestEngine('empty', CONFIGURED);
    try {
      const secret = PLANTED.orchestratorHeader;
      const metrics = new Metrics(engine.ctx.pool);
      const client = new webApi.WebClient(BOT_TOKEN, { slackApiUrl: slack.url, retryConfig: { retries: 0 }, fetch: redactingFetch(metrics.slackFetch(slack.url)) });
      await client.chat.postMessage({
        channel: INCIDENT_CHANNEL, text: `failed: ${secret} https://u:${PLANTED.urlPassword}@h/x`,
        blocks: [{ type: 'section', text: { type: 'mrkdwn', text: `Bearer ${PLANTED.upstreamBearer}` } }],
      });
      await client.views.publish({ user_id: 'U07ONCALL', view: { type: 'home', blocks: [{ type: 'section', text: { type: 'mrkdwn', text: `?api_key=${PLANTED.queryKey}` } }] } });
      const respond = redactingFetch(globalThis.fetch);
      await respond(slack.responseUrl('leak'), { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text: `still ${PLANTED.webhookSecret}` }) });
      // Slack's error string becomes a label: a hostile or echoing answer must not put a secret on /metrics.
      slack.failWith('chat.postMessage', 1, `invalid_auth_${PLANTED.lineageToken}`);
      await client.chat.postMessage({ channel: INCIDENT_CHANNEL, text: 'again' }).catch(() => undefined);
      const { body: exposition } = await metrics.exposition();

      const posted = slack.callsTo('chat.postMessage')[0];
      expect(posted?.params.text).toBe('failed: [redacted] https://u:[redacted]@h/x');
      expect(JSON.stringify(posted?.params.blocks)).toContain('Bearer [redacted]');
      expect(JSON.stringify(slack.callsTo('views.publish')[0]?.params.view)).toContain('api_key=[redacted]');
      expect(slack.responses[0]?.body).toEqual({ text: 'still [redacted]' });
      expect(exposition).toContain('backfill_slack_api_errors_total{method="chat.postMessage",error="invalid_auth__redacted_"} 1');
      expect(hunt({ 'the Slack calls': sentToSlack(slack.attempts), 'the replies': JSON.stringify(slack.responses), 'the metrics': exposition })).toEqual([]);
    } finally {
      await slack.close();
      await engine.close();
    }
  });

  it('every Slack client the code makes is given the redacting fetch', () => {
    // A client made without it would send its messages unredacted: each file that makes one must pass the door.
    const files = (dir: string): string[] => readdirSync(dir, { withFileTypes: true })
      .flatMap((entry) => (entry.isDirectory() ? files(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : []));
    const makers = ['src', 'handlers', 'jobs'].flatMap(files).filter((file) => !file.startsWith(join('src', 'emulator')))
      .filter((file) => /new (?:webApi\.)?WebClient\(|new App\(/.test(readFileSync(file, 'utf8')));
    expect(makers.sort()).toEqual([join('src', 'app.ts'), join('src', 'slack', 'delivery', 'messenger.ts'), join('src', 'workerMain.ts')]);
    for (const file of makers) expect(readFileSync(file, 'utf8'), file).toContain('redactingFetch(');
  });
});
