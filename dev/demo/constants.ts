// The Harborlight demo world (November 2026, UTC), shared by the seed, the engine's tests and the demo script.
// Times are ISO strings, not Date objects: a Date is mutable and a shared constant must not be.

export const DEMO_PIPELINE = 'orders';
export const DEMO_SHARDS = 3;

export const DEMO_MONTH = {
  firstHour: '2026-11-01T00:00:00.000Z',
  lastHour: '2026-11-30T23:00:00.000Z',
  partitions: 720,
} as const;

export const DemoScenario = {
  MonthEnd: 'month-end',
  Night9Outage: 'night-9-outage',
} as const;
export type DemoScenario = (typeof DemoScenario)[keyof typeof DemoScenario];

/** The moment each scenario's history stops: nothing later has happened in the seeded database. */
export const SCENARIO_AS_OF: Record<DemoScenario, string> = {
  'month-end': '2026-12-01T08:00:00.000Z',
  'night-9-outage': '2026-11-10T09:00:00.000Z',
};

/** backfill.watermarks.processed_through as each scenario leaves it. */
export const SCENARIO_WATERMARK: Record<DemoScenario, string> = {
  'month-end': '2026-11-30T23:00:00.000Z',
  'night-9-outage': '2026-11-08T23:00:00.000Z',
};

export const OWNERS = {
  settlementLead: 'U07SETTLE',
  payouts: 'U07PAYOUTS',
  forecast: 'U07FORECAST',
  marketing: 'U07MARKETING',
} as const;

/** The demo's people by the names they go by (backfill.people): the owners and the on-call operator. */
export const DEMO_PEOPLE = [
  { slackId: OWNERS.settlementLead, name: 'Settlement lead' },
  { slackId: OWNERS.payouts, name: 'Payouts owner' },
  { slackId: OWNERS.forecast, name: 'Forecast owner' },
  { slackId: OWNERS.marketing, name: 'Marketing analyst' },
  { slackId: 'U07ONCALL', name: 'On-call operator' },
] as const;

export const CONSUMER_NAMES = {
  settlementReport: 'settlement_report',
  payoutExport: 'payout_export',
  demandForecast: 'demand_forecast',
  marketingWeekly: 'marketing_weekly',
} as const;

export type FlagReason = 'late_load' | 'upstream_outage' | 'corrupt_batch' | 'flapping_connector' | 'partial_load';

export interface FlaggedNight {
  night: number;
  reason: FlagReason;
  firstHour: string;
  lastHour: string;
  partitions: number;
  /** Whether the table was left wrong or missing data (a backfill's job) or only late (nothing to repair). */
  needsBackfill: boolean;
}

/** The month's record: 35 partitions with reconciled = false. */
export const FLAGGED_NIGHTS: readonly FlaggedNight[] = [
  { night: 4, reason: 'late_load', firstHour: '2026-11-04T01:00:00.000Z', lastHour: '2026-11-04T05:00:00.000Z', partitions: 5, needsBackfill: false },
  { night: 9, reason: 'upstream_outage', firstHour: '2026-11-09T00:00:00.000Z', lastHour: '2026-11-09T13:00:00.000Z', partitions: 14, needsBackfill: true },
  { night: 15, reason: 'corrupt_batch', firstHour: '2026-11-15T05:00:00.000Z', lastHour: '2026-11-15T10:00:00.000Z', partitions: 6, needsBackfill: true },
  { night: 21, reason: 'flapping_connector', firstHour: '2026-11-21T00:00:00.000Z', lastHour: '2026-11-21T05:00:00.000Z', partitions: 6, needsBackfill: false },
  { night: 27, reason: 'partial_load', firstHour: '2026-11-27T02:00:00.000Z', lastHour: '2026-11-27T05:00:00.000Z', partitions: 4, needsBackfill: true },
];

export function flaggedNight(night: number): FlaggedNight {
  const found = FLAGGED_NIGHTS.find((entry) => entry.night === night);
  if (!found) throw new Error(`night ${night} is not one of the flagged nights (${FLAGGED_NIGHTS.map((entry) => entry.night).join(', ')})`);
  return found;
}

/** The partition hours of a flagged night, first to last. */
export function flaggedNightHours(night: number): Date[] {
  const { firstHour, lastHour } = flaggedNight(night);
  const hours: Date[] = [];
  for (let at = Date.parse(firstHour); at <= Date.parse(lastHour); at += 3_600_000) hours.push(new Date(at));
  return hours;
}

/** When the late or missing source rows of a flagged night reached warehouse.orders_raw. */
export const SOURCE_ARRIVALS = {
  /** Night 4: every shard of 01:00..05:00 arrived together, late. */
  night4LateLoad: '2026-11-04T06:40:00.000Z',
  /** Night 9: the upstream came back; until then nothing of 00:00..13:00 had landed. */
  night9SourceBack: '2026-11-10T10:00:00.000Z',
  /** Night 21: the connector's retries delivered shard 3 of 00:00..05:00 before the build. */
  night21Retries: '2026-11-21T06:20:00.000Z',
  /** Night 27: shard 3 of 02:00..05:00, a day after the hours were built without it. */
  night27Shard3: '2026-11-28T14:00:00.000Z',
} as const;

/** Settlement report of 2026-11-15: signed at 07:00 on 11-16 (built with v1), and what v2 recomputes it to. */
export const NIGHT_15 = {
  reportDate: '2026-11-15',
  signedAt: '2026-11-16T07:00:00.000Z',
  signedTotal: '1284310.55',
  correctedTotal: '1271902.10',
  diff: '-12408.45',
} as const;

export const NIGHT_9 = {
  reportDate: '2026-11-09',
  /** The 05:30 build saw none of 11-09 (watermark stuck): not signed then. */
  staleBuildAt: '2026-11-10T05:30:00.000Z',
  rebuiltAt: '2026-11-10T11:00:00.000Z',
  signedAt: '2026-11-10T12:00:00.000Z',
} as const;

/** marketing_weekly read the first week once, and nothing else. */
export const MARKETING_WEEK = {
  firstDay: '2026-11-01',
  lastDay: '2026-11-07',
  readAt: '2026-11-08T09:00:00.000Z',
} as const;

/** Consumers' daily schedule, as offsets from midnight of the day after the report date. */
export const DAILY_SCHEDULE_MINUTES = {
  settlementBuild: 5 * 60 + 30,
  forecastRead: 6 * 60,
  settlementSign: 7 * 60,
  payoutExport: 7 * 60 + 30,
} as const;

// The step, as it ran in November (v1) and as fixed (v2, the one dev/demo/catalog.yml declares: a test keeps the
// two equal). $1 is the partition hour. The fx rate of an order is
// the rate of its UTC event date. v1 compares the raw currency text with the rate table's code, so a value that
// arrived quoted and lowercase ('"sek"') finds no rate and coalesce() books it as base currency: the corrupt
// batch of night 15. v2 normalizes the code first. Neither has a volatile column: two runs give the same rows.
const STEP_SQL_TEMPLATE = (currencyExpression: string): string => `INSERT INTO warehouse.orders
  (partition_hour, order_id, shard, merchant_id, currency, amount_local, fx_rate, amount_base)
SELECT r.event_hour, r.order_id, r.shard, r.merchant_id, ${currencyExpression}, r.amount_local,
       coalesce(fx.rate_to_base, 1), round(r.amount_local * coalesce(fx.rate_to_base, 1), 2)
FROM warehouse.orders_raw r
LEFT JOIN warehouse.fx_rates fx
  ON fx.rate_date = (r.event_hour AT TIME ZONE 'UTC')::date AND fx.currency = ${currencyExpression}
WHERE r.event_hour = $1::timestamptz`;

export const STEP_SQL_V1 = STEP_SQL_TEMPLATE('r.currency_raw');
export const STEP_SQL_V2 = STEP_SQL_TEMPLATE(`upper(btrim(r.currency_raw, ' "'))`);

// The source-shard query, the consumers' re-trigger statements and the report's total query are catalog, in
// dev/demo/catalog.yml, which the seed applies.
