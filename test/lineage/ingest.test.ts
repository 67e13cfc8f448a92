import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertJobMapping } from '../../src/db/lineageEvents.js';
import { listReaders } from '../../src/db/readLog.js';
import { MAX_BODY_BYTES } from '../../src/http/lineage.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, type SlackHarness } from '../support/slackApp.js';

const TOKEN = 'lineage-test-token-0123456789abcdef';
const NEW_OWNER = 'U07NEWOWNER';

interface Sent {
  status: number;
  body: Record<string, unknown>;
}

/** A COMPLETE RunEvent of `job` that read warehouse.orders: these hours (the facet), or the run's nominal time. */
function runEvent(job: string, read: { hours?: string[]; nominal?: [string, string] }, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    eventType: 'COMPLETE',
    eventTime: '2026-11-25T06:00:00Z',
    producer: 'https://github.com/apache/airflow/tree/providers-openlineage',
    schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
    run: { runId: randomUUID(), ...(read.nominal ? { facets: { nominalTime: { nominalStartTime: read.nominal[0], nominalEndTime: read.nominal[1] } } } : {}) },
    job: { namespace: 'airflow-prod', name: job },
    inputs: [
      { namespace: 'postgres://warehouse:5432', name: 'harborlight.warehouse.orders', ...(read.hours ? { facets: { backfillPartitions: { hours: read.hours } } } : {}) },
      { namespace: 's3://exports', name: 'fx/rates.csv' },
    ],
    outputs: [{ namespace: 's3://reports', name: 'finance/daily.pdf' }],
    ...overrides,
  };
}

describe('POST /lineage: OpenLineage run events into the read log', () => {
  let h: SlackHarness;
  let lineageUrl: string;

  const post = async (body: unknown, options: { token?: string | null; raw?: string; contentType?: string } = {}): Promise<Sent> => {
    const headers: Record<string, string> = { 'content-type': options.contentType ?? 'application/json' };
    if (options.token !== null) headers.authorization = `Bearer ${options.token ?? TOKEN}`;
    const response = await fetch(lineageUrl, { method: 'POST', headers, body: options.raw ?? JSON.stringify(body) });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  const readLogRows = () => countRows(h.engine.ctx, 'SELECT 1 FROM backfill.read_log');
  const seenEvents = () => countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_events');
  const pendingRows = () => countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_pending_reads');
  const proposalsPosted = () => h.slack.callsTo('chat.postMessage').filter((call) => String(call.params.text).startsWith('Lineage proposal'));
  const readsOf = async (consumer: string, day: string) => (await h.engine.ctx.pool.query<{ h: string }>(
    `SELECT to_char(partition_hour AT TIME ZONE 'UTC', 'HH24') AS h FROM backfill.read_log
     WHERE consumer = $1 AND pipeline = 'orders' AND (partition_hour AT TIME ZONE 'UTC')::date = $2::date ORDER BY 1`, [consumer, day])).rows.map((r) => r.h);

  beforeAll(async () => {
    h = await createSlackHarness({ LINEAGE_TOKEN: TOKEN, BACKFILL_CHANNELS: INCIDENT_CHANNEL });
    lineageUrl = h.eventsUrl.replace('/slack/events', '/lineage');
    // An operator confirmed long ago that Airflow's finance.settlement job is the settlement report.
    await insertJobMapping(h.engine.ctx.pool, { jobNamespace: 'airflow-prod', jobName: 'finance.settlement', consumer: 'settlement_report', confirmedBy: OPERATOR });
  });
  afterAll(async () => h.close());

  it('records the hours of the backfillPartitions facet as read log rows of the mapped consumer, which then reads as a reader', async () => {
    const hours = ['2026-12-01T05:00:00Z', '2026-12-01T06:00:00Z', '2026-12-01T07:00:00Z'];
    const sent = await post(runEvent('finance.settlement', { hours }));
    expect(sent).toEqual({ status: 200, body: { outcome: 'recorded', consumer: 'settlement_report', reads: 3 } });
    expect(await readsOf('settlement_report', '2026-12-01')).toEqual(['05', '06', '07']);
    const { rows } = await h.engine.ctx.pool.query(`SELECT DISTINCT read_at FROM backfill.read_log WHERE consumer = 'settlement_report' AND partition_hour >= '2026-12-01'`);
    expect(rows).toEqual([{ read_at: new Date('2026-11-25T06:00:00Z') }]);
    // The announcements are built from this: the hour now has a reader, told before a backfill of it.
    const readers = await listReaders(h.engine.ctx.pool, 'orders', [new Date('2026-12-01T06:00:00Z')]);
    expect(readers.find((r) => r.consumer === 'settlement_report')).toMatchObject({ readDirectly: true, partitionsRead: 1 });
  });

  it('adds nothing for a duplicate, even when the two copies arrive at once', async () => {
    const event = runEvent('finance.settlement', { hours: ['2026-12-02T05:00:00Z', '2026-12-02T06:00:00Z'] });
    const [first, second] = await Promise.all([post(event), post(event)]);
    expect([first?.body.outcome, second?.body.outcome].sort()).toEqual(['duplicate', 'recorded']);
    const rows = await readLogRows();
    const seen = await seenEvents();
    expect(await post(event)).toEqual({ status: 200, body: { outcome: 'duplicate', reads: 0 } });
    expect(await readLogRows()).toBe(rows);
    expect(await seenEvents()).toBe(seen);
    expect(await readsOf('settlement_report', '2026-12-02')).toEqual(['05', '06']);
  });

  it("takes the hours from the run's nominal time when the input has no facet: every hour it touches", async () => {
    const sent = await post(runEvent('finance.settlement', { nominal: ['2026-12-03T05:30:00Z', '2026-12-03T08:00:00Z'] }));
    expect(sent.body).toMatchObject({ outcome: 'recorded', reads: 3 });
    expect(await readsOf('settlement_report', '2026-12-03')).toEqual(['05', '06', '07']);
  });

  it('answers 401 to a missing or wrong bearer token and writes nothing', async () => {
    const rows = await readLogRows();
    const seen = await seenEvents();
    const event = runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z'] });
    for (const token of [null, 'wrong-token-wrong-token-wrong', `${TOKEN}x`, '']) {
      const sent = await post(event, { token });
      expect(sent.status).toBe(401);
      expect(sent.body.error).toMatch(/bearer token is required/);
    }
    const basic = await fetch(lineageUrl, { method: 'POST', headers: { authorization: `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}`, 'content-type': 'application/json' }, body: JSON.stringify(event) });
    expect(basic.status).toBe(401);
    expect(await readLogRows()).toBe(rows);
    expect(await seenEvents()).toBe(seen);
  });

  it('answers 400 naming what is wrong in a malformed event, and writes nothing', async () => {
    const rows = await readLogRows();
    const seen = await seenEvents();
    const cases: [unknown, RegExp][] = [
      [undefined, /The body is not JSON/],
      [runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z'] }, { run: { runId: 'not-a-uuid' } }), /run\.runId must be a UUID/],
      [runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z'] }, { job: { namespace: 'airflow-prod' } }), /job\.name is missing/],
      [runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z'] }, { eventType: 'DONE' }), /eventType must be one of START, RUNNING, COMPLETE/],
      [runEvent('finance.settlement', { hours: ['yesterday'] }), /inputs\[0\]\.facets\.backfillPartitions\.hours\[0\] must be an ISO 8601 time/],
      [runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z', '2026-12-04T05:30:00Z'] }), /hours\[1\] is 2026-12-04T05:30:00Z, not a whole hour/],
      [runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z'] }, { eventTime: '2026-12-04T05:00:00' }), /eventTime must be an ISO 8601 time with a zone/],
      [{ eventTime: '2026-12-04T05:00:00Z', producer: 'https://example.com', schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json' }, /run is missing/],
    ];
    for (const [event, message] of cases) {
      const sent = event === undefined ? await post(null, { raw: '{"eventType": "COMPLETE",' }) : await post(event);
      expect(sent.status).toBe(400);
      expect(sent.body.error).toMatch(message);
    }
    expect((await post(null, { raw: 'eventType=COMPLETE', contentType: 'application/x-www-form-urlencoded' })).status).toBe(415);
    expect(await readLogRows()).toBe(rows);
    expect(await seenEvents()).toBe(seen);
  });

  it('refuses a body over the size limit with 413', async () => {
    const sent = await post(null, { raw: JSON.stringify({ padding: 'x'.repeat(MAX_BODY_BYTES) }) });
    expect(sent.status).toBe(413);
  });

  it('records nothing for a START event (it keeps its pipeline inputs for the COMPLETE), or for a run that read no pipeline table', async () => {
    const rows = await readLogRows();
    const start = await post(runEvent('finance.settlement', { hours: ['2026-12-04T05:00:00Z'] }, { eventType: 'START' }));
    expect(start).toMatchObject({ status: 200, body: { outcome: 'noted', inputs: 1, note: expect.stringMatching(/kept for the run's COMPLETE/) } });
    const elsewhere = runEvent('finance.settlement', {}, { inputs: [{ namespace: 's3://exports', name: 'fx/rates.csv' }] });
    expect(await post(elsewhere)).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: "none of its inputs is a pipeline's table" } });
    const otherStart = await post({ ...elsewhere, eventType: 'START' });
    expect(otherStart).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/only COMPLETE says what a run read/) } });
    expect(await readLogRows()).toBe(rows);
  });

  describe('an unknown job', () => {
    let proposalId: number;

    it('becomes a proposal posted to the operators, with its reads kept pending: no consumer, no read log rows', async () => {
      const rows = await readLogRows();
      const consumers = await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.consumers');
      const sent = await post(runEvent('finance.daily_close', { hours: ['2026-11-15T05:00:00Z', '2026-11-15T06:00:00Z'] }));
      expect(sent.status).toBe(202);
      expect(sent.body).toMatchObject({ outcome: 'pending', reads: 2 });
      proposalId = Number(sent.body.proposal);
      expect(await readLogRows()).toBe(rows);
      expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.consumers')).toBe(consumers);
      expect(await pendingRows()).toBe(2);
      // Not a reader of night 15 until an operator says who it is.
      const readers = await listReaders(h.engine.ctx.pool, 'orders', [new Date('2026-11-15T05:00:00Z')]);
      expect(readers.map((r) => r.consumer)).not.toContain('finance_daily_close');
      const posted = proposalsPosted();
      expect(posted).toHaveLength(1);
      expect(posted[0]?.params.channel).toBe(INCIDENT_CHANNEL);
      expect(JSON.stringify(posted[0]?.params.blocks)).toContain(`/backfill lineage confirm ${proposalId} as <consumer>`);
    });

    it('a second run of it adds to the same proposal, which is not posted again', async () => {
      const sent = await post(runEvent('finance.daily_close', { hours: ['2026-11-15T07:00:00Z'] }));
      expect(sent).toMatchObject({ status: 202, body: { outcome: 'pending', proposal: proposalId, reads: 1 } });
      expect(await pendingRows()).toBe(3);
      expect(proposalsPosted()).toHaveLength(1);
    });

    it('is refused to someone who is not an operator, and stays a proposal', async () => {
      const { reply } = await h.command(`lineage confirm ${proposalId} ${NEW_OWNER} report`, 'U07VISITOR');
      expect(reply).toMatch(/<@U07VISITOR> is not a backfill operator, so cannot confirm lineage/);
      expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.lineage_proposals WHERE id = $1 AND state = 'proposed'`, [proposalId])).toBe(1);
      expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.consumers WHERE name = 'finance_daily_close'`)).toBe(0);
      expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND actor = 'U07VISITOR'`)).toBe(1);
    });

    it('explains a malformed confirmation', async () => {
      expect((await h.command(`lineage confirm ${proposalId} @settlement report`)).reply).toMatch(/`@settlement` is not a Slack user id/);
      expect((await h.command('lineage confirm 99 U07X report')).reply).toMatch(/There is no lineage proposal #99/);
      expect((await h.command(`lineage confirm ${proposalId} as no_such_consumer`)).reply).toMatch(/There is no consumer called "no_such_consumer"/);
    });

    it('an operator confirms it in Slack: the consumer is registered with the owner given, the pending reads move into the read log', async () => {
      expect((await h.command('lineage list')).reply).toContain(`#${proposalId} \`airflow-prod\` / \`finance.daily_close\`: orders: 3 hours (05:00–07:00 on 2026-11-15)`);
      const { reply } = await h.command(`lineage confirm ${proposalId} <@${NEW_OWNER}|closer> report`);
      expect(reply).toMatch(/confirmed: .* is registered as the new consumer \*finance_daily_close\*, owned by <@U07NEWOWNER>\. 3 pending reads moved into the read log/);
      const { rows } = await h.engine.ctx.pool.query(`SELECT kind, owner, notify_rule FROM backfill.consumers WHERE name = 'finance_daily_close'`);
      expect(rows).toEqual([{ kind: 'report', owner: NEW_OWNER, notify_rule: 'before' }]);
      expect(await readsOf('finance_daily_close', '2026-11-15')).toEqual(['05', '06', '07']);
      expect(await pendingRows()).toBe(0);
      const decision = await h.engine.ctx.pool.query(`SELECT actor, detail FROM backfill.events WHERE kind = 'lineage_confirmed'`);
      expect(decision.rows).toEqual([{ actor: OPERATOR, detail: expect.objectContaining({ proposal: proposalId, consumer: 'finance_daily_close', owner: NEW_OWNER }) }]);
      // Now it is a reader the night-15 announcements are made for.
      const readers = await listReaders(h.engine.ctx.pool, 'orders', [new Date('2026-11-15T05:00:00Z')]);
      expect(readers.find((r) => r.consumer === 'finance_daily_close')).toMatchObject({ owner: NEW_OWNER, notifyRule: 'before', readDirectly: true });
      expect((await h.command(`lineage reject ${proposalId}`)).reply).toMatch(/was confirmed by <@U07ONCALL> \(as finance_daily_close\); nothing changed/);
    });

    it('its next events go straight into the read log', async () => {
      const sent = await post(runEvent('finance.daily_close', { hours: ['2026-11-16T05:00:00Z'] }));
      expect(sent).toEqual({ status: 200, body: { outcome: 'recorded', consumer: 'finance_daily_close', reads: 1 } });
    });

    it('can be mapped to a consumer already registered', async () => {
      const sent = await post(runEvent('exports.payouts_v2', { hours: ['2026-12-05T05:00:00Z'] }));
      const id = Number(sent.body.proposal);
      const { reply } = await h.command(`lineage confirm ${id} as payout_export`);
      expect(reply).toMatch(/is now known as the consumer \*payout_export\*/);
      expect(await readsOf('payout_export', '2026-12-05')).toEqual(['05']);
    });

    it('once rejected, adds nothing now or later', async () => {
      const rows = await readLogRows();
      const sent = await post(runEvent('scratch.notebook', { hours: ['2026-11-18T05:00:00Z'] }));
      const id = Number(sent.body.proposal);
      expect((await h.command(`lineage reject ${id} someone's notebook`)).reply).toMatch(/rejected: .* \(1 pending read dropped; its later events are ignored\)/);
      const later = await post(runEvent('scratch.notebook', { hours: ['2026-11-19T05:00:00Z'] }));
      expect(later).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(new RegExp(`rejected this job \\(lineage proposal #${id}\\)`)) } });
      expect(await readLogRows()).toBe(rows);
      expect(await pendingRows()).toBe(0);
      expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.consumers WHERE name = 'scratch_notebook'`)).toBe(0);
    });
  });
});

describe('POST /lineage without LINEAGE_TOKEN', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness();
  });
  afterAll(async () => h.close());

  it('does not exist: 404, and nothing is written', async () => {
    const response = await fetch(h.eventsUrl.replace('/slack/events', '/lineage'), {
      method: 'POST', headers: { authorization: 'Bearer anything', 'content-type': 'application/json' }, body: JSON.stringify(runEvent('finance.settlement', { hours: ['2026-12-01T05:00:00Z'] })),
    });
    expect(response.status).toBe(404);
    expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_events')).toBe(0);
  });
});
