import { z } from 'zod';
import { recordEvent } from '../../db/events.js';
import {
  findJobMapping, findWatermarkAt, insertPendingReads, insertPendingReadsWithoutHours, insertReads, insertSeenEvent, listPipelineTables,
  lockOrCreateProposal, lockProposal, noteRunInputs, recordSeenOutcome, takeNotedRun,
  type JobMapping, type LineageRead, type NotedInput, type NotedRun, type ReadWithoutHours,
} from '../../db/lineageEvents.js';
import { countOpenProposals, lockSenderProposals, takeReadAllowance } from '../../db/lineageLimits.js';
import { withTransaction, type PoolClient } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import type { LineageSender } from '../../config.js';
import type { EngineContext } from '../context.js';
import { namesTable, suggestConsumerName } from './runEvent.js';

/*
 * An OpenLineage event in (POST /lineage or /api/v1/lineage, src/http/lineage.ts), read as the specification
 * (https://openlineage.io/spec/2-0-2/OpenLineage.json) allows it: nothing the spec leaves out is required, and
 * what the bot cannot use is answered 200 `ignored` with the reason, never refused.
 *
 * The event:
 *   DatasetEvent, JobEvent          static metadata: ignored (no run, so nobody read anything)
 *   RunEvent START/RUNNING/OTHER    the inputs that are pipelines' tables are noted for the run, with its nominal
 *   (or no eventType)               time (backfill.lineage_runs): a run's events are cumulative, and its
 *                                   COMPLETE may carry `inputs: []`
 *   RunEvent FAIL/ABORT             the run did not complete: what was noted for it is dropped
 *   RunEvent COMPLETE               its inputs and those noted for the run are its reads, at eventTime
 *
 * Which hours an input read, first that says: the bot's own partitions facet on the input (backfillPartitions,
 * or backfillBot_partitions); the run's nominalTime facet (every hour [start, end) touches); the spec's subset
 * facet (inputFacets.subset: partitions, or comparisons on the pipeline's partition column); the job's read rule,
 * declared by the operator who confirmed it (the N hours up to the watermark at eventTime, marked inferred).
 * An input none of them gives hours for adds nothing for a mapped job; for a proposed one it is kept pending
 * without hours, for the confirmation's rule to infer.
 *
 * A COMPLETE, as the state of the job it names:
 *
 *   mapped job (backfill.lineage_jobs)        its reads go straight into backfill.read_log as its consumer's
 *   unknown job, first event                  a proposal is created and the reads kept pending on it
 *   proposed job                              the reads are kept pending on its proposal
 *   confirmed (an operator chose a consumer)  = mapped; the pending reads moved into the read log then
 *   rejected                                  the event is kept as seen and adds nothing
 *
 * An event whose inputs name no pipeline's table is none of the bot's business and is ignored. A (runId,
 * COMPLETE) seen before adds nothing: its key is inserted in the same transaction as the rows, so two copies
 * arriving together serialize on it.
 *
 * Each event comes from a sender (a token, src/http/lineage.ts), bounded three ways: it may name only jobs of
 * its namespaces (403); one input may name at most MAX_PARTITIONS hours (400); the rows it writes (reads,
 * recorded or pending, and the inputs noted for a run) come out of its LINEAGE_READS_PER_HOUR bucket, and it
 * may hold at most LINEAGE_MAX_OPEN_PROPOSALS open proposals (429). The bucket and the proposal count are taken
 * inside the event's transaction: a refusal writes nothing.
 */

export type IngestOutcome =
  | { kind: 'ignored'; reason: string }
  | { kind: 'noted'; inputs: number }
  | { kind: 'duplicate' }
  | { kind: 'recorded'; consumer: string; reads: number; inferred: number; note?: string }
  | { kind: 'pending'; proposalId: number; created: boolean; reads: number; withoutHours: number }
  | { kind: 'rejected_job'; proposalId: number };

const ACTOR = 'openlineage';
/** What a 429 for too many open proposals suggests waiting: they wait for an operator, not for a clock. */
const PROPOSALS_RETRY_AFTER_SECONDS = 3600;

/** Who sent the event: the sender's name and the job namespaces its token may post (null: every one). */
export type LineageSenderScope = Pick<LineageSender, 'name' | 'namespaces'>;

type Limits = Pick<EngineContext['config'], 'MAX_PARTITIONS' | 'LINEAGE_READS_PER_HOUR' | 'LINEAGE_MAX_OPEN_PROPOSALS'>;

/**
 * Checks the body, then records what it says. Throws BadInput (the HTTP 400's text) for an event the
 * specification does not allow (or a malformed partitions facet of the bot's own), NotAllowed (403) for a job
 * outside the sender's namespaces, RateLimited (429) past a sender's bound.
 */
export async function ingestLineageEvent(ctx: EngineContext, body: unknown, sender: LineageSenderScope): Promise<IngestOutcome> {
  const event = parseLineageEvent(body);
  if (event.kind === 'dataset') return ignored('a DatasetEvent describes a dataset, not a run: it says nobody read anything');
  checkNamespace(sender, event.job.namespace);
  if (event.kind === 'job') return ignored("a JobEvent describes a job, not a run of it: only a run's events say what it read");
  if (event.job.namespace === '' || event.job.name === '') return ignored('its job has an empty namespace or name, which no consumer can be mapped to');
  switch (event.eventType) {
    case 'COMPLETE': return completeRun(ctx, sender.name, event);
    case 'FAIL':
    case 'ABORT':
      await withTransaction(ctx.pool, (tx) => takeNotedRun(tx, event.run.runId, jobOf(event)));
      return ignored(`a ${event.eventType} event: the run did not complete, so what it read is not recorded`);
    default: return noteRun(ctx, sender.name, event);
  }
}

function checkNamespace(sender: LineageSenderScope, namespace: string): void {
  if (sender.namespaces && !sender.namespaces.includes(namespace)) {
    throw new BackfillError(ErrorCode.NotAllowed,
      `The token of ${sender.name} may post events of the job namespaces ${sender.namespaces.join(', ')} only, and job.namespace is ${shown(namespace)}; nothing was recorded. ` +
      'An operator can add the namespace to its entry in LINEAGE_TOKENS.');
  }
}

const ignored = (reason: string): IngestOutcome => ({ kind: 'ignored', reason });
const jobOf = (event: RunEvent) => ({ jobNamespace: event.job.namespace, jobName: event.job.name });

/** Outside text in an answer: quoted, and at most 200 characters of it. */
function shown(text: string): string {
  return JSON.stringify(text.length > 200 ? `${text.slice(0, 199)}…` : text);
}

// ---- the event as the specification has it ---------------------------------------------------------------

const HOUR_MS = 3_600_000;
const MAX_INPUTS = 100;
/** The most hours the bot's facet may list (a month), checked while parsing; the bound that applies is MAX_PARTITIONS. */
const MAX_FACET_HOURS = 744;
/**
 * The bot's own input facet naming the hours read: `backfillPartitions` as docs/lineage.md has always named it,
 * and `backfillBot_partitions`, the prefixed name the specification asks of a custom facet.
 */
const PARTITIONS_FACETS = ['backfillPartitions', 'backfillBot_partitions'] as const;

// The spec's `date-time` as ajv-formats checks it (RFC 3339): a calendar date, `T`, `t` or a space, a time with
// seconds, a zone (Z, ±hh, ±hhmm or ±hh:mm). A time without a zone is refused: it names no instant.
const SPEC_DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt\s](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2})(?::?(\d{2}))?)$/;
// A subset literal may also be a date or a time without a zone (SQL writes them so): read as UTC, the zone of
// the pipelines' partition hours.
const LITERAL_TIME = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt\s](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?)?$/;
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function instant(parts: { year: number; month: number; day: number; hour: number; minute: number; second: number; fraction?: string | undefined; offsetMinutes: number }): Date | undefined {
  const { year, month, day, hour, minute, second } = parts;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 && leap ? 29 : DAYS_IN_MONTH[month - 1];
  if (days === undefined || day < 1 || day > days || hour > 23 || minute > 59 || second > 60) return undefined;
  const at = new Date(Date.UTC(2000, month - 1, day, hour, minute, Math.min(second, 59), Number((parts.fraction ?? '').padEnd(3, '0').slice(0, 3))));
  at.setUTCFullYear(year, month - 1, day);
  const utc = new Date(at.getTime() - parts.offsetMinutes * 60_000);
  // A leap second is a time only as 23:59:60 UTC.
  if (second === 60 && !(utc.getUTCHours() === 23 && utc.getUTCMinutes() === 59)) return undefined;
  return utc;
}

/** The instant a spec `date-time` names, or undefined when the text is not one. */
function parseSpecTime(text: string): Date | undefined {
  const m = SPEC_DATE_TIME.exec(text);
  if (!m) return undefined;
  const offsetHours = Number(m[10] ?? 0);
  const offsetMinutes = Number(m[11] ?? 0);
  if (offsetHours > 23 || offsetMinutes > 59) return undefined;
  return instant({
    year: Number(m[1]), month: Number(m[2]), day: Number(m[3]), hour: Number(m[4]), minute: Number(m[5]), second: Number(m[6]), fraction: m[7],
    offsetMinutes: m[8] ? 0 : (m[9] === '-' ? -1 : 1) * (offsetHours * 60 + offsetMinutes),
  });
}

/** A subset literal's instant: a spec date-time, or a date or time without a zone, in UTC; undefined otherwise. */
function literalTime(text: string): { at: Date; dateOnly: boolean } | undefined {
  const zoned = parseSpecTime(text);
  if (zoned) return { at: zoned, dateOnly: false };
  const m = LITERAL_TIME.exec(text);
  if (!m) return undefined;
  const at = instant({
    year: Number(m[1]), month: Number(m[2]), day: Number(m[3]), hour: Number(m[4] ?? 0), minute: Number(m[5] ?? 0), second: Number(m[6] ?? 0), fraction: m[7], offsetMinutes: 0,
  });
  return at ? { at, dateOnly: m[4] === undefined } : undefined;
}

// The spec's `uuid` format (ajv-formats): any 8-4-4-4-12 hex, optionally as a URN; no version or variant bits are
// required, as the spec requires none. Kept lower case, without the URN, as PostgreSQL's uuid reads it.
const SPEC_UUID = /^(?:urn:uuid:)?([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12})$/i;

const SPEC_TIME_MESSAGE = 'must be an ISO 8601 time with a zone (RFC 3339), e.g. 2026-11-15T05:00:00Z';
const specTime = z.string().refine((text) => parseSpecTime(text) !== undefined, SPEC_TIME_MESSAGE);
const baseEvent = {
  eventTime: z.string().transform((text, ctx) => parseSpecTime(text) ?? (ctx.addIssue({ code: 'custom', message: SPEC_TIME_MESSAGE, input: text }), z.NEVER)),
  producer: z.string().min(1, 'must name the producer (a URI)'),
  schemaURL: z.string().min(1, 'must be the OpenLineage schema URL'),
};
const jobSchema = z.looseObject({
  namespace: z.string().max(200, 'may be at most 200 characters'),
  name: z.string().max(500, 'may be at most 500 characters'),
});
const datasetSchema = z.looseObject({ namespace: z.string(), name: z.string(), facets: z.unknown().optional(), inputFacets: z.unknown().optional() });

const runEventSchema = z.looseObject({
  ...baseEvent,
  eventType: z.enum(['START', 'RUNNING', 'COMPLETE', 'ABORT', 'FAIL', 'OTHER'], 'must be one of START, RUNNING, COMPLETE, ABORT, FAIL, OTHER').optional(),
  run: z.looseObject({
    runId: z.string().regex(SPEC_UUID, 'must be a UUID').transform((id) => (SPEC_UUID.exec(id)?.[1] ?? id).toLowerCase()),
    facets: z.unknown().optional(),
  }),
  job: jobSchema,
  inputs: z.array(datasetSchema).max(MAX_INPUTS, `may list at most ${MAX_INPUTS} datasets`).default([]),
});
const jobEventSchema = z.looseObject({ ...baseEvent, job: jobSchema });
const datasetEventSchema = z.looseObject({ ...baseEvent, dataset: datasetSchema });

type RunEvent = z.output<typeof runEventSchema>;
type InputDataset = RunEvent['inputs'][number];
type LineageEvent = (RunEvent & { kind: 'run' }) | { kind: 'job'; job: { namespace: string } } | { kind: 'dataset' };

/** `run.runId`, `inputs[0].facets.backfillPartitions.hours[2]`: where in the event a problem is. */
function pathOf(path: readonly PropertyKey[], prefix = ''): string {
  return path.reduce<string>((text, key) => (typeof key === 'number' ? `${text}[${key}]` : `${text}${text ? '.' : ''}${String(key)}`), prefix) || 'the body';
}

function parsedOrRefused<T>(schema: z.ZodType<T>, body: unknown, what: string, prefix = ''): T {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.slice(0, 10).map((issue) =>
    `${pathOf(issue.path, prefix)} ${issue.code === 'invalid_type' && issue.input === undefined ? 'is missing' : issue.message}`);
  throw new BackfillError(ErrorCode.BadInput, `${what}: ${problems.join('; ')}.`);
}

/**
 * The event the body is, told apart as the spec's oneOf does: a RunEvent has `run`, a JobEvent `job` and no run,
 * a DatasetEvent `dataset`. BadInput naming every field the spec requires that is missing or wrong.
 */
function parseLineageEvent(body: unknown): LineageEvent {
  const has = (key: string) => typeof body === 'object' && body !== null && !Array.isArray(body) && key in body;
  if (has('run')) return { ...parsedOrRefused(runEventSchema, body, 'Not an OpenLineage RunEvent the bot can read'), kind: 'run' };
  if (has('job')) return { ...parsedOrRefused(jobEventSchema, body, 'Not an OpenLineage JobEvent the bot can read'), kind: 'job' };
  if (has('dataset')) {
    parsedOrRefused(datasetEventSchema, body, 'Not an OpenLineage DatasetEvent the bot can read');
    return { kind: 'dataset' };
  }
  throw new BackfillError(ErrorCode.BadInput,
    'Not an OpenLineage event: a RunEvent has run and job, a JobEvent job, a DatasetEvent dataset, and this body has none of them (run is missing). Nothing was recorded.');
}

/** A facet by name in a facets object, if it is an object (the spec's facets are; anything else is not used). */
function facetOf(facets: unknown, name: string): Record<string, unknown> | undefined {
  if (typeof facets !== 'object' || facets === null) return undefined;
  const facet = (facets as Record<string, unknown>)[name];
  return typeof facet === 'object' && facet !== null && !Array.isArray(facet) ? facet as Record<string, unknown> : undefined;
}

// ---- which hours an input read ----------------------------------------------------------------------------

interface NominalTime {
  start: Date;
  end: Date | null;
}

/** The run's nominalTime facet, when its start is a spec date-time (an end that is not one is left out). */
function nominalTimeOf(event: RunEvent): NominalTime | undefined {
  const facet = facetOf(event.run.facets, 'nominalTime');
  const start = typeof facet?.nominalStartTime === 'string' ? parseSpecTime(facet.nominalStartTime) : undefined;
  if (!start) return undefined;
  const end = typeof facet?.nominalEndTime === 'string' ? parseSpecTime(facet.nominalEndTime) : undefined;
  return { start, end: end ?? null };
}

function tooManyHours(what: string, count: number, where: string, maxHours: number): BackfillError {
  return new BackfillError(ErrorCode.BadInput,
    `${what} ${count} hours of ${where}; at most ${maxHours} (MAX_PARTITIONS) are accepted per input in one event: send one event per run.`);
}

/** Every hour the nominal time touches ([start, end), or the start's hour alone), or why it gives none. */
function nominalHours(nominal: NominalTime, where: string, maxHours: number): Date[] | string {
  if (nominal.end && nominal.end.getTime() <= nominal.start.getTime()) return 'run.facets.nominalTime has a nominalEndTime not after its nominalStartTime';
  const start = Math.floor(nominal.start.getTime() / HOUR_MS) * HOUR_MS;
  const end = nominal.end ? nominal.end.getTime() : start + 1;
  const count = Math.ceil((end - start) / HOUR_MS);
  if (count > maxHours) throw tooManyHours('run.facets.nominalTime covers', count, where, maxHours);
  return Array.from({ length: count }, (_, i) => new Date(start + i * HOUR_MS));
}

const partitionsFacet = z.looseObject({
  hours: z.array(specTime).min(1, 'must name at least one hour').max(MAX_FACET_HOURS, `may name at most ${MAX_FACET_HOURS} hours`),
});

/** The hours the bot's own partitions facet on the input names (BadInput when it is malformed), or undefined without one. */
function reportedHoursOf(input: InputDataset, index: number, maxHours: number): Date[] | undefined {
  for (const name of PARTITIONS_FACETS) {
    for (const container of ['facets', 'inputFacets'] as const) {
      const facet = facetOf(input[container], name);
      if (!facet) continue;
      const where = `inputs[${index}].${container}.${name}`;
      const { hours } = parsedOrRefused(partitionsFacet, facet, 'Not a partitions facet the bot can read', where);
      const distinct = distinctHours(hours.map((text, i) => {
        const at = parseSpecTime(text) ?? new Date(NaN);
        if (at.getTime() % HOUR_MS !== 0) throw new BackfillError(ErrorCode.BadInput, `${where}.hours[${i}] is ${text}, not a whole hour: partitions are hourly (e.g. 2026-11-15T05:00:00Z).`);
        return at;
      }));
      if (distinct.length > maxHours) throw tooManyHours(`${where}.hours names`, distinct.length, `inputs[${index}]`, maxHours);
      return distinct;
    }
  }
  return undefined;
}

function distinctHours(hours: Date[]): Date[] {
  return [...new Map(hours.map((h) => [h.getTime(), h])).values()].sort((a, b) => a.getTime() - b.getTime());
}

// The spec's subset facet (facets/BaseSubsetDatasetFacet.json) read as hours of the pipeline's partition column:
// a partition condition whose every partition has that column as a dimension (a whole hour, or a date: its 24
// hours), and comparisons of the column with a literal time, joined by AND and OR. A comparison on another column
// narrows nothing; a location, a condition the bot cannot read, or hours without a bound on both sides give no
// hours, so the next source is asked.

/** Hour numbers (epoch ms / HOUR_MS), each [from, to); ±Infinity where a comparison leaves a side open. */
type HourRanges = [number, number][];
const EVERY_HOUR: HourRanges = [[-Infinity, Infinity]];
/** Beyond these, a condition is not read (a body of a megabyte could otherwise make millions of ranges, or recurse deep). */
const MAX_RANGES = 200;
const MAX_CONDITION_DEPTH = 32;

function mergedRanges(ranges: HourRanges): HourRanges | undefined {
  const out: HourRanges = [];
  for (const [from, to] of ranges.filter(([a, b]) => a < b).sort((x, y) => x[0] - y[0])) {
    const last = out.at(-1);
    if (last && from <= last[1]) last[1] = Math.max(last[1], to);
    else out.push([from, to]);
  }
  return out.length > MAX_RANGES ? undefined : out;
}

function intersectRanges(left: HourRanges, right: HourRanges): HourRanges | undefined {
  return mergedRanges(left.flatMap(([a, b]) => right.map(([c, d]): [number, number] => [Math.max(a, c), Math.min(b, d)])));
}

/** A column name as a condition or a dimension writes it (quoted, qualified, any case), compared by its last part. */
function sameColumn(name: string, column: string): boolean {
  const bare = (text: string) => (text.replaceAll(/["`]/g, '').split('.').at(-1) ?? '').toLowerCase();
  return bare(name) === bare(column);
}

function conditionHours(condition: unknown, column: string, depth: number): HourRanges | undefined {
  if (depth > MAX_CONDITION_DEPTH || typeof condition !== 'object' || condition === null) return undefined;
  const c = condition as Record<string, unknown>;
  switch (c.type) {
    case 'binary': {
      const left = conditionHours(c.left, column, depth + 1);
      const right = conditionHours(c.right, column, depth + 1);
      const operator = typeof c.operator === 'string' ? c.operator.toUpperCase() : '';
      if (!left || !right) return undefined;
      if (operator === 'AND') return intersectRanges(left, right);
      if (operator === 'OR') return mergedRanges([...left, ...right]);
      return undefined;
    }
    case 'compare': return comparisonHours(c, column);
    case 'partition': return partitionHours(c.partitions, column);
    default: return undefined;
  }
}

const FLIPPED: Record<string, string> = {
  EQUAL: 'EQUAL', GREATER_THAN: 'LESS_THAN', GREATER_EQUAL_THAN: 'LESS_EQUAL_THAN', LESS_THAN: 'GREATER_THAN', LESS_EQUAL_THAN: 'GREATER_EQUAL_THAN',
};

function comparisonHours(c: Record<string, unknown>, column: string): HourRanges | undefined {
  const side = (expression: unknown): { field?: string; literal?: string } | undefined => {
    const e = typeof expression === 'object' && expression !== null ? expression as Record<string, unknown> : {};
    if (e.type === 'field' && typeof e.field === 'string') return { field: e.field };
    if (e.type === 'literal' && typeof e.value === 'string') return { literal: e.value };
    return undefined;
  };
  const left = side(c.left);
  const right = side(c.right);
  const stated = typeof c.comparison === 'string' ? c.comparison.toUpperCase() : '';
  if (!left || !right || !(stated in FLIPPED)) return undefined;
  const fieldFirst = left.field !== undefined && right.literal !== undefined;
  const literalFirst = left.literal !== undefined && right.field !== undefined;
  if (!fieldFirst && !literalFirst) return EVERY_HOUR;
  const field = (fieldFirst ? left.field : right.field) ?? '';
  if (!sameColumn(field, column)) return EVERY_HOUR;
  const literal = literalTime((fieldFirst ? right.literal : left.literal) ?? '');
  if (!literal) return undefined;
  const hour = Math.floor(literal.at.getTime() / HOUR_MS);
  const exact = literal.at.getTime() % HOUR_MS === 0;
  switch (fieldFirst ? stated : FLIPPED[stated]) {
    case 'EQUAL': return exact ? [[hour, hour + 1]] : [];
    case 'GREATER_THAN': return [[hour + 1, Infinity]];
    case 'GREATER_EQUAL_THAN': return [[exact ? hour : hour + 1, Infinity]];
    case 'LESS_THAN': return [[-Infinity, exact ? hour : hour + 1]];
    case 'LESS_EQUAL_THAN': return [[-Infinity, hour + 1]];
    default: return undefined;
  }
}

function partitionHours(partitions: unknown, column: string): HourRanges | undefined {
  if (!Array.isArray(partitions)) return undefined;
  const ranges: HourRanges = [];
  for (const partition of partitions as unknown[]) {
    const dimensions = typeof partition === 'object' && partition !== null ? (partition as Record<string, unknown>).dimensions : undefined;
    if (typeof dimensions !== 'object' || dimensions === null) return undefined;
    const key = Object.keys(dimensions).find((name) => sameColumn(name, column));
    const value = key === undefined ? undefined : (dimensions as Record<string, unknown>)[key];
    const literal = typeof value === 'string' ? literalTime(value) : undefined;
    if (!literal) return undefined;
    const hour = literal.at.getTime() / HOUR_MS;
    if (literal.dateOnly) ranges.push([hour, hour + 24]);
    else if (Number.isInteger(hour)) ranges.push([hour, hour + 1]);
    else return undefined;
  }
  return mergedRanges(ranges);
}

/** The hours the input's subset facet names on the pipeline's partition column, or undefined when it names none the bot can read. */
function subsetHoursOf(input: InputDataset, index: number, column: string, maxHours: number): Date[] | undefined {
  for (const container of ['inputFacets', 'facets'] as const) {
    const facet = facetOf(input[container], 'subset');
    if (!facet) continue;
    const ranges = conditionHours(facet.inputCondition, column, 0);
    if (!ranges || ranges.length === 0 || ranges.some(([from, to]) => !Number.isFinite(from) || !Number.isFinite(to))) return undefined;
    const count = ranges.reduce((sum, [from, to]) => sum + to - from, 0);
    if (count > maxHours) throw tooManyHours(`inputs[${index}].${container}.subset names`, count, `inputs[${index}]`, maxHours);
    return ranges.flatMap(([from, to]) => Array.from({ length: to - from }, (_, i) => new Date((from + i) * HOUR_MS)));
  }
  return undefined;
}

// ---- a run's events ---------------------------------------------------------------------------------------

/** An input that is a pipeline's table, with the hours its facets named (empty: none), and how answers name it. */
interface InputRead {
  pipeline: string;
  /** Where it is: `inputs[2]`, or an earlier event of the run. */
  where: string;
  /** `where` with the dataset's name. */
  label: string;
  reported: Date[];
  subset: Date[];
}

/** The event's inputs that are pipelines' tables, one per pipeline (BadInput for a malformed partitions facet, or too many hours). */
async function pipelineInputs(ctx: EngineContext, event: RunEvent): Promise<InputRead[]> {
  const tables = await listPipelineTables(ctx.pool);
  const byPipeline = new Map<string, InputRead>();
  event.inputs.forEach((input, index) => {
    const table = input.name === '' ? undefined : tables.find((t) => namesTable(input.name, t.targetTable));
    if (!table) return;
    const reported = reportedHoursOf(input, index, ctx.config.MAX_PARTITIONS) ?? [];
    const subset = subsetHoursOf(input, index, table.partitionColumn, ctx.config.MAX_PARTITIONS) ?? [];
    const known = byPipeline.get(table.pipeline);
    byPipeline.set(table.pipeline, known
      ? { ...known, reported: distinctHours([...known.reported, ...reported]), subset: distinctHours([...known.subset, ...subset]) }
      : { pipeline: table.pipeline, where: `inputs[${index}]`, label: `inputs[${index}] (${shown(input.name)})`, reported, subset });
  });
  return [...byPipeline.values()];
}

/** START, RUNNING, OTHER or untyped: its pipeline inputs and nominal time kept for the run's COMPLETE. */
async function noteRun(ctx: EngineContext, sender: string, event: RunEvent): Promise<IngestOutcome> {
  const inputs = await pipelineInputs(ctx, event);
  if (inputs.length === 0) {
    return ignored(`${event.eventType ? `a ${event.eventType} event` : 'an event without an eventType'} records nothing by itself (only COMPLETE says what a run read), and none of its inputs is a pipeline's table to keep for the run's COMPLETE`);
  }
  const nominal = nominalTimeOf(event);
  const added = await withTransaction(ctx.pool, async (tx) => {
    const count = await noteRunInputs(tx, {
      runId: event.run.runId, ...jobOf(event), nominalStart: nominal?.start ?? null, nominalEnd: nominal?.end ?? null,
      inputs: inputs.map((input): NotedInput => ({ pipeline: input.pipeline, reportedHours: input.reported, subsetHours: input.subset })),
    });
    if (count) await takeReads(tx, ctx.config, sender, count);
    return count;
  });
  if (added === undefined) return ignored("its run id is another job's run, so its inputs are not added to that run");
  return { kind: 'noted', inputs: inputs.length };
}

/** The COMPLETE's inputs with those its run's earlier events named (the hours of both), one per pipeline. */
function withNoted(own: InputRead[], noted: NotedRun | undefined): InputRead[] {
  const byPipeline = new Map(own.map((input) => [input.pipeline, input]));
  for (const earlier of noted?.inputs ?? []) {
    const known = byPipeline.get(earlier.pipeline);
    const where = `the ${earlier.pipeline} table (an input an earlier event of the run named)`;
    byPipeline.set(earlier.pipeline, {
      pipeline: earlier.pipeline,
      where: known?.where ?? where,
      label: known?.label ?? where,
      reported: distinctHours([...(known?.reported ?? []), ...earlier.reportedHours]),
      subset: distinctHours([...(known?.subset ?? []), ...earlier.subsetHours]),
    });
  }
  return [...byPipeline.values()];
}

interface ResolvedReads {
  /** The reads with the hours the events named. */
  reads: LineageRead[];
  /** The inputs no event said hours of. */
  withoutHours: InputRead[];
  /** Why a source that was there gave no hours (a nominal time ending before it starts). */
  notes: string[];
}

/** Each input's hours, from the first source that names some: the partitions facet, the nominal time, the subset facet. */
function resolveHours(inputs: InputRead[], nominal: NominalTime | undefined, readAt: Date, maxHours: number): ResolvedReads {
  const resolved: ResolvedReads = { reads: [], withoutHours: [], notes: [] };
  for (const input of inputs) {
    let hours = input.reported;
    if (hours.length === 0 && nominal) {
      const fromNominal = nominalHours(nominal, input.where, maxHours);
      if (typeof fromNominal === 'string') resolved.notes.push(fromNominal);
      else hours = fromNominal;
    }
    if (hours.length === 0) hours = input.subset;
    // The run's events together may name more than one of them may.
    if (hours.length > maxHours) throw tooManyHours("the run's events name", hours.length, input.label, maxHours);
    if (hours.length === 0) resolved.withoutHours.push(input);
    else resolved.reads.push(...hours.map((partitionHour) => ({ pipeline: input.pipeline, partitionHour, readAt })));
  }
  return resolved;
}

/** COMPLETE: the run's reads (its own inputs and those noted for it) recorded, kept pending, or ignored. */
async function completeRun(ctx: EngineContext, sender: string, event: RunEvent): Promise<IngestOutcome> {
  const own = await pipelineInputs(ctx, event);
  return withTransaction(ctx.pool, async (tx) => {
    const noted = await takeNotedRun(tx, event.run.runId, jobOf(event));
    const inputs = withNoted(own, noted);
    if (inputs.length === 0) return ignored("none of its inputs is a pipeline's table");
    const nominal = nominalTimeOf(event) ?? (noted?.nominalStart ? { start: noted.nominalStart, end: noted.nominalEnd } : undefined);
    const resolved = resolveHours(inputs, nominal, event.eventTime, ctx.config.MAX_PARTITIONS);
    const mapping = await findJobMapping(tx, event.job.namespace, event.job.name);
    if (mapping) return recordMapped(tx, ctx.config, sender, event, mapping, resolved);
    return recordProposed(tx, ctx.config, sender, event, resolved);
  });
}

function checkReadsPerEvent(limits: Limits, count: number): void {
  if (count > limits.LINEAGE_READS_PER_HOUR) {
    throw new BackfillError(ErrorCode.BadInput,
      `The event names ${count} read rows, more than a sender may write in an hour (LINEAGE_READS_PER_HOUR, ${limits.LINEAGE_READS_PER_HOUR}); send one event per run, or fewer inputs.`);
  }
}

/** The reads the job's read rule gives the inputs without hours: the N hours up to each pipeline's watermark at the event's time. */
async function inferredReads(tx: PoolClient, inputs: InputRead[], readAt: Date, hoursToWatermark: number): Promise<{ reads: LineageRead[]; unknown: InputRead[] }> {
  const reads: LineageRead[] = [];
  const unknown: InputRead[] = [];
  for (const input of inputs) {
    const through = await findWatermarkAt(tx, input.pipeline, readAt);
    if (!through) {
      unknown.push(input);
      continue;
    }
    for (let back = hoursToWatermark - 1; back >= 0; back -= 1) {
      reads.push({ pipeline: input.pipeline, partitionHour: new Date(through.getTime() - back * HOUR_MS), readAt, inferred: true });
    }
  }
  return { reads, unknown };
}

const labels = (inputs: InputRead[]) => inputs.map((input) => input.label).join(', ');

function withoutHoursReason(inputs: InputRead[], mapping: JobMapping, notes: string[], readAt: Date): string {
  const sources = 'no backfillPartitions facet, no run.facets.nominalTime, no subset facet on its partition column' + (notes.length > 0 ? ` (${notes.join('; ')})` : '');
  const rule = mapping.readsHoursToWatermark
    ? `and its pipeline had no watermark at ${readAt.toISOString()} for the job's read rule to count back from`
    : `and the job's mapping to ${mapping.consumer} declares no read rule (an operator gives one when confirming a job: \`reads <N>h-to-watermark\`)`;
  return `${labels(inputs)} is a pipeline's table, but nothing says which hours the run read: ${sources}, ${rule}`;
}

async function recordMapped(tx: PoolClient, limits: Limits, sender: string, event: RunEvent, mapping: JobMapping, resolved: ResolvedReads): Promise<IngestOutcome> {
  let reads = resolved.reads;
  let withoutHours = resolved.withoutHours;
  if (mapping.readsHoursToWatermark && withoutHours.length > 0) {
    const inferred = await inferredReads(tx, withoutHours, event.eventTime, mapping.readsHoursToWatermark);
    reads = [...reads, ...inferred.reads];
    withoutHours = inferred.unknown;
  }
  if (reads.length === 0) return ignored(withoutHoursReason(withoutHours, mapping, resolved.notes, event.eventTime));
  checkReadsPerEvent(limits, reads.length);
  if (!(await insertSeenEvent(tx, { runId: event.run.runId, eventType: 'COMPLETE', ...jobOf(event), eventTime: event.eventTime }))) return { kind: 'duplicate' };
  await takeReads(tx, limits, sender, reads.length);
  return recorded(tx, event, mapping.consumer, reads, withoutHours.length > 0 ? withoutHoursReason(withoutHours, mapping, resolved.notes, event.eventTime) : undefined);
}

async function recorded(tx: PoolClient, event: RunEvent, consumer: string, reads: LineageRead[], note?: string): Promise<IngestOutcome> {
  const named = await insertReads(tx, consumer, reads.filter((read) => !read.inferred));
  const inferred = await insertReads(tx, consumer, reads.filter((read) => read.inferred));
  await recordSeenOutcome(tx, event.run.runId, 'COMPLETE', 'recorded', named + inferred);
  return { kind: 'recorded', consumer, reads: named + inferred, inferred, ...(note ? { note: `not recorded: ${note}` } : {}) };
}

/** A job no operator has mapped: its reads, with hours or without, pending on its proposal (created if need be). */
async function recordProposed(tx: PoolClient, limits: Limits, sender: string, event: RunEvent, resolved: ResolvedReads): Promise<IngestOutcome> {
  const job = jobOf(event);
  const rows = resolved.reads.length + resolved.withoutHours.length;
  checkReadsPerEvent(limits, rows);
  if (!(await insertSeenEvent(tx, { runId: event.run.runId, eventType: 'COMPLETE', ...job, eventTime: event.eventTime }))) return { kind: 'duplicate' };
  const existing = await lockProposal(tx, job);
  const proposal = existing ? { ...existing, created: false } : await newProposal(tx, limits, sender, job);
  if (proposal.state === 'rejected') {
    await recordSeenOutcome(tx, event.run.runId, 'COMPLETE', 'rejected_job', 0);
    return { kind: 'rejected_job', proposalId: proposal.id };
  }
  await takeReads(tx, limits, sender, rows);
  // Confirmed without a mapping row: a confirmation from before mappings carried a read rule.
  if (proposal.state === 'confirmed' && proposal.consumer) return recorded(tx, event, proposal.consumer, resolved.reads);
  const pending = await insertPendingReads(tx, proposal.id, resolved.reads);
  const withoutHours = await insertPendingReadsWithoutHours(tx, proposal.id,
    resolved.withoutHours.map((input): ReadWithoutHours => ({ pipeline: input.pipeline, readAt: event.eventTime })));
  await recordSeenOutcome(tx, event.run.runId, 'COMPLETE', 'pending', pending + withoutHours);
  if (proposal.created) {
    await recordEvent(tx, { actor: ACTOR, kind: 'lineage_proposed', detail: { proposal: proposal.id, ...job, runId: event.run.runId } });
  }
  return { kind: 'pending', proposalId: proposal.id, created: proposal.created, reads: pending, withoutHours };
}

/** A proposal for a job nobody has proposed yet, unless the sender has as many open as it may (429). */
async function newProposal(tx: PoolClient, limits: Limits, sender: string, job: { jobNamespace: string; jobName: string }): Promise<Awaited<ReturnType<typeof lockOrCreateProposal>>> {
  await lockSenderProposals(tx, sender);
  const open = await countOpenProposals(tx, sender);
  if (open >= limits.LINEAGE_MAX_OPEN_PROPOSALS) {
    throw new BackfillError(ErrorCode.RateLimited,
      `${sender} has ${open} lineage proposals waiting for an operator, as many as a sender may (LINEAGE_MAX_OPEN_PROPOSALS); this event of an unknown job was not recorded. ` +
      'Send it again once an operator has confirmed or rejected some (`/backfill lineage list`).',
      { details: { retryAfterSeconds: PROPOSALS_RETRY_AFTER_SECONDS } });
  }
  return lockOrCreateProposal(tx, { ...job, suggestedName: suggestConsumerName(job.jobName), proposedBy: sender });
}

/** The event's rows out of the sender's hourly bucket, or a 429 saying when they fit again. */
async function takeReads(tx: PoolClient, limits: Limits, sender: string, count: number): Promise<void> {
  const retryAfterSeconds = await takeReadAllowance(tx, sender, count, limits.LINEAGE_READS_PER_HOUR);
  if (retryAfterSeconds > 0) {
    throw new BackfillError(ErrorCode.RateLimited,
      `${sender} has written as many read rows as it may in an hour (LINEAGE_READS_PER_HOUR, ${limits.LINEAGE_READS_PER_HOUR}); this event's ${count} were not recorded. Send it again in ${retryAfterSeconds} s.`,
      { details: { retryAfterSeconds } });
  }
}
