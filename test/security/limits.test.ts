// No default secrets, bounded requests: the webhook signing secret has no default outside the demo and tests;
// `/backfill log` uploads once per backfill per change; a lineage token posts only its job namespaces, within its
// bounds (read rows per hour, open proposals), and text that is not text is refused before anything is written.

import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lineageSenders, loadConfig, secretValues } from '../../src/config.js';
import { requireWebhookSecret } from '../../src/core/retrigger/call.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { insertJobMapping } from '../../src/db/lineageEvents.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const MAKE_ONE = /WEBHOOK_SIGNING_SECRET is not set.*Make one with `openssl rand -hex 32`/;

/** Runs an entry point the way `npm start` does, with only `env` (and PATH), and gives back how it ended. */
function runEntryPoint(file: string, env: Record<string, string>): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    execFile(`${ROOT}node_modules/.bin/tsx`, [file], { cwd: ROOT, env: { PATH: process.env.PATH ?? '', ...env }, timeout: 60_000 }, (error, _stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stderr });
    });
  });
}

describe('WEBHOOK_SIGNING_SECRET has no default', () => {
  it('is unset when not configured, and requireWebhookSecret refuses with a sentence saying how to make one', () => {
    const config = loadConfig({});
    expect(config.WEBHOOK_SIGNING_SECRET).toBeUndefined();
    expect(() => requireWebhookSecret(config)).toThrowError(MAKE_ONE);
    expect(() => loadConfig({ WEBHOOK_SIGNING_SECRET: 'short' })).toThrowError(/WEBHOOK_SIGNING_SECRET must be at least 16 characters/);
    expect(requireWebhookSecret(loadConfig({ WEBHOOK_SIGNING_SECRET: 'a'.repeat(64) }))).toBe('a'.repeat(64));
  });

  it('npm start and npm run worker refuse to start without it, before opening anything', async () => {
    const slack = { SLACK_BOT_TOKEN: 'xoxb-start-test', SLACK_SIGNING_SECRET: 'start-test-signing-secret', DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' };
    for (const entry of ['src/main.ts', 'src/workerMain.ts']) {
      const ended = await runEntryPoint(entry, slack);
      expect(ended.code).toBe(1);
      expect(ended.stderr).toMatch(MAKE_ONE);
    }
  }, 120_000);
});

describe('LINEAGE_TOKENS', () => {
  const tokenA = 'a'.repeat(20) + '0123456789';
  const tokenB = 'b'.repeat(20) + '0123456789';

  it('binds each token to its sender and job namespaces; LINEAGE_TOKEN is every namespace; every token is a secret', () => {
    const config = loadConfig({ LINEAGE_TOKENS: `airflow:airflow-prod, airflow-dev:${tokenA}; dbt:postgres://wh:5432:${tokenB}`, LINEAGE_TOKEN: 'c'.repeat(30) });
    expect(lineageSenders(config)).toEqual([
      { name: 'airflow', namespaces: ['airflow-prod', 'airflow-dev'], token: tokenA },
      { name: 'dbt', namespaces: ['postgres://wh:5432'], token: tokenB },
      { name: 'LINEAGE_TOKEN', namespaces: null, token: 'c'.repeat(30) },
    ]);
    expect(secretValues(config)).toEqual(expect.arrayContaining([tokenA, tokenB, 'c'.repeat(30)]));
  });

  it('refuses a malformed entry or a short token with a sentence that never shows the token', () => {
    const refusal = (value: string) => {
      try {
        loadConfig({ LINEAGE_TOKENS: value });
      } catch (error) {
        return (error as Error).message;
      }
      return 'accepted';
    };
    expect(refusal(`airflow:${tokenA}`)).toMatch(/LINEAGE_TOKENS: the entry of airflow must be name:namespace\[,namespace…\]:token/);
    expect(refusal('airflow:airflow-prod:short-token')).toMatch(/the token of airflow must be at least 24 characters/);
    expect(refusal(`airflow:ns1:${tokenA};airflow:ns2:${tokenB}`)).toMatch(/airflow is named twice/);
    expect(refusal('Airflow:ns1:short-token')).not.toContain('short-token');
  });
});

describe('/backfill log <id>: one upload per backfill per change', () => {
  let h: SlackHarness;
  const packageUploads = () => h.slack.callsTo('files.completeUploadExternal').filter((c) => String(c.params.initial_comment).startsWith('Incident package'));

  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command('start orders 2026-11-15 currency parsed as text');
    // Announced and waiting on both owners: nothing changes the package until someone acts.
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'the announcements');
    await waitUntil(async () => await countRows(h.engine.ctx, `SELECT 1 FROM backfill.backfill_steps WHERE backfill_id = 1 AND kind = 'announce' AND status <> 'done'`) === 0
      && await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = 1 AND kind = 'announcement_sent'`) === 2
      && await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.backfills WHERE id = 1 AND status_ts IS NOT NULL') === 1, 'the announce steps to finish');
  });
  afterAll(async () => h.close());

  it('uploads once for 20 requests at once; a repeat names the file and the thread it is in', async () => {
    const replies = await Promise.all(Array.from({ length: 20 }, (_, i) => h.command('log 1', `U07ANY${i}`, `C0ELSEWHERE${i}`)));
    expect(packageUploads()).toHaveLength(1);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = 1 AND kind = 'package_uploaded'`)).toBe(1);
    const texts = replies.map((r) => r.reply ?? '');
    expect(texts.filter((t) => /\(Markdown and JSON\) is in <#C0INCIDENT>'s incident thread\./.test(t))).toHaveLength(1);
    // The rest were told it is on its way or already there, never that it was uploaded again.
    expect(texts.every((t) => /incident package of backfill #1/i.test(t))).toBe(true);

    const shared = packageUploads()[0]?.params;
    expect(shared).toMatchObject({ channel_id: INCIDENT_CHANNEL, thread_ts: expect.any(String) });
    const fileId = (shared?.files as { id: string }[] | undefined)?.[0]?.id;
    expect(fileId).toBeTruthy();
    // The database is the record of where it went: the upload's row keeps the file id.
    const { rows } = await h.engine.ctx.pool.query(`SELECT channel, ts FROM backfill.message_intents WHERE intent LIKE 'bf1:package:%'`);
    expect(rows).toEqual([{ channel: INCIDENT_CHANNEL, ts: fileId }]);
    const { reply } = await h.command('log 1', 'U07VISITOR');
    expect(reply).toContain(`has not changed since it was uploaded to <#${INCIDENT_CHANNEL}>'s incident thread`);
    expect(reply).toContain(`(file ${fileId ?? '?'}), so it was not uploaded again`);
    expect(packageUploads()).toHaveLength(1);
  });

  it('uploads again once after a change (a new timeline event), and only once', async () => {
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await waitUntil(async () => await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = 1 AND kind = 'acknowledged'`) === 1, 'the acknowledgement');
    await Promise.all(Array.from({ length: 5 }, () => h.command('log 1', OPERATOR)));
    expect(packageUploads()).toHaveLength(2);
    const uploaded = [...h.slack.uploads.values()].map((b) => b.toString('utf8')).filter((text) => text.trimStart().startsWith('{'));
    expect(JSON.parse(uploaded.at(-1) ?? '{}').timeline.map((e: { kind: string }) => e.kind)).toContain('acknowledged');
  });
});

describe('POST /lineage: per-token namespaces and bounds', () => {
  const AIRFLOW = 'airflow-token-0123456789abcdef';
  const DBT = 'dbt-token-0123456789abcdef0123';
  const ALL = 'lineage-all-namespaces-0123456789';
  let h: SlackHarness;
  let url: string;

  const event = (namespace: string, job: string, hours: string[], overrides: Record<string, unknown> = {}) => ({
    eventType: 'COMPLETE',
    eventTime: '2026-11-25T06:00:00Z',
    producer: 'https://github.com/apache/airflow/tree/providers-openlineage',
    schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
    run: { runId: randomUUID() },
    job: { namespace, name: job },
    inputs: [{ namespace: 'postgres://warehouse:5432', name: 'harborlight.warehouse.orders', facets: { backfillPartitions: { hours } } }],
    ...overrides,
  });
  const hoursOf = (day: string, count: number) => Array.from({ length: count }, (_, i) => new Date(Date.parse(`${day}T00:00:00Z`) + i * 3_600_000).toISOString());
  const post = async (token: string, body: unknown, raw?: string | Uint8Array) => {
    const response = await fetch(url, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: raw ?? JSON.stringify(body) });
    return { status: response.status, retryAfter: response.headers.get('retry-after'), body: (await response.json()) as Record<string, unknown> };
  };
  const written = async () => ({
    events: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_events'),
    reads: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.read_log'),
    pending: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_pending_reads'),
    proposals: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_proposals'),
  });

  beforeAll(async () => {
    h = await createSlackHarness({
      LINEAGE_TOKENS: `airflow:airflow-prod:${AIRFLOW};dbt:dbt-prod,dbt-dev:${DBT}`,
      LINEAGE_TOKEN: ALL,
      LINEAGE_READS_PER_HOUR: '60',
      LINEAGE_MAX_OPEN_PROPOSALS: '2',
      BACKFILL_CHANNELS: INCIDENT_CHANNEL,
    });
    url = h.eventsUrl.replace('/slack/events', '/lineage');
    await insertJobMapping(h.engine.ctx.pool, { jobNamespace: 'dbt-prod', jobName: 'models.revenue', consumer: 'settlement_report', confirmedBy: OPERATOR });
    await insertJobMapping(h.engine.ctx.pool, { jobNamespace: 'airflow-prod', jobName: 'finance.settlement', consumer: 'settlement_report', confirmedBy: OPERATOR });
  });
  afterAll(async () => h.close());

  it("answers 403 with a sentence to an event outside the token's namespaces, and writes nothing", async () => {
    const before = await written();
    const sent = await post(AIRFLOW, event('dbt-prod', 'models.revenue', hoursOf('2026-12-01', 1)));
    expect(sent.status).toBe(403);
    expect(sent.body.error).toMatch(/The token of airflow may post events of the job namespaces airflow-prod only, and job\.namespace is "dbt-prod"; nothing was recorded/);
    expect(await written()).toEqual(before);
    // Its own namespace goes through, and so does any namespace with LINEAGE_TOKEN.
    expect((await post(AIRFLOW, event('airflow-prod', 'finance.settlement', hoursOf('2026-12-01', 1)))).status).toBe(200);
    expect((await post(ALL, event('dbt-prod', 'models.revenue', hoursOf('2026-12-01', 1)))).status).toBe(200);
  });

  it('answers 400 to more than MAX_PARTITIONS hours for one input (the 720-hour request included), and writes nothing', async () => {
    const before = await written();
    const facet = await post(DBT, event('dbt-prod', 'models.revenue', hoursOf('2026-12-02', 49)));
    expect(facet.status).toBe(400);
    expect(facet.body.error).toMatch(/names 49 hours of inputs\[0\]; at most 48 \(MAX_PARTITIONS\) are accepted per input/);
    const month = event('dbt-prod', 'models.revenue', [], {
      run: { runId: randomUUID(), facets: { nominalTime: { nominalStartTime: '2026-10-01T00:00:00Z', nominalEndTime: '2026-10-31T00:00:00Z' } } },
      inputs: [{ namespace: 'postgres://warehouse:5432', name: 'harborlight.warehouse.orders' }],
    });
    const nominal = await post(DBT, month);
    expect(nominal.status).toBe(400);
    expect(nominal.body.error).toMatch(/run\.facets\.nominalTime covers 720 hours of inputs\[0\]; at most 48/);
    expect(await written()).toEqual(before);
  });

  it("answers 429 with Retry-After once a sender's read rows for the hour are spent; other senders are not held back", async () => {
    // dbt has 60 read rows an hour: 48 + 12 fit, the next one does not.
    expect((await post(DBT, event('dbt-prod', 'models.revenue', hoursOf('2026-12-03', 48)))).body).toMatchObject({ outcome: 'recorded', reads: 48 });
    expect((await post(DBT, event('dbt-prod', 'models.revenue', hoursOf('2026-12-10', 11)))).body).toMatchObject({ outcome: 'recorded', reads: 11 });
    const before = await written();
    const refused = await post(DBT, event('dbt-prod', 'models.revenue', hoursOf('2026-12-06', 2)));
    expect(refused.status).toBe(429);
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
    expect(refused.body.error).toMatch(/dbt has written as many read rows as it may in an hour \(LINEAGE_READS_PER_HOUR, 60\); this event's 2 were not recorded\. Send it again in \d+ s/);
    expect(await written()).toEqual(before);
    expect((await post(ALL, event('dbt-prod', 'models.revenue', hoursOf('2026-12-06', 2)))).body).toMatchObject({ outcome: 'recorded', reads: 2 });
  });

  it('answers 429 with Retry-After past LINEAGE_MAX_OPEN_PROPOSALS open proposals per sender, also when the events arrive at once', async () => {
    const jobs = ['a', 'b', 'c', 'd', 'e'].map((x) => `scratch.job_${x}`);
    const before = await written();
    const sent = await Promise.all(jobs.map((job) => post(AIRFLOW, event('airflow-prod', job, hoursOf('2026-12-07', 1)))));
    expect(sent.map((s) => s.status).sort()).toEqual([202, 202, 429, 429, 429]);
    const refused = sent.find((s) => s.status === 429);
    expect(refused?.retryAfter).toBeTruthy();
    expect(refused?.body.error).toMatch(/airflow has 2 lineage proposals waiting for an operator, as many as a sender may \(LINEAGE_MAX_OPEN_PROPOSALS\)/);
    const after = await written();
    expect(after.proposals - before.proposals).toBe(2);
    expect(after.events - before.events).toBe(2);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.lineage_proposals WHERE proposed_by = 'airflow' AND state = 'proposed'`)).toBe(2);
    // A job already proposed still adds its reads, and an operator's decision frees a place.
    const accepted = sent.findIndex((s) => s.status === 202);
    expect((await post(AIRFLOW, event('airflow-prod', jobs[accepted] ?? '', hoursOf('2026-12-08', 1)))).status).toBe(202);
    const proposal = Number(sent[accepted]?.body.proposal);
    expect((await h.command(`lineage reject ${proposal} scratch`)).reply).toMatch(/rejected/);
    const refusedJob = jobs[sent.findIndex((s) => s.status === 429)] ?? '';
    expect((await post(AIRFLOW, event('airflow-prod', refusedJob, hoursOf('2026-12-07', 1)))).status).toBe(202);
  });

  it('answers 400 with a sentence to NUL, a control character, a lone surrogate or bytes that are not UTF-8, and writes nothing', async () => {
    const before = await written();
    const body = JSON.stringify(event('airflow-prod', 'finance.settlement', hoursOf('2026-12-09', 1)));
    const cases: [string | Uint8Array, RegExp][] = [
      [body.replace('"finance.settlement"', '"finance.\\u0000settlement"'), /^job\.name holds the control character U\+0000/],
      [body.replace('"harborlight.warehouse.orders"', '"harborlight.warehouse.orders\\u0000"'), /^inputs\[0\]\.name holds the control character U\+0000/],
      [body.replace('"finance.settlement"', '"finance.\\u001b[2Jsettlement"'), /^job\.name holds the control character U\+001B/],
      [body.replace('"finance.settlement"', '"finance.\\ud800settlement"'), /^job\.name holds a lone surrogate \(not valid Unicode\)/],
      [body.replace('"producer"', '"pro\\udc00ducer"'), /^a key in the body holds a lone surrogate/],
      [Buffer.concat([Buffer.from(`${body.slice(0, -1)},"x":"`), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]), /^The body is not UTF-8 text/],
    ];
    for (const [raw, message] of cases) {
      const sent = await post(AIRFLOW, null, raw);
      expect(sent.status).toBe(400);
      expect(String(sent.body.error)).toMatch(message);
    }
    expect(await written()).toEqual(before);
    // Tab and newline are text.
    expect((await post(AIRFLOW, null, body.replace('"producer":"', '"producer":"line\\tone\\n'))).status).toBe(200);
  });
});
