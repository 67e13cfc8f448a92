// Seeds the Harborlight demo: the warehouse schema, one month of raw orders, the "orders" pipeline and its
// consumers, and the month's history replayed in time order up to the scenario's "as of" moment: raw rows
// arriving, the hourly run building partitions behind a strict watermark (with replacePartition, the one write
// path), reports built, read and signed. Every figure in the control tables (row counts, report totals,
// signed totals) comes out of that replay; none is written as a literal.

import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import type pg from 'pg';
import { replacePartition } from '../core/recompute/partitionStep.js';
import { storeSchemaName } from '../db/rowStore.js';
import { migrate } from '../db/migrate.js';
import { insertPipeline, type Pipeline } from '../db/pipelines.js';
import { rememberPeople } from '../db/people.js';
import { quoteIdent, withTransaction, type Queryable } from '../db/pool.js';
import { BackfillError, ErrorCode } from '../errors.js';
import {
  CONSUMER_NAMES, DAILY_SCHEDULE_MINUTES, DEMO_MONTH, DEMO_PIPELINE, DEMO_SHARDS, FLAGGED_NIGHTS, flaggedNight, MARKETING_WEEK,
  DEMO_PEOPLE, NIGHT_15, NIGHT_9, OWNERS, SCENARIO_AS_OF, SOURCE_SHARDS_SQL, STEP_SQL_V1, STEP_SQL_V2, type DemoScenario, type FlagReason,
} from './constants.js';
import { centsToDecimal, generateDemoData, microsToDecimal, monthHours, utcDate, type DemoData, type RawOrder, type StepVersion } from './generate.js';

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;
const DAY_MS = 24 * HOUR_MS;
const RAW_BATCH_ROWS = 5_000;
const SEEDED_BY = 'seed';
const RAW_COLUMNS = 'order_id, shard, event_hour, merchant_id, currency_raw, amount_local, landed_at';

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

export function demoPipelineDefinition(version: StepVersion): Pipeline {
  return {
    name: DEMO_PIPELINE,
    targetTable: 'warehouse.orders',
    partitionColumn: 'partition_hour',
    keyColumns: ['order_id'],
    measureColumn: 'amount_base',
    stepSql: version === 'v1' ? STEP_SQL_V1 : STEP_SQL_V2,
    sourceShardsSql: SOURCE_SHARDS_SQL,
    shardsExpected: DEMO_SHARDS,
  };
}

// ---- consumers ------------------------------------------------------------------------------------------

// Each statement takes $1::timestamptz[] (the corrected partitions) and rebuilds whole UTC days (or weeks) that
// contain them, with an upsert: running it twice leaves the same rows.
const DAYS_OF_HOURS = `SELECT DISTINCT (h AT TIME ZONE 'UTC')::date AS day FROM unnest($1::timestamptz[]) AS h`;
const ORDERS_OF_DAY = `warehouse.orders o
  ON o.partition_hour >= d.day::timestamp AT TIME ZONE 'UTC' AND o.partition_hour < (d.day + 1)::timestamp AT TIME ZONE 'UTC'`;

const SETTLEMENT_REPORT_SQL = `INSERT INTO warehouse.settlement_report (report_date, total, order_count)
SELECT d.day, coalesce(sum(o.amount_base), 0), count(o.order_id)
FROM (${DAYS_OF_HOURS}) d
LEFT JOIN ${ORDERS_OF_DAY}
GROUP BY d.day
ON CONFLICT (report_date) DO UPDATE SET total = EXCLUDED.total, order_count = EXCLUDED.order_count`;

const PAYOUT_EXPORT_SQL = `INSERT INTO warehouse.payout_export (report_date, total)
SELECT s.report_date, s.total
FROM warehouse.settlement_report s
WHERE s.report_date IN (${DAYS_OF_HOURS})
ON CONFLICT (report_date) DO UPDATE SET total = EXCLUDED.total`;

const DEMAND_FORECAST_SQL = `INSERT INTO warehouse.demand_forecast_inputs (day, orders, amount_base)
SELECT d.day, count(o.order_id), coalesce(sum(o.amount_base), 0)
FROM (${DAYS_OF_HOURS}) d
LEFT JOIN ${ORDERS_OF_DAY}
GROUP BY d.day
ON CONFLICT (day) DO UPDATE SET orders = EXCLUDED.orders, amount_base = EXCLUDED.amount_base`;

const MARKETING_WEEKLY_SQL = `INSERT INTO warehouse.marketing_weekly (week_start, orders, amount_base)
SELECT w.week_start, count(o.order_id), coalesce(sum(o.amount_base), 0)
FROM (SELECT DISTINCT days.day - extract(dow FROM days.day)::int AS week_start FROM (${DAYS_OF_HOURS}) days) w
LEFT JOIN warehouse.orders o
  ON o.partition_hour >= w.week_start::timestamp AT TIME ZONE 'UTC' AND o.partition_hour < (w.week_start + 7)::timestamp AT TIME ZONE 'UTC'
GROUP BY w.week_start
ON CONFLICT (week_start) DO UPDATE SET orders = EXCLUDED.orders, amount_base = EXCLUDED.amount_base`;

export interface DemoConsumer {
  name: string;
  kind: 'report' | 'export' | 'model';
  owner: string;
  notifyRule: 'before' | 'after';
  explicitRank: number | null;
  dependsOn: string[];
  /** Reads warehouse.orders itself (and so appears in the read log), rather than another consumer's output. */
  readsOrders: boolean;
  statements: string[];
  reportTotalSql: string | null;
}

export const DEMO_CONSUMERS: readonly DemoConsumer[] = [
  {
    name: CONSUMER_NAMES.settlementReport, kind: 'report', owner: OWNERS.settlementLead, notifyRule: 'before',
    explicitRank: null, dependsOn: [], readsOrders: true, statements: [SETTLEMENT_REPORT_SQL],
    reportTotalSql: 'SELECT total FROM warehouse.settlement_report WHERE report_date = $1::date',
  },
  {
    name: CONSUMER_NAMES.payoutExport, kind: 'export', owner: OWNERS.payouts, notifyRule: 'before',
    explicitRank: null, dependsOn: [CONSUMER_NAMES.settlementReport], readsOrders: false, statements: [PAYOUT_EXPORT_SQL],
    reportTotalSql: null,
  },
  {
    name: CONSUMER_NAMES.demandForecast, kind: 'model', owner: OWNERS.forecast, notifyRule: 'after',
    explicitRank: 2, dependsOn: [], readsOrders: true, statements: [DEMAND_FORECAST_SQL], reportTotalSql: null,
  },
  {
    // A weekly total is not a daily figure, so it offers no report_total_sql for the daily compare.
    name: CONSUMER_NAMES.marketingWeekly, kind: 'report', owner: OWNERS.marketing, notifyRule: 'after',
    explicitRank: null, dependsOn: [], readsOrders: true, statements: [MARKETING_WEEKLY_SQL], reportTotalSql: null,
  },
];

function consumerNamed(name: string): DemoConsumer {
  const consumer = DEMO_CONSUMERS.find((candidate) => candidate.name === name);
  if (!consumer) throw new Error(`no demo consumer called ${name}`);
  return consumer;
}

async function registerConsumers(db: Queryable): Promise<void> {
  for (const consumer of DEMO_CONSUMERS) {
    await db.query(
      `INSERT INTO backfill.consumers (name, kind, owner, notify_rule, explicit_rank, retrigger, report_total_sql)
       VALUES ($1::text, $2::text, $3::text, $4::text, $5::int, $6::jsonb, $7::text)`,
      [consumer.name, consumer.kind, consumer.owner, consumer.notifyRule, consumer.explicitRank,
        JSON.stringify({ kind: 'sql', statements: consumer.statements }), consumer.reportTotalSql]);
  }
  const links = DEMO_CONSUMERS.flatMap((consumer) => consumer.dependsOn.map((dependsOn) => [consumer.name, dependsOn] as const));
  await db.query(
    `INSERT INTO backfill.consumer_dependencies (consumer, depends_on) SELECT * FROM unnest($1::text[], $2::text[])`,
    [links.map(([consumer]) => consumer), links.map(([, dependsOn]) => dependsOn)]);
  // The settlement duty lead signs the daily settlement report (and is the only one who may).
  await db.query(`INSERT INTO backfill.signers (report, signer, added_by) VALUES ('settlement_report', $1::text, 'seed')`, [OWNERS.settlementLead]);
  await rememberPeople(db, [...DEMO_PEOPLE]);
}

// ---- reset and static data ------------------------------------------------------------------------------

/**
 * Starts the demo world over. TRUNCATE … CASCADE rather than DELETE in FK order: every backfill.* table hangs
 * off the pipeline, the consumers or the signoffs, so the cascade also clears backfills a previous demo ran,
 * including tables later migrations add, and RESTART IDENTITY makes a re-seed give the same ids.
 */
async function resetDemo(db: Queryable, target: TargetShape, hourlyDays?: readonly string[]): Promise<void> {
  await db.query('TRUNCATE backfill.pipelines, backfill.consumers, backfill.signoffs RESTART IDENTITY CASCADE');
  // The pipeline's row store goes with it: its rows are keyed by backfill ids that RESTART IDENTITY reuses.
  await db.query(`DROP SCHEMA IF EXISTS ${quoteIdent(storeSchemaName(DEMO_PIPELINE))} CASCADE`);
  await db.query(await readFile(new URL('./warehouse.sql', import.meta.url), 'utf8'));
  if (target === 'partitioned') {
    await db.query(await readFile(new URL('./partitioned.sql', import.meta.url), 'utf8'));
    await db.query(partitionStatements(hourlyDays));
  }
}

/**
 * The partitions of the month: one per hour (warehouse.orders_p2026111505), published by swap; a day not in
 * `hourlyDays` (when given) is one partition (warehouse.orders_d20261114), published by rewrite. Fewer
 * partitions make a database cheaper to clone, which the tests do once per run.
 */
function partitionStatements(hourlyDays: readonly string[] | undefined): string {
  const statements: string[] = [];
  const partition = (name: string, from: number, to: number) =>
    `CREATE TABLE warehouse.${name} PARTITION OF warehouse.orders FOR VALUES FROM ('${new Date(from).toISOString()}') TO ('${new Date(to).toISOString()}')`;
  for (let day = Date.parse(DEMO_MONTH.firstHour); day <= Date.parse(DEMO_MONTH.lastHour); day += DAY_MS) {
    const code = utcDate(day).replaceAll('-', '');
    if (hourlyDays && !hourlyDays.includes(utcDate(day))) {
      statements.push(partition(`orders_d${code}`, day, day + DAY_MS));
      continue;
    }
    for (let hour = day; hour < day + DAY_MS; hour += HOUR_MS) {
      statements.push(partition(`orders_p${code}${new Date(hour).toISOString().slice(11, 13)}`, hour, hour + HOUR_MS));
    }
  }
  return statements.join(';\n');
}

async function loadFxRates(db: Queryable, data: DemoData): Promise<void> {
  await db.query(
    `INSERT INTO warehouse.fx_rates (rate_date, currency, rate_to_base)
     SELECT * FROM unnest($1::date[], $2::text[], $3::numeric[])`,
    [data.fxRates.map((rate) => rate.rateDate), data.fxRates.map((rate) => rate.currency),
      data.fxRates.map((rate) => microsToDecimal(rate.rateMicros))]);
}

/** Bulk-inserts raw rows into orders_raw or orders_raw_pending, in batches of RAW_BATCH_ROWS. */
async function insertRawRows(db: Queryable, table: 'warehouse.orders_raw' | 'warehouse.orders_raw_pending', orders: RawOrder[]): Promise<void> {
  for (let start = 0; start < orders.length; start += RAW_BATCH_ROWS) {
    const batch = orders.slice(start, start + RAW_BATCH_ROWS);
    await db.query(
      `INSERT INTO ${table} (${RAW_COLUMNS})
       SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::timestamptz[], $4::int[], $5::text[], $6::numeric[], $7::timestamptz[])`,
      [batch.map((order) => order.orderId), batch.map((order) => order.shard), batch.map((order) => isoOf(order.eventHour)),
        batch.map((order) => order.merchantId), batch.map((order) => order.currencyRaw),
        batch.map((order) => centsToDecimal(order.amountLocalCents)), batch.map((order) => isoOf(order.landedAt))]);
  }
}

async function setWatermark(db: Queryable, processedThrough: number, at: number): Promise<void> {
  await db.query(
    `INSERT INTO backfill.watermarks (pipeline, processed_through, updated_at, updated_by)
     VALUES ($1::text, $2::timestamptz, $3::timestamptz, $4::text)
     ON CONFLICT (pipeline) DO UPDATE
       SET processed_through = EXCLUDED.processed_through, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by`,
    [DEMO_PIPELINE, isoOf(processedThrough), isoOf(at), SEEDED_BY]);
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
  pipeline: Pipeline;
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

async function runConsumer(db: Queryable, consumerName: string, hours: number[], at: number): Promise<void> {
  const consumer = consumerNamed(consumerName);
  const hourValues = hours.map(isoOf);
  for (const statement of consumer.statements) await db.query(statement, [hourValues]);
  if (!consumer.readsOrders) return;
  await db.query(
    `INSERT INTO backfill.read_log (consumer, pipeline, partition_hour, read_at)
     SELECT $1::text, $2::text, h, $4::timestamptz FROM unnest($3::timestamptz[]) AS h`,
    [consumer.name, DEMO_PIPELINE, hourValues, isoOf(at)]);
}

/** The duty lead signs what the report shows at that moment: the total is read from the report, never given. */
async function signSettlementReport(db: Queryable, reportDate: string, at: number): Promise<void> {
  const result = await db.query(
    `INSERT INTO backfill.signoffs (report, period, total, signed_by, signed_at)
     SELECT $1::text, report_date, total, $3::text, $4::timestamptz
     FROM warehouse.settlement_report WHERE report_date = $2::date`,
    [CONSUMER_NAMES.settlementReport, reportDate, OWNERS.settlementLead, isoOf(at)]);
  if (result.rowCount !== 1) throw new Error(`the settlement report of ${reportDate} was not built before its signature`);
}

async function replayTimeline(replay: Replay, asOf: number): Promise<void> {
  for (const event of demoTimeline(asOf)) {
    switch (event.kind) {
      case 'tick':
        await runHourly(replay, event.at);
        break;
      case 'consume':
        await runConsumer(replay.pool, event.consumer, event.hours, event.at);
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
  await db.query(
    `INSERT INTO backfill.partition_log (pipeline, partition_hour, landed_at, on_time, shards_expected, reconciled, flag_reason)
     SELECT $1::text, h.hour, h.landed_at, h.on_time, $2::int, h.flag_reason IS NULL, h.flag_reason
     FROM unnest($3::timestamptz[], $4::timestamptz[], $5::boolean[], $6::text[]) AS h(hour, landed_at, on_time, flag_reason)
     ON CONFLICT (pipeline, partition_hour) DO UPDATE
       SET landed_at = EXCLUDED.landed_at, on_time = EXCLUDED.on_time, reconciled = EXCLUDED.reconciled,
           flag_reason = EXCLUDED.flag_reason`,
    [DEMO_PIPELINE, DEMO_SHARDS, due.map((source) => isoOf(source.hour)),
      due.map((source) => (source.landedAt <= asOf ? isoOf(source.landedAt) : null)),
      due.map((source) => source.landedAt <= source.hour + HOUR_MS), due.map((source) => flagOf(source.hour))]);
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

async function deployFixedStep(db: Queryable): Promise<void> {
  await db.query('UPDATE backfill.pipelines SET step_sql = $2::text WHERE name = $1::text', [DEMO_PIPELINE, STEP_SQL_V2]);
}

// ---- entry points ---------------------------------------------------------------------------------------

/**
 * Seeds (or re-seeds) the demo into a database; migrates it first. The month is built with the step as it ran
 * in November (v1); the fixed step (v2) is deployed at the end, so a backfill recomputes with the fix.
 */
export async function seedDemo(pool: pg.Pool, options: { scenario?: DemoScenario; target?: TargetShape; hourlyDays?: readonly string[] } = {}): Promise<SeedSummary> {
  const scenario = options.scenario ?? 'month-end';
  const asOf = Date.parse(SCENARIO_AS_OF[scenario]);
  const data = generateDemoData();
  await migrate(pool);
  await resetDemo(pool, options.target ?? 'plain', options.hourlyDays);
  await loadFxRates(pool, data);
  const pipeline = demoPipelineDefinition('v1');
  await insertPipeline(pool, pipeline);
  const watermark = Date.parse(DEMO_MONTH.firstHour) - HOUR_MS;
  await setWatermark(pool, watermark, Date.parse(DEMO_MONTH.firstHour));
  await registerConsumers(pool);
  const replay: Replay = {
    pool, pipeline, watermark, landed: 0,
    sourceLandedAt: new Map(data.hourSources.map((source) => [source.hour, source.landedAt])),
    arrivals: [...data.orders].sort((a, b) => a.landedAt - b.landedAt || a.orderId - b.orderId),
  };
  await replayTimeline(replay, asOf);
  await holdNight9Source(replay);
  await recordPartitionLog(pool, data, asOf);
  await deployFixedStep(pool);
  // Whoever queries next (the engine, a test cloning this database) should not plan against empty statistics.
  await pool.query('ANALYZE warehouse.orders, warehouse.orders_raw, warehouse.orders_raw_pending');
  return summarizeSeed(pool, scenario);
}

/**
 * The night-9 source comes back: moves the pending raw rows into orders_raw and records in the partition log
 * when they landed. Idempotent: a second call finds nothing pending. Returns the number of rows delivered.
 */
export async function deliverNight9Source(pool: pg.Pool): Promise<number> {
  return withTransaction(pool, async (tx) => {
    const delivered = await tx.query(
      `WITH arrived AS (DELETE FROM warehouse.orders_raw_pending RETURNING ${RAW_COLUMNS})
       INSERT INTO warehouse.orders_raw (${RAW_COLUMNS}) SELECT ${RAW_COLUMNS} FROM arrived`);
    await tx.query(
      `UPDATE backfill.partition_log l SET landed_at = arrived.landed_at
       FROM (SELECT event_hour, max(landed_at) AS landed_at FROM warehouse.orders_raw GROUP BY event_hour) arrived
       WHERE l.pipeline = $1::text AND l.landed_at IS NULL AND arrived.event_hour = l.partition_hour`,
      [DEMO_PIPELINE]);
    return delivered.rowCount ?? 0;
  });
}

export async function summarizeSeed(db: Queryable, scenario: DemoScenario): Promise<SeedSummary> {
  const { rows } = await db.query<Omit<SeedSummary, 'scenario' | 'asOf' | 'watermark'> & { watermark: Date }>(
    `SELECT (SELECT count(*) FROM warehouse.orders_raw)::bigint AS "rawRows",
            (SELECT count(*) FROM warehouse.orders_raw_pending)::bigint AS "pendingRows",
            (SELECT count(*) FROM warehouse.orders)::bigint AS "orderRows",
            (SELECT count(DISTINCT partition_hour) FROM warehouse.orders)::bigint AS partitions,
            (SELECT count(*) FROM backfill.partition_log WHERE pipeline = $1::text AND NOT reconciled)::bigint AS unreconciled,
            (SELECT processed_through FROM backfill.watermarks WHERE pipeline = $1::text) AS watermark,
            (SELECT total::text FROM backfill.signoffs WHERE report = $2::text AND period = $3::date
             ORDER BY signed_at DESC, id DESC LIMIT 1) AS "signedTotalNight15"`,
    [DEMO_PIPELINE, CONSUMER_NAMES.settlementReport, NIGHT_15.reportDate]);
  const row = rows[0];
  if (!row) throw new Error('the seed summary query returned no row');
  return { ...row, scenario, asOf: SCENARIO_AS_OF[scenario], watermark: row.watermark.toISOString() };
}

function isoOf(epochMs: number): string {
  return new Date(epochMs).toISOString();
}
