// The Harborlight month as data: raw orders, fx rates and when each piece of the source landed.
// Pure and deterministic (a seeded PRNG, no clock): the same call always gives the same month, so a test can
// rely on exact figures. Money is integer cents and rates integer millionths; amount_base is computed the way
// SQL's round(numeric, 2) does it (half away from zero), so the TypeScript and SQL totals agree to the cent.

import { DEMO_MONTH, DEMO_SHARDS, FLAGGED_NIGHTS, NIGHT_15, SOURCE_ARRIVALS } from './constants.js';

export interface RawOrder {
  orderId: number;
  shard: number;
  /** epoch ms of the partition hour */
  eventHour: number;
  merchantId: number;
  currencyRaw: string;
  amountLocalCents: number;
  /** epoch ms at which the row reached warehouse.orders_raw */
  landedAt: number;
}

export interface FxRate {
  rateDate: string;
  currency: string;
  /** rate_to_base in millionths: 1.080000 is 1080000 */
  rateMicros: number;
}

/** When the connector declared an hour's source complete: the pipeline builds an hour only after that. */
export interface HourSource {
  hour: number;
  landedAt: number;
}

export interface DemoData {
  orders: RawOrder[];
  fxRates: FxRate[];
  hourSources: HourSource[];
  /** The two orders that make 2026-11-15 come out at the exact figures of the story. */
  balancing: { usdOrder: RawOrder; corruptOrder: RawOrder };
}

export type StepVersion = 'v1' | 'v2';

const HOUR_MS = 3_600_000;
const MINUTE_MS = 60_000;
const MICROS = 1_000_000;
const SEED = 20261115;

interface CurrencySpec {
  code: string;
  rateMicros: number;
  /** relative share of orders */
  weight: number;
  /** the order's value in base cents is drawn from [min, max] */
  baseCents: readonly [number, number];
}

// SEK orders are small consumer orders and rare: night 15's corrupt rows are the SEK ones, and their error
// (booked in kronor as if dollars) must stay below the story's -12,408.45 so a positive balancing order fits.
const CURRENCIES: readonly CurrencySpec[] = [
  { code: 'USD', rateMicros: 1_000_000, weight: 38, baseCents: [52_000, 136_000] },
  { code: 'EUR', rateMicros: 1_080_000, weight: 22, baseCents: [52_000, 136_000] },
  { code: 'GBP', rateMicros: 1_270_000, weight: 13, baseCents: [52_000, 136_000] },
  { code: 'CAD', rateMicros: 730_000, weight: 10, baseCents: [52_000, 136_000] },
  { code: 'AUD', rateMicros: 655_000, weight: 12, baseCents: [52_000, 136_000] },
  { code: 'SEK', rateMicros: 95_000, weight: 5, baseCents: [2_000, 6_000] },
];
const CORRUPT_CURRENCY = 'SEK';

/** mulberry32: tiny, fast and good enough for demo data; the point is that it is seeded. */
function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

function randomInt(random: () => number, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}

function pickCurrency(random: () => number): CurrencySpec {
  const total = CURRENCIES.reduce((sum, spec) => sum + spec.weight, 0);
  let ticket = random() * total;
  for (const spec of CURRENCIES) {
    ticket -= spec.weight;
    if (ticket < 0) return spec;
  }
  return CURRENCIES[0] as CurrencySpec;
}

export function monthHours(): number[] {
  const first = Date.parse(DEMO_MONTH.firstHour);
  return Array.from({ length: DEMO_MONTH.partitions }, (_, index) => first + index * HOUR_MS);
}

export function utcDate(epochMs: number): string {
  return new Date(epochMs).toISOString().slice(0, 10);
}

// Night ranges as epoch ms, parsed once: the generator asks for every order.
const NIGHT_RANGES = new Map(FLAGGED_NIGHTS.map((entry) => [entry.night, [Date.parse(entry.firstHour), Date.parse(entry.lastHour)] as const]));

function isNightHour(night: number, hour: number): boolean {
  const range = NIGHT_RANGES.get(night);
  if (!range) throw new Error(`night ${night} is not a flagged night`);
  return hour >= range[0] && hour <= range[1];
}

/** When a shard's rows of an hour reached the landing table: normally 49, 53 and 57 minutes past the hour, before the next run. */
function shardLandedAt(hour: number, shard: number): number {
  if (isNightHour(4, hour)) return Date.parse(SOURCE_ARRIVALS.night4LateLoad);
  if (isNightHour(9, hour)) return Date.parse(SOURCE_ARRIVALS.night9SourceBack);
  if (shard === 3 && isNightHour(21, hour)) return Date.parse(SOURCE_ARRIVALS.night21Retries);
  if (shard === 3 && isNightHour(27, hour)) return Date.parse(SOURCE_ARRIVALS.night27Shard3);
  return hour + (45 + 4 * shard) * MINUTE_MS;
}

/**
 * When the connector called the hour complete. Night 27's connector did so with two shards of three (the
 * partial load the watermark then advanced past); night 21's only once its retries had brought shard 3.
 */
function hourSourceLandedAt(hour: number): number {
  if (isNightHour(27, hour)) return Math.max(shardLandedAt(hour, 1), shardLandedAt(hour, 2));
  return Math.max(...[1, 2, 3].map((shard) => shardLandedAt(hour, shard)));
}

/** The currency text as the source sent it: night 15's SEK batch arrived as a quoted, lowercase JSON string. */
function rawCurrency(code: string, hour: number): string {
  return code === CORRUPT_CURRENCY && isNightHour(15, hour) ? `"${code.toLowerCase()}"` : code;
}

function generateFxRates(random: () => number): FxRate[] {
  const rates: FxRate[] = [];
  for (let day = 0; day < DEMO_MONTH.partitions / 24; day += 1) {
    const rateDate = utcDate(Date.parse(DEMO_MONTH.firstHour) + day * 24 * HOUR_MS);
    for (const spec of CURRENCIES) {
      // Within ±1% of the reference rate; the base currency does not move.
      const drift = spec.rateMicros === MICROS ? 0 : Math.round(spec.rateMicros * (random() - 0.5) * 0.02);
      rates.push({ rateDate, currency: spec.code, rateMicros: spec.rateMicros + drift });
    }
  }
  return rates;
}

function rateLookup(fxRates: FxRate[]): (date: string, currency: string) => number | undefined {
  const byKey = new Map(fxRates.map((rate) => [`${rate.rateDate}|${rate.currency}`, rate.rateMicros]));
  return (date, currency) => byKey.get(`${date}|${currency}`);
}

function orderId(hour: number, shard: number, slot: number): number {
  const hourIndex = (hour - Date.parse(DEMO_MONTH.firstHour)) / HOUR_MS;
  return 100_000_000 + hourIndex * 1000 + shard * 100 + slot;
}

function generateHourOrders(random: () => number, hour: number, rateOf: (date: string, currency: string) => number | undefined): RawOrder[] {
  const orders: RawOrder[] = [];
  for (let shard = 1; shard <= DEMO_SHARDS; shard += 1) {
    const count = randomInt(random, 19, 21);
    for (let slot = 1; slot <= count; slot += 1) {
      const spec = pickCurrency(random);
      const baseCents = randomInt(random, spec.baseCents[0], spec.baseCents[1]);
      const rate = rateOf(utcDate(hour), spec.code) ?? MICROS;
      orders.push({
        orderId: orderId(hour, shard, slot),
        shard,
        eventHour: hour,
        merchantId: randomInt(random, 1001, 1040),
        currencyRaw: rawCurrency(spec.code, hour),
        amountLocalCents: Math.max(1, Math.round((baseCents * MICROS) / rate)),
        landedAt: shardLandedAt(hour, shard),
      });
    }
  }
  return orders;
}

/** round(cents × rate, 2) as PostgreSQL's numeric round does it: half away from zero. */
function amountBaseCents(localCents: number, rateMicros: number): number {
  const product = localCents * rateMicros;
  if (!Number.isSafeInteger(product)) throw new Error(`amount ${localCents} × rate ${rateMicros} is too large to compute exactly`);
  const magnitude = Math.floor((Math.abs(product) + MICROS / 2) / MICROS);
  return product < 0 ? -magnitude : magnitude;
}

/** The rate the step SQL of a version finds for a raw currency: none (so 1) when the lookup misses. */
function stepRate(version: StepVersion, currencyRaw: string, date: string, rateOf: (date: string, currency: string) => number | undefined): number {
  const code = version === 'v1' ? currencyRaw : currencyRaw.replace(/^[ "]+|[ "]+$/g, '').toUpperCase();
  return rateOf(date, code) ?? MICROS;
}

/** sum(amount_base) over one UTC date's orders as the given step version computes it, from every raw row of that date. */
export function dayTotalCents(data: Pick<DemoData, 'orders' | 'fxRates'>, date: string, version: StepVersion): number {
  const rateOf = rateLookup(data.fxRates);
  return data.orders
    .filter((order) => utcDate(order.eventHour) === date)
    .reduce((sum, order) => sum + amountBaseCents(order.amountLocalCents, stepRate(version, order.currencyRaw, date, rateOf)), 0);
}

function decimalToCents(value: string): number {
  const match = /^(-?)(\d+)\.(\d{2})$/.exec(value);
  if (!match) throw new Error(`not a two-decimal amount: ${value}`);
  const cents = Number(match[2]) * 100 + Number(match[3]);
  return match[1] ? -cents : cents;
}

export function centsToDecimal(cents: number): string {
  const magnitude = Math.abs(cents);
  return `${cents < 0 ? '-' : ''}${Math.floor(magnitude / 100)}.${String(magnitude % 100).padStart(2, '0')}`;
}

export function microsToDecimal(micros: number): string {
  return `${Math.floor(micros / MICROS)}.${String(micros % MICROS).padStart(6, '0')}`;
}

/**
 * The smallest local amount whose booking error under v1 (a − round(a × rate)) is exactly `wanted` cents.
 * For a rate below 1 that error grows by 0 or 1 per cent of a, so every positive value is reached.
 */
function localAmountWithError(wanted: number, rateMicros: number): number {
  if (!(rateMicros < MICROS) || wanted <= 0) throw new Error('the balancing order needs a rate below 1 and a positive error');
  const error = (local: number) => local - amountBaseCents(local, rateMicros);
  let local = Math.max(1, Math.floor(((wanted - 1) * MICROS) / (MICROS - rateMicros)));
  while (error(local) < wanted) local += 1;
  if (error(local) !== wanted) throw new Error(`no local amount gives an error of ${wanted} cents at rate ${rateMicros}`);
  return local;
}

/**
 * Adds the two balancing orders of 2026-11-15: a corrupt SEK order in a bad hour whose booking error makes
 * v2 − v1 exactly the story's diff, then a USD order in a clean hour that makes the v1 total the signed figure.
 */
function balanceNight15(orders: RawOrder[], fxRates: FxRate[]): DemoData['balancing'] {
  const date = NIGHT_15.reportDate;
  const rateOf = rateLookup(fxRates);
  const naturalDiff = dayTotalCents({ orders, fxRates }, date, 'v2') - dayTotalCents({ orders, fxRates }, date, 'v1');
  const wantedError = naturalDiff - decimalToCents(NIGHT_15.diff);
  const sekRate = rateOf(date, CORRUPT_CURRENCY) ?? MICROS;
  const corruptHour = Date.parse('2026-11-15T08:00:00.000Z');
  const corruptOrder: RawOrder = {
    orderId: orderId(corruptHour, 2, 99), shard: 2, eventHour: corruptHour, merchantId: 1017,
    currencyRaw: rawCurrency(CORRUPT_CURRENCY, corruptHour), amountLocalCents: localAmountWithError(wantedError, sekRate),
    landedAt: shardLandedAt(corruptHour, 2),
  };
  orders.push(corruptOrder);

  const usdAmount = decimalToCents(NIGHT_15.signedTotal) - dayTotalCents({ orders, fxRates }, date, 'v1');
  if (usdAmount <= 0) throw new Error(`the USD balancing order of ${date} would be ${usdAmount} cents: the generated day is already too large`);
  const cleanHour = Date.parse('2026-11-15T14:00:00.000Z');
  const usdOrder: RawOrder = {
    orderId: orderId(cleanHour, 1, 99), shard: 1, eventHour: cleanHour, merchantId: 1003,
    currencyRaw: 'USD', amountLocalCents: usdAmount, landedAt: shardLandedAt(cleanHour, 1),
  };
  orders.push(usdOrder);
  return { usdOrder, corruptOrder };
}

function assertNight15Figures(data: DemoData): void {
  const v1 = centsToDecimal(dayTotalCents(data, NIGHT_15.reportDate, 'v1'));
  const v2 = centsToDecimal(dayTotalCents(data, NIGHT_15.reportDate, 'v2'));
  if (v1 !== NIGHT_15.signedTotal || v2 !== NIGHT_15.correctedTotal) {
    throw new Error(`generated 2026-11-15 totals are ${v1} (v1) and ${v2} (v2), not ${NIGHT_15.signedTotal} and ${NIGHT_15.correctedTotal}`);
  }
}

export function generateDemoData(): DemoData {
  const random = mulberry32(SEED);
  const fxRates = generateFxRates(random);
  const rateOf = rateLookup(fxRates);
  const hours = monthHours();
  const orders = hours.flatMap((hour) => generateHourOrders(random, hour, rateOf));
  const balancing = balanceNight15(orders, fxRates);
  orders.sort((a, b) => a.eventHour - b.eventHour || a.orderId - b.orderId);
  const data: DemoData = {
    orders,
    fxRates,
    hourSources: hours.map((hour) => ({ hour, landedAt: hourSourceLandedAt(hour) })),
    balancing,
  };
  assertNight15Figures(data);
  return data;
}
