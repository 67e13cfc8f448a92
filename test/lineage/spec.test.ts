// POST /lineage as the OpenLineage specification allows (schemas/openlineage/OpenLineage.json): what the spec does
// not require is not required, a run's events are cumulative, the spec's subset facet and an operator's read rule
// say which hours a run read, and the clients' transport (endpoint api/v1/lineage, compression gzip) is served.

import { readFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertJobMapping } from '../../src/db/lineageEvents.js';
import { MAX_BODY_BYTES } from '../../src/http/lineage.js';
import { countRows } from '../support/engine.js';
import { openLineageSchemas } from '../support/openLineageSchemas.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, type SlackHarness } from '../support/slackApp.js';

const TOKEN = 'lineage-spec-token-0123456789abcdef';
const AIRFLOW_TOKEN = 'airflow-spec-token-0123456789abcdef';
const NEW_OWNER = 'U07REVENUE';
const ORDERS = 'harborlight.warehouse.orders';
const SUBSET_SCHEMA = 'https://openlineage.io/spec/facets/1-0-0/BaseSubsetDatasetFacet.json#/$defs/InputSubsetInputDatasetFacet';
const FIXTURES = fileURLToPath(new URL('../fixtures/openlineage/spec/', import.meta.url));

type Body = Record<string, unknown>;
interface Sent {
  status: number;
  body: Body;
}

/** A COMPLETE RunEvent of `job` reading warehouse.orders with nothing that says which hours: the facets a test gives do. */
function complete(job: string, options: { runId?: string; eventTime?: string; inputFacets?: Body; facets?: Body; runFacets?: Body; eventType?: string; inputs?: unknown[] } = {}): Body {
  return {
    eventType: options.eventType ?? 'COMPLETE',
    eventTime: options.eventTime ?? '2026-11-20T06:30:00Z',
    producer: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/dbt',
    schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
    run: { runId: options.runId ?? randomUUID(), ...(options.runFacets ? { facets: options.runFacets } : {}) },
    job: { namespace: 'airflow-prod', name: job },
    inputs: options.inputs ?? [{
      namespace: 'postgres://warehouse:5432', name: ORDERS,
      ...(options.facets ? { facets: options.facets } : {}), ...(options.inputFacets ? { inputFacets: options.inputFacets } : {}),
    }],
  };
}

const facetFields = { _producer: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/client/python', _schemaURL: 'https://openlineage.io/spec/facets/1-0-0/BaseSubsetDatasetFacet.json#/$defs/InputSubsetInputDatasetFacet' };
const subset = (inputCondition: unknown): Body => ({ subset: { ...facetFields, inputCondition } });
const compare = (left: unknown, comparison: string, right: unknown) => ({ type: 'compare', left, right, comparison });
const field = (name: string) => ({ type: 'field', field: name });
const literal = (value: string) => ({ type: 'literal', value });
const and = (left: unknown, right: unknown) => ({ type: 'binary', operator: 'AND', left, right });
const or = (left: unknown, right: unknown) => ({ type: 'binary', operator: 'OR', left, right });
const nominal = (start: string, end?: string): Body => ({ nominalTime: { ...facetFields, nominalStartTime: start, ...(end ? { nominalEndTime: end } : {}) } });

describe('POST /lineage, as the OpenLineage specification allows', () => {
  let h: SlackHarness;
  let base: string;

  const post = async (body: unknown, options: { path?: string; token?: string; raw?: Buffer | string; encoding?: string } = {}): Promise<Sent> => {
    const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${options.token ?? TOKEN}` };
    if (options.encoding) headers['content-encoding'] = options.encoding;
    const response = await fetch(`${base}${options.path ?? '/lineage'}`, { method: 'POST', headers, body: options.raw ?? JSON.stringify(body) });
    return { status: response.status, body: (await response.json()) as Body };
  };
  const reads = async (consumer: string, day: string) => (await h.engine.ctx.pool.query<{ hour: string; inferred: boolean }>(
    `SELECT to_char(partition_hour AT TIME ZONE 'UTC', 'HH24') AS hour, inferred FROM backfill.read_log
     WHERE consumer = $1 AND (partition_hour AT TIME ZONE 'UTC')::date = $2::date ORDER BY 1`, [consumer, day])).rows;
  const hoursRead = async (consumer: string, day: string) => (await reads(consumer, day)).map((row) => row.hour);
  const written = async () => ({
    reads: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.read_log'),
    events: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_events'),
    runs: await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_runs'),
  });

  beforeAll(async () => {
    h = await createSlackHarness({ LINEAGE_TOKEN: TOKEN, LINEAGE_TOKENS: `airflow:airflow-prod:${AIRFLOW_TOKEN}`, BACKFILL_CHANNELS: INCIDENT_CHANNEL });
    base = h.eventsUrl.replace('/slack/events', '');
    const pool = h.engine.ctx.pool;
    // Mapped long ago: the settlement report without a read rule, the payout export with one (3 hours).
    await insertJobMapping(pool, { jobNamespace: 'airflow-prod', jobName: 'finance.settlement', consumer: 'settlement_report', confirmedBy: OPERATOR });
    await insertJobMapping(pool, { jobNamespace: 'airflow-prod', jobName: 'exports.payouts', consumer: 'payout_export', confirmedBy: OPERATOR, readsHoursToWatermark: 3 });
  });
  afterAll(async () => h.close());

  describe("the OpenLineage clients' HTTP transport", () => {
    it("answers at /api/v1/lineage, the clients' default endpoint, as at /lineage", async () => {
      const sent = await post(complete('finance.settlement', { runFacets: nominal('2026-12-01T05:00:00Z', '2026-12-01T06:00:00Z') }), { path: '/api/v1/lineage' });
      expect(sent).toEqual({ status: 200, body: { outcome: 'recorded', consumer: 'settlement_report', reads: 1 } });
    });

    it('decodes a gzip body (compression: gzip), holding what it decodes to the same size and text rules', async () => {
      const event = complete('finance.settlement', { runFacets: nominal('2026-12-02T05:00:00Z', '2026-12-02T07:00:00Z') });
      expect(await post(null, { raw: gzipSync(JSON.stringify(event)), encoding: 'gzip' })).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 2 } });
      const before = await written();
      // A few kilobytes that decode to twice the limit: refused once the limit is reached, not after.
      const bomb = gzipSync(JSON.stringify({ ...event, padding: 'x'.repeat(2 * MAX_BODY_BYTES) }));
      expect(bomb.length).toBeLessThan(MAX_BODY_BYTES / 100);
      const large = await post(null, { raw: bomb, encoding: 'gzip' });
      expect(large.status).toBe(413);
      expect(large.body.error).toMatch(/larger than 1048576 bytes once decompressed/);
      const notGzip = await post(event, { encoding: 'gzip' });
      expect(notGzip).toMatchObject({ status: 400, body: { error: expect.stringMatching(/says Content-Encoding: gzip but is not gzip data/) } });
      const brotli = await post(event, { encoding: 'br' });
      expect(brotli).toMatchObject({ status: 415, body: { error: expect.stringMatching(/encoded as br; send it as it is or with Content-Encoding: gzip/) } });
      const nul = gzipSync(JSON.stringify(event).replace('"finance.settlement"', '"finance.\\u0000settlement"'));
      expect(await post(null, { raw: nul, encoding: 'gzip' })).toMatchObject({ status: 400, body: { error: expect.stringMatching(/^job\.name holds the control character U\+0000/) } });
      expect(await written()).toEqual(before);
    });
  });

  describe('what the specification does not require is not required', () => {
    it("accepts run ids the spec's uuid format allows without RFC 4122 version or variant bits, as a URN or in capitals, as one run", async () => {
      const runId = '01234567-89ab-cdef-0123-456789abcdef';
      const event = complete('finance.settlement', { runId, runFacets: nominal('2026-12-03T05:00:00Z') });
      expect(await post(event)).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 1 } });
      const again = complete('finance.settlement', { runId: `urn:uuid:${runId.toUpperCase()}`, runFacets: nominal('2026-12-03T05:00:00Z') });
      expect(await post(again)).toEqual({ status: 200, body: { outcome: 'duplicate', reads: 0 } });
      expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_events WHERE run_id = $1', [runId])).toBe(1);
    });

    it('reads eventTime in each form RFC 3339 allows, and refuses one without a zone, which names no instant', async () => {
      const forms = ['2026-11-20 06:30:00+0000', '2026-11-20t06:30:00.123456z', '2026-11-20T08:30:00+02', '2026-11-20T01:30:00-05:00'];
      for (const [i, eventTime] of forms.entries()) {
        const sent = await post(complete('finance.settlement', { eventTime, runFacets: nominal(`2026-12-04T0${i}:00:00Z`) }));
        expect(sent, eventTime).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 1 } });
      }
      const { rows } = await h.engine.ctx.pool.query<{ readAt: Date }>(`SELECT DISTINCT read_at AS "readAt" FROM backfill.read_log WHERE consumer = 'settlement_report' AND (partition_hour AT TIME ZONE 'UTC')::date = '2026-12-04'`);
      expect(rows.map((row) => row.readAt.toISOString()).sort()).toEqual(['2026-11-20T06:30:00.000Z', '2026-11-20T06:30:00.123Z']);
      const local = await post(complete('finance.settlement', { eventTime: '2026-11-20T06:30:00', runFacets: nominal('2026-12-04T05:00:00Z') }));
      expect(local).toMatchObject({ status: 400, body: { error: expect.stringMatching(/eventTime must be an ISO 8601 time with a zone \(RFC 3339\)/) } });
    });

    it('accepts a DatasetEvent and a JobEvent (spec 2.0) and ignores them, saying why; a JobEvent keeps to its token\'s namespaces', async () => {
      const base = { eventTime: '2026-11-20T06:30:00Z', producer: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/client/python' };
      const dataset = await post({ ...base, schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/DatasetEvent', dataset: { namespace: 'postgres://warehouse:5432', name: ORDERS } });
      expect(dataset).toEqual({ status: 200, body: { outcome: 'ignored', reason: 'a DatasetEvent describes a dataset, not a run: it says nobody read anything' } });
      const jobEvent = { ...base, schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/JobEvent', job: { namespace: 'dbt-prod', name: 'models.revenue' }, inputs: [{ namespace: 'postgres://warehouse:5432', name: ORDERS }] };
      expect(await post(jobEvent)).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/a JobEvent describes a job, not a run of it/) } });
      expect(await post(jobEvent, { token: AIRFLOW_TOKEN })).toMatchObject({ status: 403, body: { error: expect.stringMatching(/may post events of the job namespaces airflow-prod only, and job\.namespace is "dbt-prod"/) } });
    });
  });

  describe('a COMPLETE that does not say which hours it read', () => {
    it('is not refused: a mapped job without a read rule is ignored, naming the table and what would have said the hours', async () => {
      const sent = await post(complete('finance.settlement'));
      expect(sent.status).toBe(200);
      expect(sent.body.outcome).toBe('ignored');
      expect(sent.body.reason).toMatch(/^inputs\[0\] \("harborlight\.warehouse\.orders"\) is a pipeline's table, but nothing says which hours the run read: no backfillPartitions facet, no run\.facets\.nominalTime, no subset facet on its partition column, and the job's mapping to settlement_report declares no read rule/);
      const backwards = await post(complete('finance.settlement', { runFacets: nominal('2026-12-05T08:00:00Z', '2026-12-05T05:00:00Z') }));
      expect(backwards).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/\(run\.facets\.nominalTime has a nominalEndTime not after its nominalStartTime\)/) } });
      // A nominalTime facet that is not the spec's (Marquez sends a null end) counts as its start's hour.
      const nullEnd = await post(complete('finance.settlement', { runFacets: { nominalTime: { ...facetFields, nominalStartTime: '2026-12-05T09:00:00Z', nominalEndTime: null } } }));
      expect(nullEnd).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 1 } });
    });

    it("with the job's read rule, reads the hours up to the watermark at the event's time (not now), marked inferred", async () => {
      // At 06:30 on the 20th the hourly run had processed through 05:00; by now it is through 23:00 on the 30th.
      const sent = await post(complete('exports.payouts', { eventTime: '2026-11-20T06:30:00Z' }));
      expect(sent).toEqual({ status: 200, body: { outcome: 'recorded', consumer: 'payout_export', reads: 3, inferred: 3 } });
      expect(await reads('payout_export', '2026-11-20')).toEqual([{ hour: '03', inferred: true }, { hour: '04', inferred: true }, { hour: '05', inferred: true }]);
      // Hours the event names are not inferred, rule or not.
      expect(await post(complete('exports.payouts', { runFacets: nominal('2026-12-06T05:00:00Z') }))).toMatchObject({ body: { outcome: 'recorded', reads: 1 } });
      expect(await reads('payout_export', '2026-12-06')).toEqual([{ hour: '05', inferred: false }]);
      const early = await post(complete('exports.payouts', { eventTime: '2026-10-15T06:30:00Z' }));
      expect(early).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/its pipeline had no watermark at 2026-10-15T06:30:00\.000Z for the job's read rule/) } });
    });

    it('of an unknown job, is kept pending without hours; a confirmation with a read rule infers it, one without drops it', async () => {
      const first = await post(complete('models.revenue', { eventTime: '2026-11-20T06:30:00Z' }));
      expect(first).toMatchObject({ status: 202, body: { outcome: 'pending', reads: 0, withoutHours: 1, note: expect.stringMatching(/read rule/) } });
      const id = Number(first.body.proposal);
      const posted = h.slack.callsTo('chat.postMessage').find((call) => String(call.params.text).startsWith(`Lineage proposal #${id}`));
      expect(String(posted?.params.text)).toContain('orders: 1 run that named no hours');
      expect(JSON.stringify(posted?.params.blocks)).toContain('reads <N>h-to-watermark');
      expect((await h.command(`lineage confirm ${id} as settlement_report reads 24h`)).reply).toMatch(/`24h` is not a read rule; write it as <N>h-to-watermark/);
      expect((await h.command(`lineage confirm ${id} as settlement_report reads 3h-to-watermark now`)).reply).toMatch(/`now` is one word too many/);
      expect((await h.command(`lineage confirm ${id} ${NEW_OWNER} report revenue_model reads 49h-to-watermark`)).reply).toMatch(/more than one read may name \(MAX_PARTITIONS, 48\)/);
      const { reply } = await h.command(`lineage confirm ${id} ${NEW_OWNER} report revenue_model reads 3h-to-watermark`);
      expect(reply).toMatch(/registered as the new consumer \*revenue_model\*.*3 pending reads moved into the read log \(3 of them inferred by its read rule\).*Read rule: a run that names no hours read the 3 hours up to the watermark at its time/);
      expect(await reads('revenue_model', '2026-11-20')).toEqual([{ hour: '03', inferred: true }, { hour: '04', inferred: true }, { hour: '05', inferred: true }]);
      expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_pending_reads_without_hours')).toBe(0);
      // Its next run that names no hours goes straight in by the rule.
      expect(await post(complete('models.revenue', { eventTime: '2026-11-21T10:10:00Z' }))).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 3, inferred: 3 } });
      expect(await hoursRead('revenue_model', '2026-11-21')).toEqual(['07', '08', '09']);

      const other = await post(complete('models.margin'));
      const { reply: withoutRule } = await h.command(`lineage confirm ${Number(other.body.proposal)} as settlement_report`);
      expect(withoutRule).toMatch(/0 pending reads moved into the read log; its next events go there directly\. 1 pending read that named no hours dropped: it has no read rule\./);
    });
  });

  describe("a run's events are cumulative", () => {
    it('takes the inputs and the nominal time its START named into its COMPLETE, which carries inputs: []', async () => {
      const runId = randomUUID();
      const start = await post(complete('finance.settlement', { eventType: 'START', runId, runFacets: nominal('2026-12-08T05:00:00Z', '2026-12-08T07:00:00Z') }));
      expect(start).toMatchObject({ status: 200, body: { outcome: 'noted', inputs: 1 } });
      expect(await hoursRead('settlement_report', '2026-12-08')).toEqual([]);
      const running = await post(complete('finance.settlement', { eventType: 'RUNNING', runId, facets: { backfillPartitions: { ...facetFields, hours: ['2026-12-08T09:00:00Z'] } } }));
      expect(running).toMatchObject({ status: 200, body: { outcome: 'noted' } });
      const done = await post(complete('finance.settlement', { runId, inputs: [] }));
      // The partitions facet an earlier event gave comes first (09:00); the nominal time is not needed then.
      expect(done).toEqual({ status: 200, body: { outcome: 'recorded', consumer: 'settlement_report', reads: 1 } });
      expect(await hoursRead('settlement_report', '2026-12-08')).toEqual(['09']);
      expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_runs WHERE run_id = $1', [runId])).toBe(0);

      const second = randomUUID();
      await post(complete('finance.settlement', { eventType: 'START', runId: second, runFacets: nominal('2026-12-09T05:00:00Z', '2026-12-09T07:00:00Z') }));
      expect(await post(complete('finance.settlement', { runId: second, inputs: [] }))).toMatchObject({ body: { outcome: 'recorded', reads: 2 } });
      expect(await hoursRead('settlement_report', '2026-12-09')).toEqual(['05', '06']);
    });

    it('drops what was noted for a run that ends in FAIL or ABORT', async () => {
      for (const end of ['FAIL', 'ABORT']) {
        const runId = randomUUID();
        await post(complete('finance.settlement', { eventType: 'START', runId, runFacets: nominal('2026-12-10T05:00:00Z') }));
        expect(await post(complete('finance.settlement', { eventType: end, runId, inputs: [] }))).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: `a ${end} event: the run did not complete, so what it read is not recorded` } });
        expect(await countRows(h.engine.ctx, 'SELECT 1 FROM backfill.lineage_runs WHERE run_id = $1', [runId])).toBe(0);
      }
      expect(await hoursRead('settlement_report', '2026-12-10')).toEqual([]);
    });

    it("adds nothing of another job's events to a run: a run id is one job's", async () => {
      const runId = randomUUID();
      await post(complete('finance.settlement', { eventType: 'START', runId, runFacets: nominal('2026-12-11T05:00:00Z') }));
      const intruder = await post(complete('exports.payouts', { eventType: 'START', runId, runFacets: nominal('2026-12-11T09:00:00Z') }));
      expect(intruder).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/another job's run/) } });
      // The other job's COMPLETE under that id does not get the run's inputs.
      expect(await post(complete('exports.payouts', { runId, inputs: [] }))).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: "none of its inputs is a pipeline's table" } });
      expect(await post(complete('finance.settlement', { runId, inputs: [] }))).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 1 } });
      expect(await hoursRead('settlement_report', '2026-12-11')).toEqual(['05']);
      expect(await hoursRead('payout_export', '2026-12-11')).toEqual([]);
    });
  });

  describe("the specification's subset facet", () => {
    it('reads the hours of a partition condition, and of comparisons on the partition column joined by AND and OR', async () => {
      const partitions = subset({ type: 'partition', partitions: [{ identifier: 'h5', dimensions: { partition_hour: '2026-12-12T05:00:00Z' } }, { dimensions: { partition_hour: '2026-12-12T06:00:00Z', shard: '1' } }] });
      expect(await post(complete('finance.settlement', { inputFacets: partitions }))).toMatchObject({ body: { outcome: 'recorded', reads: 2 } });
      expect(await hoursRead('settlement_report', '2026-12-12')).toEqual(['05', '06']);

      const range = and(and(compare(field('orders.partition_hour'), 'GREATER_EQUAL_THAN', literal('2026-12-13T05:00:00Z')), compare(field('"PARTITION_HOUR"'), 'LESS_THAN', literal('2026-12-13 08:00:00'))),
        compare(field('currency'), 'EQUAL', literal('EUR')));
      expect(await post(complete('finance.settlement', { inputFacets: subset(range) }))).toMatchObject({ body: { outcome: 'recorded', reads: 3 } });
      expect(await hoursRead('settlement_report', '2026-12-13')).toEqual(['05', '06', '07']);

      const flipped = and(compare(literal('2026-12-14T04:30:00Z'), 'LESS_THAN', field('partition_hour')), compare(field('partition_hour'), 'LESS_EQUAL_THAN', literal('2026-12-14T06:00:00Z')));
      const either = or(flipped, compare(field('partition_hour'), 'EQUAL', literal('2026-12-14T09:00:00Z')));
      expect(await post(complete('finance.settlement', { facets: subset(either) }))).toMatchObject({ body: { outcome: 'recorded', reads: 3 } });
      expect(await hoursRead('settlement_report', '2026-12-14')).toEqual(['05', '06', '09']);
    });

    it('comes after the nominal time; gives no hours when open-ended, a location, too deep; and is held to MAX_PARTITIONS', async () => {
      const both = { runFacets: nominal('2026-12-15T05:00:00Z'), inputFacets: subset(compare(field('partition_hour'), 'EQUAL', literal('2026-12-15T09:00:00Z'))) };
      expect(await post(complete('finance.settlement', both))).toMatchObject({ body: { outcome: 'recorded', reads: 1 } });
      expect(await hoursRead('settlement_report', '2026-12-15')).toEqual(['05']);
      const before = await written();
      const noHours = [
        compare(field('partition_hour'), 'GREATER_EQUAL_THAN', literal('2026-12-16T05:00:00Z')),
        { type: 'location', locations: ['s3://warehouse/orders/2026-12-16'] },
        compare(field('partition_hour'), 'LIKE', literal('2026-12-16%')),
      ];
      for (const condition of noHours) {
        const sent = await post(complete('finance.settlement', { inputFacets: subset(condition) }));
        expect(sent, JSON.stringify(condition)).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/nothing says which hours the run read/) } });
      }
      // Nested 40,000 deep (as deep as a megabyte goes), past what the bot reads: no hours, not a stack overflow.
      // Written as text: JSON.stringify itself cannot go that deep.
      const depth = 40_000;
      const deep = `${'{"type":"binary","left":'.repeat(depth)}${JSON.stringify(compare(field('partition_hour'), 'EQUAL', literal('2026-12-16T05:00:00Z')))}${'}'.repeat(depth)}`;
      const raw = JSON.stringify(complete('finance.settlement', { inputFacets: subset('DEEP') })).replace('"DEEP"', deep);
      expect(raw.length).toBeLessThan(MAX_BODY_BYTES);
      expect(await post(null, { raw })).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/nothing says which hours the run read/) } });
      const days = and(compare(field('partition_hour'), 'GREATER_EQUAL_THAN', literal('2026-12-16')), compare(field('partition_hour'), 'LESS_THAN', literal('2026-12-19')));
      expect(await post(complete('finance.settlement', { inputFacets: subset(days) }))).toMatchObject({
        status: 400, body: { error: expect.stringMatching(/^inputs\[0\]\.inputFacets\.subset names 72 hours of inputs\[0\]; at most 48 \(MAX_PARTITIONS\)/) },
      });
      expect(await written()).toEqual(before);
    });

    it('gives no hours for a condition of more ranges than the bot reads (an AND of two ORs of 2,700 days each)', async () => {
      // Written as text, as compact as the spec allows, to fit the most ranges in a megabyte.
      const day = (i: number) => new Date(Date.UTC(2020, 0, 1 + i)).toISOString().slice(0, 10);
      const anyOf = (from: number, to: number): string => (to - from === 1
        ? `{"type":"compare","left":{"type":"field","field":"partition_hour"},"right":{"type":"literal","value":"${day(from)}"},"comparison":"EQUAL"}`
        : `{"type":"binary","operator":"OR","left":${anyOf(from, Math.floor((from + to) / 2))},"right":${anyOf(Math.floor((from + to) / 2), to)}}`);
      const condition = `{"type":"binary","operator":"AND","left":${anyOf(0, 2700)},"right":${anyOf(0, 2700)}}`;
      const raw = JSON.stringify(complete('finance.settlement', { inputFacets: subset('CONDITION') })).replace('"CONDITION"', condition);
      expect(raw.length).toBeLessThan(MAX_BODY_BYTES);
      // How soon is bounded by construction, not timed here: a side of more than MAX_RANGES ranges gives no hours at
      // once, so an AND pairs at most 200 × 200 ranges, and a side of 200 ranges takes 200 comparisons of the body.
      expect(await post(null, { raw })).toMatchObject({ status: 200, body: { outcome: 'ignored', reason: expect.stringMatching(/nothing says which hours the run read/) } });
    });

    it("reads the specification's own examples as the schema defines them: a partition on the pipeline's partition column is its hours", async () => {
      const SCHEMAS = openLineageSchemas();
      const examples = [1, 2, 3, 4].map((n) => JSON.parse(readFileSync(`${FIXTURES}BaseSubsetDatasetFacet-${n}.json`, 'utf8')) as { subset: Body });
      for (const example of examples) expect(SCHEMAS.problems(SUBSET_SCHEMA, example.subset)).toEqual([]);
      // Compare on first_name, first_name AND last_name, locations, business_date partitions: none on partition_hour.
      for (const example of examples) {
        expect(await post(complete('finance.settlement', { inputFacets: example }))).toMatchObject({ status: 200, body: { outcome: 'ignored' } });
      }
      // A pipeline partitioned by business_date: the example's partitions (PL and DE of 2024-10-15) are that day's 24 hours.
      await h.engine.ctx.pool.query(
        `INSERT INTO backfill.pipelines (name, target_table, partition_column, key_columns, measure_column, step_sql, source_shards_sql)
         VALUES ('daily_sales', 'warehouse.daily_sales', 'business_date', '{id}', 'amount', 'SELECT 1', 'SELECT 1')`);
      const daily = { ...complete('finance.settlement'), inputs: [{ namespace: 'postgres://warehouse:5432', name: 'harborlight.warehouse.daily_sales', inputFacets: examples[3] }] };
      expect(await post(daily)).toMatchObject({ status: 200, body: { outcome: 'recorded', reads: 24 } });
      expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.read_log WHERE pipeline = 'daily_sales' AND partition_hour >= '2024-10-15T00:00Z' AND partition_hour < '2024-10-16T00:00Z'`)).toBe(24);
    });
  });
});
