import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { tick } from '../../src/core/recompute/tick.js';
import { rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { startApproved } from '../../src/core/lifecycle/dispatch.js';
import { executeStep } from '../../src/core/procedure.js';
import { listSteps } from '../../src/db/steps.js';
import {
  backfillRunId, EMITTED_PARTITIONS_FACET_SCHEMA_FILE, EMITTED_PARTITIONS_FACET_SCHEMA_URL, emitRunEvents, lineageTableNames, REPOSITORY_RAW_URL,
  runDatasets, stepSourceTables,
} from '../../src/core/lineage/emit.js';
import { parseRunEvent } from '../../src/core/lineage/runEvent.js';
import { findBackfillRunFacts } from '../../src/db/lineageEvents.js';
import { createLogger } from '../../src/log.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { eventProblems, openLineageSchemas } from '../support/openLineageSchemas.js';

interface Received {
  authorization: string | undefined;
  event: Record<string, unknown> & { eventType: string; run: { runId: string; facets: Record<string, { message?: string }> }; job: unknown; inputs: unknown[]; outputs: unknown[] };
  /** What the specification's schemas (and the bot's facet's own) find wrong with it: none, or it was answered 400. */
  problems: string[];
}

const SCHEMAS = openLineageSchemas();

/**
 * An OpenLineage endpoint on loopback (what Marquez's /api/v1/lineage would be) that keeps what it is sent and
 * holds it to the specification: an event that is not valid by the vendored OpenLineage.json, or has a facet
 * that is not valid by the schema its _schemaURL names, is answered 400.
 */
async function startReceiver(): Promise<{ server: Server; url: string; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => { body += chunk.toString(); });
    req.on('end', () => {
      const event = JSON.parse(body) as Received['event'];
      const problems = eventProblems(SCHEMAS, event);
      received.push({ authorization: req.headers.authorization, event, problems });
      res.writeHead(problems.length === 0 ? 201 : 400).end(problems.join('\n'));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1/lineage`, received };
}

const OPERATOR = 'U07ONCALL';
const NIGHT_15 = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00:00.000Z`);
/** A UUID of version 7 (RFC 9562): the version nibble 7, the variant bits 10. */
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("the backfill's own runs as OpenLineage events", () => {
  let engine: TestEngine;
  let receiver: Awaited<ReturnType<typeof startReceiver>>;

  beforeAll(async () => {
    receiver = await startReceiver();
    engine = await createTestEngine('month-end', { OPENLINEAGE_URL: receiver.url, OPENLINEAGE_API_KEY: 'marquez-key', JOB_ATTEMPTS: '2', RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
  });
  afterAll(async () => {
    await new Promise((resolve) => receiver.server.close(resolve));
    await engine.close();
  });

  async function night15(): Promise<number> {
    // An earlier backfill in this file moved the watermark back; the normal run re-advances it first.
    await tick(engine.ctx, { pipeline: 'orders', actor: 'scheduler', until: new Date('2026-11-26T00:00:00Z') });
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    await overrideGate(engine.ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'lineage test' });
    return backfill.id;
  }
  const databaseName = async () => (await engine.ctx.pool.query<{ name: string }>('SELECT current_database() AS name')).rows[0]?.name;
  const runIdOf = async (id: number) => {
    const { rows } = await engine.ctx.pool.query<{ announcedAt: Date }>('SELECT announced_at AS "announcedAt" FROM backfill.backfills WHERE id = $1', [id]);
    return backfillRunId({ id, announcedAt: rows[0]?.announcedAt ?? new Date(0) });
  };

  it('POSTs START then COMPLETE for a real run, once each, naming the job, the run, the tables read and the partitions written', async () => {
    const id = await night15();
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    const runId = await runIdOf(id);
    const mine = receiver.received.filter((r) => r.event.run.runId === runId);
    expect(mine.map((r) => r.event.eventType)).toEqual(['START', 'COMPLETE']);
    const database = await databaseName();
    // OpenLineage's PostgreSQL naming (naming.md): postgres://host:port, database.schema.table, as dbt and Airflow name them.
    const dataset = (table: string) => ({ namespace: expect.stringMatching(/^postgres:\/\/127\.0\.0\.1:\d+$/), name: `${database}.${table}` });
    for (const { event, authorization, problems } of mine) {
      expect(authorization).toBe('Bearer marquez-key');
      expect(problems).toEqual([]);
      // Well-formed by the same reading the bot gives to events it receives.
      expect(() => parseRunEvent(event)).not.toThrow();
      expect(event.job).toEqual({ namespace: 'backfill-bot', name: 'backfill.orders' });
      expect(event.run.runId).toMatch(UUID_V7);
      // The step reads the raw orders and joins the day's exchange rates.
      expect(event.inputs).toEqual([dataset('warehouse.fx_rates'), dataset('warehouse.orders_raw')]);
      expect(event.outputs).toEqual([{
        ...dataset('warehouse.orders'),
        facets: { backfillBot_partitions: { _producer: 'urn:backfill-bot', _schemaURL: EMITTED_PARTITIONS_FACET_SCHEMA_URL, hours: NIGHT_15 } },
      }]);
      expect(event.run.facets.nominalTime).toMatchObject({ nominalStartTime: '2026-11-15T05:00:00.000Z', nominalEndTime: '2026-11-15T11:00:00.000Z' });
    }
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.lineage_emissions WHERE backfill_id = $1 AND sent_at IS NOT NULL AND http_status = 201`, [id])).toBe(2);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'lineage_emitted'`, [id])).toBe(2);
    // Asked again (another worker, a retried step): each event was sent once and is not sent again.
    await emitRunEvents(engine.ctx, id);
    expect(receiver.received.filter((r) => r.event.run.runId === runId)).toHaveLength(2);
  });

  it('POSTs START then FAIL, with the failure, when the backfill fails', async () => {
    const { rows: original } = await engine.ctx.pool.query(`SELECT retrigger FROM backfill.consumers WHERE name = 'settlement_report'`);
    // A replay that cannot succeed: a webhook nobody answers.
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [{ kind: 'webhook', url: 'http://127.0.0.1:1/replay' }]);
    try {
      const id = await night15();
      const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
      expect(report.backfill.state).toBe('failed');
      const runId = await runIdOf(id);
      const received = receiver.received.filter((r) => r.event.run.runId === runId);
      expect(received.map((r) => r.problems)).toEqual([[], []]);
      const events = received.map((r) => r.event);
      expect(events.map((e) => e.eventType)).toEqual(['START', 'FAIL']);
      expect(events[1]?.run.facets.errorMessage?.message).toMatch(/^replay settlement_report failed/);
      await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [original[0]?.retrigger]);
      // Its partitions are published: rolled back, they are free for the next test's backfill. Nothing more is emitted.
      await rollbackBackfill(engine.ctx, { backfillId: id, actor: OPERATOR, reason: 'replay endpoint down' });
      expect((await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier)).backfill.state).toBe('rolled_back');
      expect(receiver.received.filter((r) => r.event.run.runId === runId)).toHaveLength(2);
    } finally {
      await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [original[0]?.retrigger]);
    }
  });

  it('POSTs START then ABORT when an operator stops a backfill that has started running, and nothing after', async () => {
    const id = await night15();
    // The announcements go out and the run starts; the operator stops it before any partition is staged.
    for (const step of await listSteps(engine.ctx.pool, id)) {
      if (step.kind === 'announce') await executeStep(engine.ctx, { backfillId: id, kind: step.kind, key: step.key });
    }
    expect(await startApproved(engine.ctx, id)).toEqual([id]);
    await emitRunEvents(engine.ctx, id);
    const stopped = await stopBackfill(engine.ctx, { backfillId: id, actor: OPERATOR, reason: 'wrong step version deployed' });
    expect(stopped.state).toBe('stopped');
    const runId = await runIdOf(id);
    const received = receiver.received.filter((r) => r.event.run.runId === runId);
    expect(received.map((r) => r.problems)).toEqual([[], []]);
    const events = received.map((r) => r.event);
    expect(events.map((e) => e.eventType)).toEqual(['START', 'ABORT']);
    expect(() => parseRunEvent(events[1])).not.toThrow();
    expect(Date.parse(String(events[1]?.eventTime))).toBe(stopped.finishedAt?.getTime());
    await emitRunEvents(engine.ctx, id);
    expect(receiver.received.filter((r) => r.event.run.runId === runId)).toHaveLength(2);
  });

  it('a receiver that is down does not hold up the backfill: the failure is a timeline row, and nothing is retried', async () => {
    // A port that was just listening and is closed now: connections are refused.
    const gone = await startReceiver();
    await new Promise((resolve) => gone.server.close(resolve));
    const ctx = { ...engine.ctx, config: { ...engine.ctx.config, OPENLINEAGE_URL: gone.url } };
    const before = receiver.received.length;
    await tick(ctx, { pipeline: 'orders', actor: 'scheduler', until: new Date('2026-11-26T00:00:00Z') });
    const { backfill } = await startBackfill(ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'again', actor: OPERATOR });
    await overrideGate(ctx, { backfillId: backfill.id, actor: OPERATOR, reason: 'lineage test' });
    const report = await runUntilSettled(ctx, backfill.id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    const { rows } = await engine.ctx.pool.query(`SELECT detail->>'eventType' AS type FROM backfill.events WHERE backfill_id = $1 AND kind = 'lineage_emit_failed' ORDER BY id`, [backfill.id]);
    expect(rows.map((r) => r.type)).toEqual(['START', 'COMPLETE']);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.lineage_emissions WHERE backfill_id = $1 AND sent_at IS NULL AND error IS NOT NULL`, [backfill.id])).toBe(2);
    await emitRunEvents(ctx, backfill.id);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind LIKE 'lineage_emit%'`, [backfill.id])).toBe(2);
    expect(receiver.received.length).toBe(before);
  });

  it('names the tables a step reads as PostgreSQL plans it: a partition by its partitioned table, through CTEs and subqueries, each once', async () => {
    await engine.ctx.pool.query(`
      CREATE TABLE warehouse.lineage_clicks (event_hour timestamptz NOT NULL, click_id bigint NOT NULL) PARTITION BY RANGE (event_hour);
      CREATE TABLE warehouse.lineage_clicks_2026_11 PARTITION OF warehouse.lineage_clicks FOR VALUES FROM ('2026-11-01') TO ('2026-12-01');
      CREATE TABLE warehouse.lineage_bots (click_id bigint PRIMARY KEY)`);
    const step = `INSERT INTO warehouse.orders (partition_hour, order_id)
      WITH hour AS (SELECT * FROM warehouse.lineage_clicks WHERE event_hour = $1::timestamptz)
      SELECT h.event_hour, h.click_id FROM hour h
      WHERE h.click_id NOT IN (SELECT b.click_id FROM warehouse.lineage_bots b) AND h.click_id NOT IN (SELECT click_id FROM warehouse.lineage_bots)`;
    const scanned = await stepSourceTables(engine.ctx.pool, 'clicks', step, new Date('2026-11-15T05:00:00Z'));
    // The plan scans the hour's partition (pruned to it) and the second table twice.
    expect(scanned.map((r) => r.table)).toContain('lineage_clicks_2026_11');
    const names = await lineageTableNames(engine.ctx.pool, scanned);
    expect(names).toEqual({ database: await databaseName(), tables: ['warehouse.lineage_bots', 'warehouse.lineage_clicks'] });
    expect(await lineageTableNames(engine.ctx.pool, [])).toEqual({ database: await databaseName(), tables: [] });
  });

  it('still names what was written when the step cannot be planned (a source dropped since): no inputs, and a warning', async () => {
    const { rows } = await engine.ctx.pool.query<{ id: number; stepSql: string }>(
      `SELECT b.id::int, p.step_sql AS "stepSql" FROM backfill.backfills b JOIN backfill.pipelines p ON p.name = b.pipeline ORDER BY b.id LIMIT 1`);
    const { id, stepSql } = rows[0] ?? { id: 0, stepSql: '' };
    const facts = await findBackfillRunFacts(engine.ctx.pool, id);
    if (!facts) throw new Error(`backfill ${id} has no run facts`);
    const lines: string[] = [];
    const log = createLogger({ level: 'warn', pretty: false, destination: { write: (line: string) => lines.push(line) } });
    await engine.ctx.pool.query(`UPDATE backfill.pipelines SET step_sql = replace(step_sql, 'warehouse.fx_rates', 'warehouse.fx_rates_gone') WHERE name = 'orders'`);
    try {
      const datasets = await runDatasets({ ...engine.ctx, log }, facts);
      expect(datasets).toEqual({ namespace: expect.stringMatching(/^postgres:\/\//), output: `${await databaseName()}.warehouse.orders`, inputs: [] });
      expect(lines.map((line) => (JSON.parse(line) as { msg: string }).msg)).toEqual([expect.stringMatching(/could not be planned/)]);
    } finally {
      await engine.ctx.pool.query(`UPDATE backfill.pipelines SET step_sql = $1 WHERE name = 'orders'`, [stepSql]);
    }
  });

  it('run ids are UUIDs v7 whose time is the announcement, the same for every process and different per backfill', () => {
    const announcedAt = new Date('2026-11-16T08:00:00.123Z');
    const id = backfillRunId({ id: 7, announcedAt });
    expect(id).toMatch(UUID_V7);
    expect(Number.parseInt(id.replaceAll('-', '').slice(0, 12), 16)).toBe(announcedAt.getTime());
    expect(backfillRunId({ id: 7, announcedAt: new Date(announcedAt) })).toBe(id);
    expect(backfillRunId({ id: 8, announcedAt })).not.toBe(id);
    expect(backfillRunId({ id: 7, announcedAt: new Date(announcedAt.getTime() + 1) })).not.toBe(id);
  });

  it("the custom facet's _schemaURL is its schema file in this repository, under the address that file declares", () => {
    const [address, pointer] = EMITTED_PARTITIONS_FACET_SCHEMA_URL.split('#');
    expect(address).toBe(`${REPOSITORY_RAW_URL}/${EMITTED_PARTITIONS_FACET_SCHEMA_FILE}`);
    expect(pointer).toBe('/$defs/BackfillBotPartitionsDatasetFacet');
    expect(SCHEMAS.files.get(address ?? '')).toBe(fileURLToPath(new URL(`../../${EMITTED_PARTITIONS_FACET_SCHEMA_FILE}`, import.meta.url)));
    // Its own schema holds the facet to whole hours and to the fields of every facet.
    const facet = { _producer: 'urn:backfill-bot', _schemaURL: EMITTED_PARTITIONS_FACET_SCHEMA_URL, hours: ['2026-11-15T05:00:00.000Z'] };
    expect(SCHEMAS.problems(EMITTED_PARTITIONS_FACET_SCHEMA_URL, facet)).toEqual([]);
    expect(SCHEMAS.problems(EMITTED_PARTITIONS_FACET_SCHEMA_URL, { ...facet, hours: ['2026-11-15T05:30:00.000Z'] })).toHaveLength(1);
    expect(SCHEMAS.problems(EMITTED_PARTITIONS_FACET_SCHEMA_URL, { hours: facet.hours })).toEqual([expect.stringMatching(/_producer/), expect.stringMatching(/_schemaURL/)]);
  });
});
