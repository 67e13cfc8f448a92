import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseDocument, stringify } from 'yaml';
import { runUntilSettled } from '../../src/cli/runner.js';
import { applyCatalog } from '../../src/core/catalog/apply.js';
import { catalogChangeOf, catalogHashOf } from '../../src/core/catalog/frozen.js';
import type { Catalog } from '../../src/core/catalog/schema.js';
import { findRunnableSteps } from '../../src/core/lifecycle/dispatch.js';
import { executeStep } from '../../src/core/procedure.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../../src/core/recovery/recovery.js';
import { readCatalogRows } from '../../src/db/catalog.js';
import { listEvents } from '../../src/db/events.js';
import { loadReconciliation } from '../../src/db/reconciliations.js';
import { readDemoCatalog } from '../../dev/demo/seed.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { reconciliationMessage } from '../../src/views/blocks.js';
import { continuedLine } from '../../src/views/cliReplies.js';
import { continuedNotice } from '../../src/views/replies.js';
import { renderStatus } from '../../src/views/text.js';
import { runCli } from '../support/cli.js';
import { approvedNight15, countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { NIGHT_15 } from '../../dev/demo/constants.js';

// A backfill runs what was previewed and acknowledged: the step, the shard rule and its readers' re-triggers
// as they were when it was started, whatever the catalog says later (src/core/catalog/frozen.ts).

const OPERATOR = 'U07ONCALL';
const HOURS = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15T${h}:00Z`);
const DAY_TOTAL = `SELECT sum(amount_base)::text AS t FROM warehouse.orders WHERE partition_hour >= '2026-11-15' AND partition_hour < '2026-11-16'`;
// The step's currency as the demo's fixed step writes it, and the edit that lower-cases it.
const UPPER = `r.merchant_id, upper(btrim(r.currency_raw, ' "'))`;
const LOWER = `r.merchant_id, lower(btrim(r.currency_raw, ' "'))`;

let engine: TestEngine | undefined;
afterEach(async () => {
  await engine?.close();
  engine = undefined;
});

async function demoDocument(): Promise<Catalog> {
  const { text } = await readDemoCatalog();
  return parseDocument(text).toJS() as Catalog;
}

function orders(document: Catalog): Catalog['pipelines'][number] {
  const pipeline = document.pipelines.find((candidate) => candidate.name === 'orders');
  if (!pipeline) throw new Error('no pipeline orders in the document');
  return pipeline;
}

function consumerOf(document: Catalog, name: string): Catalog['consumers'][number] {
  const consumer = document.consumers.find((candidate) => candidate.name === name);
  if (!consumer) throw new Error(`no consumer ${name} in the document`);
  return consumer;
}

async function catalogFile(document: Catalog): Promise<string> {
  const file = path.join(await mkdtemp(path.join(tmpdir(), 'frozen-')), 'catalog.yml');
  await writeFile(file, stringify(document));
  return file;
}

/** Everything the catalog tables hold, and the catalog events: what "nothing changed" is checked against. */
async function catalogSnapshot(e: TestEngine) {
  return {
    rows: await readCatalogRows(e.ctx.pool),
    events: await countRows(e.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'catalog_applied'`),
  };
}

/** What the paused reason and the timeline say: what changed, what was held back, and what to do. */
const catalogSentence = (id: number, what: string, halted: string) =>
  `The catalog of orders changed since backfill #${id} was announced (${what}): ${halted}. ` +
  `Put it back as announced (apply the catalog file it was started with), then \`continue ${id} <reason>\`; or stop it, or roll it back, and start a new one.`;
const refusedContinue = (id: number, what: string) => catalogSentence(id, what, `backfill #${id} cannot continue while it differs`);
/** Where the status says it stands: waiting for the catalog to be put back, or for a continue. */
const stillDiffers = (id: number, what: string) =>
  `Waiting on an operator: the catalog still differs from what was announced (${what}): put it back as announced, then continue ${id} <reason>; or stop / rollback.`;
const backAsAnnounced = (id: number) => `Waiting on an operator: the catalog is as announced again, so continue ${id} <reason> runs it on; or stop / rollback.`;

async function publishedHours(e: TestEngine, id: number): Promise<number> {
  return countRows(e.ctx, `SELECT 1 FROM backfill.backfill_targets WHERE backfill_id = $1 AND status = 'published'`, [id]);
}

describe('catalog apply while a backfill is in flight', () => {
  it('refuses a change to its step, shard rule or a reader\'s re-trigger, naming the backfill, and changes nothing', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: HOURS[0] as string })).toBe('done');
    expect((await loadBackfillReport(e.ctx.pool, id)).backfill.state).toBe('running');

    const lowered = await demoDocument();
    expect(orders(lowered).step_sql).toContain(UPPER);
    orders(lowered).step_sql = orders(lowered).step_sql.replace(UPPER, LOWER);
    // Alongside an owner change, which alone would apply: the file is one transaction.
    consumerOf(lowered, 'marketing_weekly').owner = 'U07GROWTH';
    const shards = await demoDocument();
    orders(shards).shards_expected = 4;
    const replay = await demoDocument();
    const payouts = consumerOf(replay, 'payout_export').retrigger;
    if (payouts.kind !== 'sql') throw new Error('the demo re-triggers payout_export by SQL');
    consumerOf(replay, 'payout_export').retrigger = { kind: 'sql', statements: [...payouts.statements, 'SELECT 1'] };

    const before = await catalogSnapshot(e);
    for (const [document, what] of [[lowered, 'step query'], [shards, 'shard rule'], [replay, 're-trigger of payout_export']] as const) {
      const applied = await runCli(e, {}, 'catalog', 'apply', await catalogFile(document));
      expect(applied.code, applied.out).toBe(1);
      expect(applied.out).toContain('was not applied (nothing changed)');
      expect(applied.out).toContain(`backfill #${id} of orders is running and runs what it announced, so its ${what} cannot change now: ` +
        `wait until it is done, or stop it (\`stop ${id} <reason>\`), then apply; a backfill started after that runs the new definition`);
    }
    expect(await catalogSnapshot(e)).toEqual(before);

    // It runs what it announced, to the announced result; once it is done, the same file applies.
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe(NIGHT_15.diff);
    const applied = await applyCatalog(e.ctx.pool, { text: stringify(lowered), source: 'catalog.yml' }, OPERATOR);
    expect(applied.changes.map((change) => `${change.action} ${change.entity} ${change.name}`)).toEqual(['change pipeline orders', 'change consumer marketing_weekly']);
  });

  it('applies other changes meanwhile: a reader\'s owner, the re-trigger of a consumer it does not replay', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: HOURS[0] as string })).toBe('done');
    const readers = (await e.ctx.pool.query('SELECT consumer FROM backfill.backfill_consumers WHERE backfill_id = $1 ORDER BY consumer', [id])).rows;
    expect(readers).toEqual([{ consumer: 'demand_forecast' }, { consumer: 'payout_export' }, { consumer: 'settlement_report' }]);

    const document = await demoDocument();
    consumerOf(document, 'payout_export').owner = 'U07NEWPAY';
    consumerOf(document, 'marketing_weekly').retrigger = { kind: 'sql', statements: ['SELECT 1 FROM warehouse.orders WHERE partition_hour = ANY($1::timestamptz[])'] };
    const applied = await applyCatalog(e.ctx.pool, { text: stringify(document), source: 'catalog.yml' }, OPERATOR);
    expect(applied.changes.map((change) => `${change.action} ${change.entity} ${change.name}`)).toEqual(['change consumer marketing_weekly', 'change consumer payout_export']);
    expect(await countRows(e.ctx, `SELECT 1 FROM backfill.consumers WHERE name = 'payout_export' AND owner = 'U07NEWPAY'`)).toBe(1);

    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe(NIGHT_15.diff);
  });
});

describe('a catalog changed behind the bot\'s back while a backfill runs', () => {
  it('a changed step pauses it before the next publish, with the sentence in the timeline and the status; nothing more is published and continue is refused', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    for (const key of HOURS) expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key })).toBe('done');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'publish', key: HOURS[0] as string })).toBe('done');
    await e.ctx.pool.query('UPDATE backfill.pipelines SET step_sql = replace(step_sql, $1, $2) WHERE name = $3', [UPPER, LOWER, 'orders']);

    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    const sentence = catalogSentence(id, 'step query', 'nothing more is published');
    expect(report.backfill.state).toBe('paused');
    expect(report.backfill.pausedReason).toBe(sentence);
    expect(renderStatus(report)).toContain(sentence);
    const paused = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'paused');
    expect(paused.map((event) => event.detail.reason)).toEqual([sentence]);
    expect(paused[0]?.detail.catalogChanged).toEqual(['step query']);
    // Only the canary, published before the change, is live, as announced: no lower-case code reached it.
    expect(await publishedHours(e, id)).toBe(1);
    expect(await countRows(e.ctx, `SELECT 1 FROM warehouse.orders WHERE partition_hour = $1 AND currency <> upper(currency)`, [HOURS[0]])).toBe(0);
    expect(await countRows(e.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'recomputed'`, [id])).toBe(1);
    expect(e.notifier.reconciliations).toEqual([id]);

    await expect(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'go on' }))
      .rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.WrongState) && error.message === refusedContinue(id, 'step query'));
    const still = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(still.backfill.state).toBe('paused');
    expect(await publishedHours(e, id)).toBe(1);

    // Rolled back, the canary's prior rows are live again.
    await rollbackBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the step was changed mid-run' });
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('rolled_back');
    expect((await e.ctx.pool.query(DAY_TOTAL)).rows[0]?.t).toBe(NIGHT_15.signedTotal);
  });

  it('a changed shards_expected pauses it before the first stage, instead of leaving every hour unavailable and ending done', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET shards_expected = shards_expected + 1 WHERE name = 'orders'`);

    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    const sentence = catalogSentence(id, 'shard rule', 'nothing more is published');
    expect(report.backfill.state).toBe('paused');
    expect(report.backfill.pausedReason).toBe(sentence);
    expect(renderStatus(report)).toContain(sentence);
    const kinds = (await listEvents(e.ctx.pool, id)).map((event) => event.kind);
    expect(kinds).toContain('paused');
    expect(kinds).not.toContain('unavailable');
    expect(kinds).not.toContain('staged');
    expect(report.targets.map((target) => target.status)).toEqual(HOURS.map(() => 'pending'));
    expect((await e.ctx.pool.query(DAY_TOTAL)).rows[0]?.t).toBe(NIGHT_15.signedTotal);

    await expect(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'go on' }))
      .rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.WrongState) && error.message === refusedContinue(id, 'shard rule'));
    expect((await stopBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'catalog changed' })).state).toBe('stopped');
  });

  it('refuses to continue past a difference while the catalog differs, and continues once it is what was announced again', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    // After the announcement, three orders of the canary hour vanish from the source: the canary pauses it.
    await e.ctx.pool.query(`DELETE FROM warehouse.orders_raw WHERE order_id IN (SELECT order_id FROM warehouse.orders_raw WHERE event_hour = '2026-11-15T05:00Z' ORDER BY order_id LIMIT 3)`);
    const paused = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    const breach = '2026-11-15 05:00: 3 key(s) would be lost, which the plan did not predict';
    expect(paused.backfill.pausedReason).toBe(breach);

    await e.ctx.pool.query('UPDATE backfill.pipelines SET step_sql = replace(step_sql, $1, $2) WHERE name = $3', [UPPER, LOWER, 'orders']);
    // A breach's pause too: no continue is offered while the catalog differs.
    expect(renderStatus(await loadBackfillReport(e.ctx.pool, id))).toContain(stillDiffers(id, 'step query'));
    await expect(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the three orders were cancelled upstream' }))
      .rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.WrongState) && error.message === refusedContinue(id, 'step query'));
    const still = await loadBackfillReport(e.ctx.pool, id);
    expect(still.backfill.state).toBe('paused');
    expect(still.backfill.pausedReason).toBe(breach);
    expect(still.targets.filter((target) => target.acceptedBy !== null)).toEqual([]);

    await e.ctx.pool.query('UPDATE backfill.pipelines SET step_sql = replace(step_sql, $1, $2) WHERE name = $3', [LOWER, UPPER, 'orders']);
    await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the three orders were cancelled upstream' });
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('done');
  });
});

/** Runs every stage, publish and the watermark move of the backfill in this process: it is then replaying. */
async function publishAll(e: TestEngine, id: number): Promise<void> {
  for (;;) {
    const runnable = (await findRunnableSteps(e.ctx.pool, id)).filter((step) => ['stage', 'publish', 'watermark'].includes(step.kind));
    if (runnable.length === 0) return;
    for (const step of runnable) await executeStep(e.ctx, step);
  }
}

const replayedConsumers = async (e: TestEngine, id: number) =>
  (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'replayed').map((event) => event.detail.consumer);

describe('a re-trigger changed behind the bot\'s back after the publish', () => {
  it('pauses the backfill before that consumer\'s replay, which never runs the changed definition; put back, continue re-triggers it as announced', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    await publishAll(e, id);
    expect((await loadBackfillReport(e.ctx.pool, id)).backfill.state).toBe('replaying');
    const { rows: [announced] } = await e.ctx.pool.query<{ retrigger: unknown }>(`SELECT retrigger FROM backfill.consumers WHERE name = 'payout_export'`);
    // The changed definition would leave a row no announced re-trigger writes.
    const changed = { kind: 'sql', statements: [`INSERT INTO warehouse.payout_export (report_date, total) SELECT DATE '1999-12-31', cardinality($1::timestamptz[])`] };
    await e.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1::jsonb WHERE name = 'payout_export'`, [JSON.stringify(changed)]);

    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    const sentence = catalogSentence(id, 're-trigger of payout_export', 'payout_export is not re-triggered');
    expect(report.backfill.state).toBe('paused');
    expect(report.backfill.pausedReason).toBe(sentence);
    expect(renderStatus(report)).toContain(sentence);
    expect(renderStatus(report)).toContain(stillDiffers(id, 're-trigger of payout_export'));
    const paused = (await listEvents(e.ctx.pool, id)).filter((event) => event.kind === 'paused');
    expect(paused.map((event) => event.detail.reason)).toEqual([sentence]);
    expect(paused[0]?.detail.catalogChanged).toEqual(['re-trigger of payout_export']);
    expect(paused[0]?.detail.consumer).toBe('payout_export');
    // Its own step waits for the operator; the report it is built from was re-triggered first, as announced.
    expect(report.steps.filter((step) => step.kind === 'replay' && step.key === 'payout_export').map((step) => step.status)).toEqual(['blocked']);
    expect(await replayedConsumers(e, id)).toContain('settlement_report');
    expect(await replayedConsumers(e, id)).not.toContain('payout_export');
    expect(await countRows(e.ctx, `SELECT 1 FROM warehouse.payout_export WHERE report_date = '1999-12-31'`)).toBe(0);
    expect(e.notifier.reconciliations).toEqual([id]);

    await expect(continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'go on' }))
      .rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.WrongState) && error.message === refusedContinue(id, 're-trigger of payout_export'));
    expect((await runUntilSettled(e.ctx, id, () => undefined, e.notifier)).backfill.state).toBe('paused');

    await e.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1::jsonb WHERE name = 'payout_export'`, [JSON.stringify(announced?.retrigger)]);
    expect(renderStatus(await loadBackfillReport(e.ctx.pool, id))).toContain(backAsAnnounced(id));
    const continued = await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the re-trigger is back as announced' });
    expect(continued.accepted).toEqual([]);
    const done = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(done.backfill.state).toBe('done');
    expect(done.backfill.diff).toBe(NIGHT_15.diff);
    expect((await replayedConsumers(e, id)).filter((consumer) => consumer === 'payout_export')).toEqual(['payout_export']);
    expect(await countRows(e.ctx, `SELECT 1 FROM warehouse.payout_export WHERE report_date = '1999-12-31'`)).toBe(0);
  });
});

describe('the target\'s table, partition, key and measure columns', () => {
  it('are frozen: apply refuses to change them while a backfill is in flight, naming each as people call it', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    expect(await executeStep(e.ctx, { backfillId: id, kind: 'stage', key: HOURS[0] as string })).toBe('done');
    const edits: [(pipeline: Catalog['pipelines'][number]) => void, string][] = [
      [(pipeline) => { pipeline.key_columns = ['order_id', 'shard']; }, 'key columns'],
      [(pipeline) => { pipeline.measure_column = 'amount_local'; }, 'measure column'],
      [(pipeline) => { pipeline.partition_column = 'event_hour'; }, 'partition column'],
      [(pipeline) => { pipeline.target_table = 'warehouse.orders_v2'; }, 'target table'],
    ];
    const before = await catalogSnapshot(e);
    for (const [edit, what] of edits) {
      const document = await demoDocument();
      edit(orders(document));
      const applied = await runCli(e, {}, 'catalog', 'apply', await catalogFile(document));
      expect(applied.code, applied.out).toBe(1);
      expect(applied.out).toContain(`backfill #${id} of orders is running and runs what it announced, so its ${what} cannot change now`);
    }
    expect(await catalogSnapshot(e)).toEqual(before);
  });

  it('changed behind the bot\'s back, pause it before the next stage; a backfill that froze none of them is held to what it froze', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET key_columns = ARRAY['order_id', 'shard'], measure_column = 'amount_local' WHERE name = 'orders'`);
    const report = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(report.backfill.state).toBe('paused');
    expect(report.backfill.pausedReason).toBe(catalogSentence(id, 'key columns, measure column', 'nothing more is published'));
    expect(await countRows(e.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND kind = 'staged'`, [id])).toBe(0);

    // As a backfill started before these columns were frozen recorded its fields: without them.
    const { rows: [row] } = await e.ctx.pool.query<{ hashes: Record<string, string> }>('SELECT catalog_field_hashes AS hashes FROM backfill.backfills WHERE id = $1', [id]);
    const older = Object.fromEntries(Object.entries(row?.hashes ?? {}).filter(([field]) => !['targetTable', 'partitionColumn', 'keyColumns', 'measureColumn'].includes(field)));
    expect(Object.keys(older).length).toBe(Object.keys(row?.hashes ?? {}).length - 4);
    await e.ctx.pool.query('UPDATE backfill.backfills SET catalog_field_hashes = $2::jsonb, catalog_hash = $3 WHERE id = $1', [id, JSON.stringify(older), catalogHashOf(older)]);
    expect(await catalogChangeOf(e.ctx.pool, id)).toBeUndefined();
    await e.ctx.pool.query('UPDATE backfill.pipelines SET step_sql = replace(step_sql, $1, $2) WHERE name = $3', [UPPER, LOWER, 'orders']);
    expect((await catalogChangeOf(e.ctx.pool, id))?.changed).toEqual(['step query']);
  });
});

describe('a catalog pause, once the catalog is what was announced again', () => {
  it('says to put the catalog back while it differs, then continues on without accepting anything, and ends done', async () => {
    engine = await createTestEngine();
    const e = engine;
    const id = await approvedNight15(e.ctx, 'frozen catalog test');
    await e.ctx.pool.query(`UPDATE backfill.pipelines SET shards_expected = shards_expected + 1 WHERE name = 'orders'`);
    const paused = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(paused.backfill.state).toBe('paused');
    // While it differs, neither the status nor the reconciliation offers a continue that would be refused.
    const status = renderStatus(paused);
    expect(status).toContain(stillDiffers(id, 'shard rule'));
    expect(status).not.toContain('accepts the partitions outside their envelope');
    const lead = JSON.stringify(reconciliationMessage(paused.backfill, await loadReconciliation(e.ctx.pool, id)).blocks[0]);
    expect(lead).not.toContain('accepts the difference');
    expect(lead).toContain(`Once the catalog is back as announced, \`/backfill continue ${id} &lt;reason&gt;\` runs it on`);

    await e.ctx.pool.query(`UPDATE backfill.pipelines SET shards_expected = shards_expected - 1 WHERE name = 'orders'`);
    expect(renderStatus(await loadBackfillReport(e.ctx.pool, id))).toContain(backAsAnnounced(id));
    const continued = await continueBackfill(e.ctx, { backfillId: id, actor: OPERATOR, reason: 'the shard count is back as announced' });
    expect(continued.accepted).toEqual([]);
    expect(continuedLine(id, continued.accepted)).toBe(`Backfill #${id} continues, its catalog as announced again; nothing was accepted.`);
    expect(continuedNotice(OPERATOR, id, continued.accepted, 'the shard count is back as announced')).toBe(
      `:arrow_forward: <@${OPERATOR}> continued backfill #${id}, its catalog as announced again: the shard count is back as announced. ` +
      'A partition outside its envelope, or another change to what it announced, pauses it again.');
    const done = await runUntilSettled(e.ctx, id, () => undefined, e.notifier);
    expect(done.backfill.state).toBe('done');
    expect(done.backfill.diff).toBe(NIGHT_15.diff);
  });
});
