import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDocument, stringify } from 'yaml';
import { startBackfill } from '../../src/core/announce/start.js';
import { applyCatalog, planCatalog } from '../../src/core/catalog/apply.js';
import { parseCatalogText, type Catalog } from '../../src/core/catalog/schema.js';
import { tick } from '../../src/core/recompute/tick.js';
import { identifyTargets } from '../../src/core/identify/identify.js';
import { parseTargetSpec } from '../../src/core/time.js';
import { readCatalogRows } from '../../src/db/catalog.js';
import { requirePipeline } from '../../src/db/pipelines.js';
import { STEP_SQL_V2 } from '../../dev/demo/constants.js';
import { readDemoCatalog } from '../../dev/demo/seed.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { renderCatalogApplied, renderCatalogPlan } from '../../src/views/catalogPlan.js';
import { CLI, runCli } from '../support/cli.js';
import { countRows, createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR = 'U07ONCALL';
const run = promisify(execFile);

/** The demo's catalog file as a plain object, to edit the way a person edits the YAML. */
async function demoDocument(): Promise<Catalog> {
  const { text } = await readDemoCatalog();
  return parseDocument(text).toJS() as Catalog;
}

function consumerOf(document: Catalog, name: string): Catalog['consumers'][number] {
  const consumer = document.consumers.find((candidate) => candidate.name === name);
  if (!consumer) throw new Error(`no consumer ${name} in the document`);
  return consumer;
}

const asInput = (document: unknown, source = 'catalog.yml') => ({ text: stringify(document), source });

const SCRATCH_MODEL = {
  name: 'scratch_model', kind: 'model', owner: 'U07DATASCI', pipeline: 'orders', rule: 'after',
  retrigger: { kind: 'webhook', url: 'https://models.example.com/rebuild' },
};
const FINANCE_EXPORT = {
  name: 'finance_export', kind: 'export', owner: 'U07FINANCE', depends_on: ['settlement_report'], rule: 'before',
  retrigger: { kind: 'bullmq', queue: 'finance-exports', jobName: 'rebuild', wait: true },
};

describe('the catalog as code', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    // The hosts the test catalogs' webhook and REST re-triggers call: none may be stored otherwise.
    engine = await createTestEngine('month-end', { RETRIGGER_ALLOWED_HOSTS: 'models.example.com,orchestrator.example.com' });
  });
  afterAll(async () => engine.close());

  /** Everything the catalog tables hold, and the catalog events: what "nothing changed" is checked against. */
  const snapshot = async () => ({
    rows: await readCatalogRows(engine.ctx.pool),
    ranks: (await engine.ctx.pool.query('SELECT name, dependency_rank FROM backfill.consumers ORDER BY name')).rows,
    events: await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'catalog_applied'`),
  });

  it('the demo catalog file is what the seed made: its plan shows no changes, with the fixed step', async () => {
    const demo = await readDemoCatalog();
    expect(demo.catalog.pipelines[0]?.step_sql).toBe(STEP_SQL_V2);
    const plan = await planCatalog(engine.ctx.pool, demo, OPERATOR);
    expect(plan).toEqual({ source: 'dev/demo/catalog.yml', changes: [], refusals: [] });
    expect(renderCatalogPlan(plan)).toBe('Catalog dev/demo/catalog.yml: no changes; the database holds what the file declares.');
    // The seed applied it through apply, which recorded who did.
    const { rows } = await engine.ctx.pool.query(`SELECT actor, detail->>'source' AS source FROM backfill.events WHERE kind = 'catalog_applied'`);
    expect(rows).toEqual([{ actor: 'seed', source: 'dev/demo/catalog.yml' }]);
  });

  it('plan shows an add, a change (field before → after) and a remove, and changes nothing', async () => {
    const withScratch = await demoDocument();
    withScratch.consumers.push(SCRATCH_MODEL as Catalog['consumers'][number]);
    await applyCatalog(engine.ctx.pool, asInput(withScratch), OPERATOR, engine.ctx.config);

    const next = await demoDocument();
    next.consumers.push(FINANCE_EXPORT as Catalog['consumers'][number]);
    Object.assign(consumerOf(next, 'payout_export'), { owner: 'U07NEWPAY', rule: 'after' });
    const before = await snapshot();
    const plan = await planCatalog(engine.ctx.pool, asInput(next), OPERATOR);
    expect(plan.refusals).toEqual([]);
    expect(plan.changes).toEqual([
      { action: 'add', entity: 'consumer', name: 'finance_export' },
      { action: 'change', entity: 'consumer', name: 'payout_export', fields: [
        { field: 'owner', before: 'U07PAYOUTS', after: 'U07NEWPAY' }, { field: 'rule', before: 'before', after: 'after' }] },
      { action: 'remove', entity: 'consumer', name: 'scratch_model' },
    ]);
    expect(renderCatalogPlan(plan).split('\n')).toEqual([
      'Catalog catalog.yml against the database: 1 to add, 1 to change, 1 to remove.',
      '+ consumer finance_export',
      '~ consumer payout_export',
      '    owner: "U07PAYOUTS" → "U07NEWPAY"',
      '    rule: "before" → "after"',
      '- consumer scratch_model',
      '',
      '`backfill catalog apply catalog.yml` makes these changes in one transaction.',
    ]);
    expect(await snapshot()).toEqual(before);
  });

  it('apply makes the plan so, records who applied it, and a second plan shows no changes', async () => {
    const next = await demoDocument();
    next.consumers.push(FINANCE_EXPORT as Catalog['consumers'][number]);
    Object.assign(consumerOf(next, 'payout_export'), { owner: 'U07NEWPAY', rule: 'after' });
    const applied = await applyCatalog(engine.ctx.pool, asInput(next), OPERATOR);
    expect(renderCatalogApplied(applied).split('\n')[0]).toBe('Applied catalog.yml: 1 added, 1 changed, 1 removed.');

    const { rows } = await engine.ctx.pool.query(
      `SELECT name, owner, notify_rule, dependency_rank, retrigger FROM backfill.consumers WHERE name IN ('finance_export', 'payout_export', 'scratch_model') ORDER BY name`);
    expect(rows).toEqual([
      { name: 'finance_export', owner: 'U07FINANCE', notify_rule: 'before', dependency_rank: 2, retrigger: FINANCE_EXPORT.retrigger },
      { name: 'payout_export', owner: 'U07NEWPAY', notify_rule: 'after', dependency_rank: 2, retrigger: consumerOf(next, 'payout_export').retrigger },
    ]);
    const event = await engine.ctx.pool.query(`SELECT actor, detail FROM backfill.events WHERE kind = 'catalog_applied' ORDER BY id DESC LIMIT 1`);
    expect(event.rows[0]).toEqual({ actor: OPERATOR, detail: { source: 'catalog.yml', changes: ['add consumer finance_export', 'change consumer payout_export', 'remove consumer scratch_model'] } });

    const events = await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'catalog_applied'`);
    expect((await planCatalog(engine.ctx.pool, asInput(next), OPERATOR)).changes).toEqual([]);
    expect((await applyCatalog(engine.ctx.pool, asInput(next), OPERATOR)).changes).toEqual([]);
    // Nothing to apply is not an application.
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'catalog_applied'`)).toBe(events);

    // And back to the demo's own catalog, for the tests after this one.
    const back = await applyCatalog(engine.ctx.pool, await readDemoCatalog(), OPERATOR);
    expect(back.changes.map((change) => `${change.action} ${change.name}`)).toEqual(['remove finance_export', 'change payout_export']);
  });

  it('apply is one transaction: a removal it must refuse leaves every other change of the file unapplied', async () => {
    const next = await demoDocument();
    consumerOf(next, 'payout_export').owner = 'U07NEWPAY';
    next.consumers = next.consumers.filter((consumer) => consumer.name !== 'marketing_weekly');
    const before = await snapshot();
    const plan = await planCatalog(engine.ctx.pool, asInput(next), OPERATOR);
    expect(plan.refusals).toEqual([
      'consumer marketing_weekly cannot be removed: backfill.read_log still refers to it (the record keeps who read, signed and was told); keep it in the file',
    ]);
    expect(renderCatalogPlan(plan)).toContain('Apply would refuse all of it (nothing changes) because:\n  ! consumer marketing_weekly cannot be removed');
    await expect(applyCatalog(engine.ctx.pool, asInput(next), OPERATOR)).rejects.toSatisfy((error: unknown) =>
      isBackfillError(error, ErrorCode.NotAllowed) && error.message.startsWith('The catalog catalog.yml was not applied (nothing changed):\n  - consumer marketing_weekly cannot be removed'));
    // The owner change in the same file was rolled back with the refused removal.
    expect(await snapshot()).toEqual(before);
  });

  it.each([
    ['a cycle', (document: Catalog) => { consumerOf(document, 'settlement_report').depends_on = ['payout_export']; },
      'consumers depend on each other in a cycle: payout_export → settlement_report → payout_export; remove one of these depends_on links so every chain ends'],
    ['an unknown pipeline', (document: Catalog) => { consumerOf(document, 'demand_forecast').pipeline = 'ordrs'; },
      'consumer demand_forecast: pipeline "ordrs" is not declared in the file; declared pipelines: orders'],
    ['a malformed owner', (document: Catalog) => { consumerOf(document, 'payout_export').owner = 'dana'; },
      'consumers[1] (payout_export).owner: "dana" is not a Slack user id: write a Slack member id, U… or W… (e.g. U07SETTLE; in Slack: the profile, ⋯, Copy member ID)'],
  ])('refuses %s with a sentence saying what is wrong and what would be right, and changes nothing', async (_what, edit, problem) => {
    const document = await demoDocument();
    edit(document);
    const before = await snapshot();
    const expected = `The catalog catalog.yml was not applied (nothing changed):\n  - ${problem}`;
    for (const attempt of [planCatalog, applyCatalog]) {
      await expect(attempt(engine.ctx.pool, asInput(document), OPERATOR)).rejects.toSatisfy((error: unknown) =>
        isBackfillError(error, ErrorCode.BadInput) && error.message === expected);
    }
    expect(await snapshot()).toEqual(before);
  });

  it('checks re-triggers with the same schema as a replay, and never stores or echoes a secret', () => {
    const document = {
      pipelines: [], signers: [],
      consumers: [{ name: 'ops_report', kind: 'report', owner: 'U07OPS', rule: 'after',
        retrigger: { kind: 'rest', url: 'https://orchestrator.example.com/api/v1/dags/ops/dagRuns', headers: { Authorization: 'Bearer s3cr3t-token' }, body: { conf: { hours: '{{partiton}}' } } } }],
    };
    let message = '';
    try {
      parseCatalogText(stringify(document), 'ops.yml');
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain('consumers[0] (ops_report).retrigger.headers.Authorization: carries a credential: write it as {env: RETRIGGER_SECRET_…}');
    expect(message).toContain('consumers[0] (ops_report).retrigger.body: uses {{partiton}}; the placeholders are {{partitions}}');
    expect(message).not.toContain('s3cr3t');
    // Written as a reference to the environment, it is a valid catalog.
    document.consumers[0]!.retrigger = { ...document.consumers[0]!.retrigger, headers: { Authorization: { env: 'RETRIGGER_SECRET_ORCH_TOKEN' } } as never, body: { conf: { hours: '{{partitions}}' } } };
    expect(parseCatalogText(stringify(document), 'ops.yml', engine.ctx.config.RETRIGGER_ALLOWED_HOSTS).consumers[0]?.retrigger.kind).toBe('rest');
  });

  it('refuses a re-trigger URL with a password or to a host RETRIGGER_ALLOWED_HOSTS does not allow, without repeating the password, and changes nothing', async () => {
    const password = 'planted-catalog-password-4R7';
    const document = await demoDocument();
    document.consumers.push({ ...SCRATCH_MODEL, retrigger: { kind: 'webhook', url: `https://ops:${password}@models.example.com/rebuild` } } as Catalog['consumers'][number]);
    const before = await snapshot();
    for (const attempt of [planCatalog, applyCatalog]) {
      const error: unknown = await attempt(engine.ctx.pool, asInput(document), OPERATOR, engine.ctx.config).then(() => undefined, (e: unknown) => e);
      expect(isBackfillError(error, ErrorCode.BadInput) && error.message).toBe('The catalog catalog.yml was not applied (nothing changed):\n' +
        '  - consumers[4] (scratch_model).retrigger.url: carries credentials in the URL (user:password@): send it in a header whose value is ' +
        "{env: RETRIGGER_SECRET_…} instead (a rest re-trigger's headers), so that the catalog never holds a secret");
    }
    consumerOf(document, 'scratch_model').retrigger = { kind: 'webhook', url: 'https://models.example.net/rebuild' };
    await expect(applyCatalog(engine.ctx.pool, asInput(document), OPERATOR, engine.ctx.config)).rejects.toThrow(
      'consumers[4] (scratch_model).retrigger.url: reaches models.example.net, which RETRIGGER_ALLOWED_HOSTS does not allow (it allows models.example.com, orchestrator.example.com)');
    expect(await snapshot()).toEqual(before);
    // The CLI checks with its own RETRIGGER_ALLOWED_HOSTS: unset, no remote host; set, the file's.
    consumerOf(document, 'scratch_model').retrigger = SCRATCH_MODEL.retrigger as Catalog['consumers'][number]['retrigger'];
    const file = path.join(await mkdtemp(path.join(tmpdir(), 'catalog-')), 'catalog.yml');
    await writeFile(file, stringify(document));
    const plan = async (allowed: Record<string, string>) => run(process.execPath, ['--import', 'tsx', CLI, 'catalog', 'plan', file], {
      env: { ...process.env, DATABASE_URL: engine.ctx.config.DATABASE_URL, QUEUE_PREFIX: engine.ctx.config.QUEUE_PREFIX, ...allowed },
    }).then(({ stdout }) => ({ code: 0, out: stdout }), (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, out: error.stdout + error.stderr }));
    const unset = await plan({});
    expect(unset.code).toBe(1);
    expect(unset.out).toContain('reaches models.example.com, and RETRIGGER_ALLOWED_HOSTS is not set, so no remote re-trigger host is allowed: set RETRIGGER_ALLOWED_HOSTS=models.example.com');
    const allowed = await plan({ RETRIGGER_ALLOWED_HOSTS: 'models.example.com' });
    expect(allowed.out).toContain('+ consumer scratch_model');
    expect(allowed.code).toBe(0);
  });

  it('refuses to remove a consumer an unfinished backfill reads, naming the backfill', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: OPERATOR });
    const next = await demoDocument();
    next.consumers = next.consumers.filter((consumer) => consumer.name !== 'payout_export');
    const before = await snapshot();
    const plan = await planCatalog(engine.ctx.pool, asInput(next), OPERATOR);
    expect(plan.refusals[0]).toBe(`consumer payout_export cannot be removed: unfinished backfill #${backfill.id} will replay it and may need its owner; ` +
      'keep it in the file until that backfill is done, cancelled or rolled back');
    await expect(applyCatalog(engine.ctx.pool, asInput(next), OPERATOR)).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.NotAllowed));
    expect(await snapshot()).toEqual(before);
  });

  it('is an operator command of the CLI: plan and apply print the plan, a refusal exits 1 and is recorded', async () => {
    const folder = await mkdtemp(path.join(tmpdir(), 'catalog-'));
    const file = path.join(folder, 'catalog.yml');
    const next = await demoDocument();
    consumerOf(next, 'marketing_weekly').owner = 'U07GROWTH';
    await writeFile(file, stringify(next));
    const cli = (env: Record<string, string>, ...args: string[]) => runCli(engine, env, ...args);
    const planned = await cli({}, 'catalog', 'plan', file);
    expect(planned.out).toContain('1 to change');
    expect(planned.code).toBe(0);
    expect(planned.out).toContain('~ consumer marketing_weekly\n    owner: "U07MARKETING" → "U07GROWTH"');
    const refused = await cli({ BACKFILL_CLI_OPERATORS: 'someone_else' }, 'catalog', 'apply', file);
    expect(refused.code).toBe(1);
    expect(refused.out).toContain('is not a backfill operator, so cannot change the catalog');
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.consumers WHERE owner = 'U07GROWTH'`)).toBe(0);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'refused' AND detail->>'action' = 'catalog apply'`)).toBe(1);
    const applied = await cli({}, 'catalog', 'apply', file);
    expect(applied.code).toBe(0);
    expect(applied.out).toContain('Applied ' + file + ': 0 added, 1 changed, 0 removed.');
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.consumers WHERE name = 'marketing_weekly' AND owner = 'U07GROWTH'`)).toBe(1);
  });
});

describe('a pipeline the catalog adds', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
    // A warehouse table of its own, with three whole hours of source landed for 1 December.
    await engine.ctx.pool.query(`
      CREATE TABLE warehouse.refunds_raw (event_hour timestamptz NOT NULL, refund_id int NOT NULL, amount numeric(18,2) NOT NULL);
      CREATE TABLE warehouse.refunds (partition_hour timestamptz NOT NULL, refund_id int NOT NULL, amount numeric(18,2) NOT NULL);
      INSERT INTO warehouse.refunds_raw SELECT '2026-12-01T00:00Z'::timestamptz + h * interval '1 hour', h * 10 + n, n FROM generate_series(0, 2) h, generate_series(1, 4) n;`);
  });
  afterAll(async () => engine.close());

  const refunds = (name: string, watermark?: string) => ({
    name, target_table: 'warehouse.refunds', key_columns: ['refund_id'], measure_column: 'amount',
    step_sql: 'INSERT INTO warehouse.refunds (partition_hour, refund_id, amount) SELECT event_hour, refund_id, amount FROM warehouse.refunds_raw WHERE event_hour = $1::timestamptz',
    source_shards_sql: 'SELECT count(*) > 0 FROM warehouse.refunds_raw WHERE event_hour = $1::timestamptz',
    ...(watermark ? { watermark } : {}),
  }) as Catalog['pipelines'][number];
  const withPipeline = async (...pipelines: Catalog['pipelines']) => {
    const document = await demoDocument();
    document.pipelines.push(...pipelines);
    return asInput(document);
  };
  const watermarkOf = async (pipeline: string) => (await engine.ctx.pool.query(
    'SELECT processed_through, updated_by FROM backfill.watermarks WHERE pipeline = $1', [pipeline])).rows;

  it('starts at the watermark the file declares, in the same apply: the normal run ticks it and a range of its built hours is identified', async () => {
    const applied = await applyCatalog(engine.ctx.pool, await withPipeline(refunds('refunds', '2026-11-30T23:00Z')), OPERATOR);
    expect(applied.changes).toEqual([{ action: 'add', entity: 'pipeline', name: 'refunds' }]);
    expect(await watermarkOf('refunds')).toEqual([{ processed_through: new Date('2026-11-30T23:00Z'), updated_by: `${OPERATOR} (catalog)` }]);

    const ticked = await tick(engine.ctx, { pipeline: 'refunds', actor: 'hourly', until: new Date('2026-12-01T02:00Z') });
    expect(ticked.processed).toEqual(['00', '01', '02'].map((hour) => new Date(`2026-12-01T${hour}:00Z`)));
    expect(ticked.watermark).toEqual(new Date('2026-12-01T02:00Z'));
    expect(await countRows(engine.ctx, 'SELECT 1 FROM warehouse.refunds')).toBe(12);
    const identified = await identifyTargets(engine.ctx.pool, await requirePipeline(engine.ctx.pool, 'refunds'),
      parseTargetSpec('2026-12-01T00:00..2026-12-01T01:00'), { maxPartitions: 24 });
    expect(identified).toMatchObject({ watermarkBefore: new Date('2026-12-01T02:00Z'), watermarkResetTo: new Date('2026-11-30T23:00Z') });
    expect(identified.hours).toHaveLength(2);

    // From here the run owns the watermark: the file's starting hour is no difference and never moves it back.
    const again = await withPipeline(refunds('refunds', '2026-11-01T00:00Z'));
    expect((await applyCatalog(engine.ctx.pool, again, OPERATOR)).changes).toEqual([]);
    expect((await watermarkOf('refunds'))[0]?.processed_through).toEqual(new Date('2026-12-01T02:00Z'));
  });

  it('without one the run says how to start it; declaring it later is a change the plan shows, and an unbuilt pipeline can still be removed', async () => {
    const built = refunds('refunds', '2026-11-30T23:00Z');
    await applyCatalog(engine.ctx.pool, await withPipeline(built, refunds('returns')), OPERATOR);
    const idle = await tick(engine.ctx, { pipeline: 'returns', actor: 'hourly' });
    expect(idle).toMatchObject({ processed: [], watermark: null });
    expect(idle.stoppedBecause).toBe('no watermark for returns yet: give it one in the catalog file (watermark: <the last hour already correct>) and apply it');

    const declared = await withPipeline(built, refunds('returns', '2026-12-01 01:00'));
    const plan = await planCatalog(engine.ctx.pool, declared, OPERATOR);
    expect(plan.changes).toEqual([{ action: 'change', entity: 'pipeline', name: 'returns', fields: [{ field: 'watermark', before: null, after: '2026-12-01T01:00Z' }] }]);
    expect(renderCatalogPlan(plan)).toContain('~ pipeline returns\n    watermark: (none) → "2026-12-01T01:00Z"');
    await applyCatalog(engine.ctx.pool, declared, OPERATOR);
    expect(await watermarkOf('returns')).toEqual([{ processed_through: new Date('2026-12-01T01:00Z'), updated_by: `${OPERATOR} (catalog)` }]);

    // Its watermark is where it would start, not a record: it goes with the pipeline while nothing was built.
    const removed = await applyCatalog(engine.ctx.pool, await withPipeline(built), OPERATOR);
    expect(removed.changes).toEqual([{ action: 'remove', entity: 'pipeline', name: 'returns' }]);
    expect(await watermarkOf('returns')).toEqual([]);
  });

  it('refuses a watermark that is not a whole hour, saying how to write one', async () => {
    const document = await demoDocument();
    document.pipelines.push(refunds('refunds', '2026-11-30T23:30'));
    expect(() => parseCatalogText(stringify(document), 'catalog.yml')).toThrow(
      'pipelines[1] (refunds).watermark: "2026-11-30T23:30" is not a whole UTC hour: write it as 2026-11-14T23:00Z');
  });
});
