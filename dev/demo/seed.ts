// Seeds the Harborlight demo: the warehouse schema, one month of raw orders, the "orders" pipeline and its
// consumers, and the month's history replayed in time order up to the scenario's "as of" moment: raw rows
// arriving, the hourly run building partitions behind a strict watermark (with replacePartition, the one write
// path), reports built, read and signed. Every figure in the control tables (row counts, report totals,
// signed totals) comes out of that replay; none is written as a literal.

import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import { applyCatalog } from '../../src/core/catalog/apply.js';
import { parseCatalogText, type Catalog } from '../../src/core/catalog/schema.js';
import { replacePartition } from '../../src/core/recompute/partitionStep.js';
import { migrate } from '../../src/db/migrate.js';
import { requirePipeline, type Pipeline } from '../../src/db/pipelines.js';
import { rememberPeople } from '../../src/db/people.js';
import { runPipelineSql } from '../../src/db/pipelineSql.js';
import { withTransaction, type Queryable } from '../../src/db/pool.js';
import { BackfillError, ErrorCode } from '../../src/errors.js';
import {
  CONSUMER_NAMES, DAILY_SCHEDULE_MINUTES, DEMO_MONTH, DEMO_PIPELINE, DEMO_SHARDS, FLAGGED_NIGHTS, flaggedNight, MARKETING_WEEK, DEMO_PEOPLE,
  NIGHT_15, NIGHT_9, OWNERS, SCENARIO_AS_OF, STEP_SQL_V1, type DemoScenario, type FlagReason,
} from './constants.js';
import { centsToDecimal, generateDemoData, microsToDecimal, monthHours, utcDate, type DemoData, type RawOrder } from './generate.js';
import {
  analyzeDemoWarehouse, createOrdersPartitions, dropPipelineRowStore, insertFxRates, insertRawOrders, insertReads, movePendingRawOrders,
  readSeedCounts, recordSourceLanded, runWarehouseScript, signSettlementReportAsBuilt, truncateDemoCatalog, upsertPartitionRecords,
  upsertWatermarkAt, type OrdersPartition, type RawOrdersTable,
} from './world.js';

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;
const DAY_MS = 24 * HOUR_MS;
const SEEDED_BY = 'seed';

/**
 * warehouse.orders as one plain table (published by rewrite), or partitioned by hour (published by swap):
 * partitioned.sql.
 */
export type TargetShape = 'plain' | 'partitioned';
export const TARGET_SHAPES: readonly TargetShape[] = ['plain', 'partitioned'];

/**
 * The options of the demo's commands, `--name value` or `--name=value`; anything else is refused with `usage`
 * before anything is touched.
 */
export function demoOptions<Name extends string>(argv: string[], names: readonly Name[], usage: string): Partial<Record<Name, string>> {
  try {
    const { values } = parseArgs({ args: argv, options: Object.fromEntries(names.map((name) => [name, { type: 'string' as const }])), strict: true });
    return values as Partial<Record<Name, string>>;
  } catch (error) {
    throw new BackfillError(ErrorCode.BadInput, `${(error as Error).message}. ${usage}`);
  }
}

export function parseTargetShape(text: string): TargetShape {
  const shape = TARGET_SHAPES.find((candidate) => candidate === text);
  if (!shape) throw new BackfillError(ErrorCode.BadInput, `Unknown target shape "${text}". Choose one of: ${TARGET_SHAPES.join(', ')} (partitioned: one partition per hour, published by swap).`);
  return shape;
}

export interface SeedSummary {
  scenario: DemoScenario;
  asOf: string;
  /** rows in warehouse.orders_raw */
  rawRows: number;
  /** source rows that have not reached orders_raw yet (night 9, in the night-9-outage scenario) */
  pendingRows: number;
  /** rows in warehouse.orders */
  orderRows: number;
  /** distinct partition hours in warehouse.orders */
  partitions: number;
  unreconciled: number;
  watermark: string;
  /** the signed total of settlement_report for 2026-11-15, when it has been signed by the "as of" time */
  signedTotalNight15: string | null;
}

// ---- the catalog ----------------------------------------------------------------------------------------

/**
 * The demo's own files (its catalog, its warehouse scripts), beside this module in dev/demo/. The demo runs from
 * source only (tsx; the build leaves dev/ out), so they are always here.
 */
const DEMO_FILES = new URL('./', import.meta.url);

/** The demo's catalog file: its pipeline, consumers and signers, applied as `backfill catalog apply` applies one. */
export const DEMO_CATALOG_FILE = new URL('catalog.yml', DEMO_FILES);
const DEMO_CATALOG_SOURCE = 'dev/demo/catalog.yml';

export async function readDemoCatalog(): Promise<{ text: string; source: string; catalog: Catalog }> {
  const text = await readFile(DEMO_CATALOG_FILE, 'utf8');
  return { text, source: DEMO_CATALOG_SOURCE, catalog: parseCatalogText(text, DEMO_CATALOG_SOURCE) };
}

/** A consumer's part in the month: the statements that rebuild it, and whether it reads warehouse.orders itself. */
interface DemoConsumer {
  name: string;
  statements: string[];
  /** Reads the pipeline's table (and so appears in the read log), rather than another consumer's output. */
  readsOrders: boolean;
}

function demoConsumers(catalog: Catalog): Map<string, DemoConsumer> {
  return new Map(catalog.consumers.map((consumer) => {
    if (consumer.retrigger.kind !== 'sql') throw new Error(`the demo replays its consumers by SQL; ${consumer.name} is re-triggered by ${consumer.retrigger.kind}`);
    return [consumer.name, { name: consumer.name, statements: consumer.retrigger.statements, readsOrders: consumer.pipeline === DEMO_PIPELINE }];
  }));
}

// ---- reset and static data ------------------------------------------------------------------------------

/** Starts the demo world over: an empty catalog (truncateDemoCatalog says why TRUNCATE), a new warehouse. */
async function resetDemo(db: Queryable, target: TargetShape, hourlyDays?: readonly string[]): Promise<void> {
  await truncateDemoCatalog(db);
  // The pipeline's row store goes with it: its rows are keyed by backfill ids that RESTART IDENTITY reuses.
  await dropPipelineRowStore(db, DEMO_PIPELINE);
  await runWarehouseScript(db, await readFile(new URL('warehouse.sql', DEMO_FILES), 'utf8'));
  if (target === 'partitioned') {
    await runWarehouseScript(db, await readFile(new URL('partitioned.sql', DEMO_FILES), 'utf8'));
    await createOrdersPartitions(db, monthPartitions(hourlyDays));
  }
}

/**
 * The partitions of the month: one per hour (warehouse.orders_p2026111505), published by swap; a day not in
 * `hourlyDays` (when given) is one partition (warehouse.orders_d20261114), published by rewrite. Fewer
 * partitions make a database cheaper to clone, which the tests do once per run.
 */
function monthPartitions(hourlyDays: readonly string[] | undefined): OrdersPartition[] {
  const partitions: OrdersPartition[] = [];
  const partition = (name: string, from: number, to: number): OrdersPartition => ({ name, from: new Date(from), to: new Date(to) });
  for (let day = Date.parse(DEMO_MONTH.firstHour); day <= Date.parse(DEMO_MONTH.lastHour); day += DAY_MS) {
    const code = utcDate(day).replaceAll('-', '');
    if (hourlyDays && !hourlyDays.includes(utcDate(day))) {
      partitions.push(partition(`orders_d${code}`, day, day + DAY_MS));
      continue;
    }
    for (let hour = day; hour < day + DAY_MS; hour += HOUR_MS) {
      partitions.push(partition(`orders_p${code}${new Date(hour).toISOString().slice(11, 13)}`, hour, hour + HOUR_MS));
    }
  }
  return partitions;
}

async function loadFxRates(db: Queryable, data: DemoData): Promise<void> {
  await insertFxRates(db, data.fxRates.map((rate) => ({ rateDate: rate.rateDate, currency: rate.currency, rateToBase: microsToDecimal(rate.rateMicros) })));
}

/** Inserts raw rows into orders_raw or orders_raw_pending. */
async function insertRawRows(db: Queryable, table: RawOrdersTable, orders: RawOrder[]): Promise<void> {
  await insertRawOrders(db, table, orders.map((order) => ({
    orderId: order.orderId, shard: order.shard, eventHour: isoOf(order.eventHour), merchantId: order.merchantId,
    currencyRaw: order.currencyRaw, amountLocal: centsToDecimal(order.amountLocalCents), landedAt: isoOf(order.landedAt),
  })));
}

async function setWatermark(db: Queryable, processedThrough: number, at: number): Promise<void> {
  await upsertWatermarkAt(db, { pipeline: DEMO_PIPELINE, processedThrough: isoOf(processedThrough), at: isoOf(at), updatedBy: SEEDED_BY });
}

// ---- the timeline ---------------------------------------------------------------------------------------

type TimelineEvent =
  | { at: number; kind: 'tick' }
  | { at: number; kind: 'consume'; consumer: string; hours: number[] }
  | { at: number; kind: 'sign'; reportDate: string };

// At one instant the hourly run goes first, then consumers, then signatures: a report built at 11:00 sees what
// the 11:00 run built, and a signature reads the report as built.
const EVENT_ORDER: Record<TimelineEvent['kind'], number> = { tick: 0, consume: 1, sign: 2 };

function hoursOfDay(dayStart: number): number[] {
  return Array.from({ length: 24 }, (_, index) => dayStart + index * HOUR_MS);
}

function dailyConsumerEvents(dayStart: number): TimelineEvent[] {
  const hours = hoursOfDay(dayStart);
  const nextDay = dayStart + DAY_MS;
  const at = (minutes: number) => nextDay + minutes * MINUTE_MS;
  const events: TimelineEvent[] = [
    { at: at(DAILY_SCHEDULE_MINUTES.settlementBuild), kind: 'consume', consumer: CONSUMER_NAMES.settlementReport, hours },
    { at: at(DAILY_SCHEDULE_MINUTES.forecastRead), kind: 'consume', consumer: CONSUMER_NAMES.demandForecast, hours },
  ];
  const reportDate = utcDate(dayStart);
  // Night 9: the 05:30 report saw nothing of 11-09 (the watermark was stuck), so nobody signed it until it was
  // rebuilt after the catch-up; payouts go out against the signed report.
  const signedAt = reportDate === NIGHT_9.reportDate ? Date.parse(NIGHT_9.signedAt) : at(DAILY_SCHEDULE_MINUTES.settlementSign);
  if (reportDate === NIGHT_9.reportDate) {
    events.push({ at: Date.parse(NIGHT_9.rebuiltAt), kind: 'consume', consumer: CONSUMER_NAMES.settlementReport, hours });
  }
  events.push({ at: signedAt, kind: 'sign', reportDate });
  const payoutDelay = (DAILY_SCHEDULE_MINUTES.payoutExport - DAILY_SCHEDULE_MINUTES.settlementSign) * MINUTE_MS;
  events.push({ at: signedAt + payoutDelay, kind: 'consume', consumer: CONSUMER_NAMES.payoutExport, hours });
  return events;
}

function marketingEvent(): TimelineEvent {
  const first = Date.parse(`${MARKETING_WEEK.firstDay}T00:00:00.000Z`);
  const last = Date.parse(`${MARKETING_WEEK.lastDay}T23:00:00.000Z`);
  const hours = monthHours().filter((hour) => hour >= first && hour <= last);
  return { at: Date.parse(MARKETING_WEEK.readAt), kind: 'consume', consumer: CONSUMER_NAMES.marketingWeekly, hours };
}

/** Everything that happens in the month, in order, up to and including `asOf`. */
function demoTimeline(asOf: number): TimelineEvent[] {
  const firstHour = Date.parse(DEMO_MONTH.firstHour);
  const events: TimelineEvent[] = [marketingEvent()];
  for (let at = firstHour + HOUR_MS; at <= asOf; at += HOUR_MS) events.push({ at, kind: 'tick' });
  for (let day = firstHour; day < firstHour + DEMO_MONTH.partitions * HOUR_MS; day += DAY_MS) events.push(...dailyConsumerEvents(day));
  return events
    .filter((event) => event.at <= asOf)
    .sort((a, b) => a.at - b.at || EVENT_ORDER[a.kind] - EVENT_ORDER[b.kind]);
}

// ---- replaying the timeline -----------------------------------------------------------------------------

interface Replay {
  pool: pg.Pool;
  /** The pipeline with the step as it ran in November (v1). */
  pipeline: Pipeline;
  consumers: Map<string, DemoConsumer>;
  /** when the connector called each hour complete */
  sourceLandedAt: Map<number, number>;
  /** every source row in landing order, and how many of them have reached orders_raw */
  arrivals: RawOrder[];
  landed: number;
  watermark: number;
}

/** Inserts into orders_raw the source rows that land by `at`, as they would have arrived. */
async function landSourceRows(replay: Replay, at: number): Promise<void> {
  let end = replay.landed;
  while (end < replay.arrivals.length && (replay.arrivals[end]?.landedAt ?? Infinity) <= at) end += 1;
  await insertRawRows(replay.pool, 'warehouse.orders_raw', replay.arrivals.slice(replay.landed, end));
  replay.landed = end;
}

/**
 * The hourly run at `at`: lands what has arrived, then builds the hours after the watermark in order, each in
 * its own transaction with its watermark move, and stops at the first hour that is not due or whose source has
 * not landed. That stop is what kept night 9 (and everything after it) unbuilt until the source came back.
 */
async function runHourly(replay: Replay, at: number): Promise<void> {
  await landSourceRows(replay, at);
  for (;;) {
    const next = replay.watermark + HOUR_MS;
    const landedAt = replay.sourceLandedAt.get(next);
    if (landedAt === undefined || landedAt > at || next + HOUR_MS > at) return;
    await withTransaction(replay.pool, async (tx) => {
      await replacePartition(tx, replay.pipeline, new Date(next));
      await setWatermark(tx, next, at);
    });
    replay.watermark = next;
  }
}

function consumerNamed(replay: Replay, name: string): DemoConsumer {
  const consumer = replay.consumers.get(name);
  if (!consumer) throw new Error(`the demo's timeline names ${name}, which dev/demo/catalog.yml does not declare`);
  return consumer;
}

async function runConsumer(db: Queryable, consumer: DemoConsumer, hours: number[], at: number): Promise<void> {
  const hourValues = hours.map(isoOf);
  for (const statement of consumer.statements) await runPipelineSql(db, statement, [hourValues]);
  if (!consumer.readsOrders) return;
  await insertReads(db, { consumer: consumer.name, pipeline: DEMO_PIPELINE, hours: hourValues, readAt: isoOf(at) });
}

/** The duty lead signs what the report shows at that moment: the total is read from the report, never given. */
async function signSettlementReport(db: Queryable, reportDate: string, at: number): Promise<void> {
  const signed = await signSettlementReportAsBuilt(db, {
    report: CONSUMER_NAMES.settlementReport, reportDate, signedBy: OWNERS.settlementLead, signedAt: isoOf(at),
  });
  if (!signed) throw new Error(`the settlement report of ${reportDate} was not built before its signature`);
}

async function replayTimeline(replay: Replay, asOf: number): Promise<void> {
  for (const event of demoTimeline(asOf)) {
    switch (event.kind) {
      case 'tick':
        await runHourly(replay, event.at);
        break;
      case 'consume':
        await runConsumer(replay.pool, consumerNamed(replay, event.consumer), event.hours, event.at);
        break;
      case 'sign':
        await signSettlementReport(replay.pool, event.reportDate, event.at);
        break;
      default: {
        const unknown: never = event;
        throw new Error(`unknown timeline event ${JSON.stringify(unknown)}`);
      }
    }
  }
  await landSourceRows(replay, asOf);
}

// ---- the month's record ---------------------------------------------------------------------------------

function flagOf(hour: number): FlagReason | null {
  const night = FLAGGED_NIGHTS.find((entry) => hour >= Date.parse(entry.firstHour) && hour <= Date.parse(entry.lastHour));
  return night?.reason ?? null;
}

/**
 * One partition_log row per hour that is due by `asOf`. replacePartition wrote shards_landed and row_count for
 * the hours built; this sets what the month's record says: when the source landed (null: not yet), whether that
 * was by the hour's deadline (the end of the next hour), and the flags. Hours due but not built get a row too.
 */
async function recordPartitionLog(db: Queryable, data: DemoData, asOf: number): Promise<void> {
  const due = data.hourSources.filter((source) => source.hour + HOUR_MS <= asOf);
  await upsertPartitionRecords(db, DEMO_PIPELINE, DEMO_SHARDS, due.map((source) => ({
    hour: isoOf(source.hour),
    landedAt: source.landedAt <= asOf ? isoOf(source.landedAt) : null,
    onTime: source.landedAt <= source.hour + HOUR_MS,
    flagReason: flagOf(source.hour),
  })));
}

/**
 * Source rows that have not landed by `asOf` have not happened yet, except night 9's: those exist upstream
 * and wait in orders_raw_pending for a test (or the demo) to deliver them.
 */
async function holdNight9Source(replay: Replay): Promise<void> {
  const night9 = flaggedNight(9);
  const [first, last] = [Date.parse(night9.firstHour), Date.parse(night9.lastHour)];
  const waiting = replay.arrivals.slice(replay.landed).filter((order) => order.eventHour >= first && order.eventHour <= last);
  await insertRawRows(replay.pool, 'warehouse.orders_raw_pending', waiting);
}

// ---- entry points ---------------------------------------------------------------------------------------

/**
 * Seeds (or re-seeds) the demo into a database; migrates it first. The catalog (dev/demo/catalog.yml) is
 * applied as `backfill catalog apply` applies it, with the fixed step (v2) a backfill recomputes with; the
 * month itself is replayed with the step as it ran in November (v1), which is history, not catalog.
 */
export async function seedDemo(pool: pg.Pool, options: { scenario?: DemoScenario; target?: TargetShape; hourlyDays?: readonly string[] } = {}): Promise<SeedSummary> {
  const scenario = options.scenario ?? 'month-end';
  const asOf = Date.parse(SCENARIO_AS_OF[scenario]);
  const data = generateDemoData();
  await migrate(pool);
  await resetDemo(pool, options.target ?? 'plain', options.hourlyDays);
  await loadFxRates(pool, data);
  const { text, source, catalog } = await readDemoCatalog();
  await applyCatalog(pool, { text, source }, SEEDED_BY);
  await rememberPeople(pool, [...DEMO_PEOPLE]);
  const pipeline: Pipeline = { ...(await requirePipeline(pool, DEMO_PIPELINE)), stepSql: STEP_SQL_V1 };
  const watermark = Date.parse(DEMO_MONTH.firstHour) - HOUR_MS;
  await setWatermark(pool, watermark, Date.parse(DEMO_MONTH.firstHour));
  const replay: Replay = {
    pool, pipeline, consumers: demoConsumers(catalog), watermark, landed: 0,
    sourceLandedAt: new Map(data.hourSources.map((source) => [source.hour, source.landedAt])),
    arrivals: [...data.orders].sort((a, b) => a.landedAt - b.landedAt || a.orderId - b.orderId),
  };
  await replayTimeline(replay, asOf);
  await holdNight9Source(replay);
  await recordPartitionLog(pool, data, asOf);
  // Whoever queries next (the engine, a test cloning this database) should not plan against empty statistics.
  await analyzeDemoWarehouse(pool);
  return summarizeSeed(pool, scenario);
}

/**
 * The night-9 source comes back: moves the pending raw rows into orders_raw and records in the partition log
 * when they landed. Idempotent: a second call finds nothing pending. Returns the number of rows delivered.
 */
export async function deliverNight9Source(pool: pg.Pool): Promise<number> {
  return withTransaction(pool, async (tx) => {
    const delivered = await movePendingRawOrders(tx);
    await recordSourceLanded(tx, DEMO_PIPELINE);
    return delivered;
  });
}

export async function summarizeSeed(db: Queryable, scenario: DemoScenario): Promise<SeedSummary> {
  const row = await readSeedCounts(db, DEMO_PIPELINE, { report: CONSUMER_NAMES.settlementReport, period: NIGHT_15.reportDate });
  if (!row) throw new Error('the seed summary query returned no row');
  return { ...row, scenario, asOf: SCENARIO_AS_OF[scenario], watermark: row.watermark.toISOString() };
}

function isoOf(epochMs: number): string {
  return new Date(epochMs).toISOString();
}
