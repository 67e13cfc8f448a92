import { z } from 'zod';
import { BackfillError, ErrorCode } from '../../errors.js';

// The part of an OpenLineage RunEvent (https://openlineage.io/spec/2-0-2/OpenLineage.json) the bot reads, checked
// with zod. Unknown fields and facets are allowed through untouched: producers add their own. What is read:
//   eventType, eventTime, run.runId, run.facets.nominalTime, job.namespace/name, inputs[].namespace/name, and
//   the custom input facet `backfillPartitions` ({ hours: [ISO 8601 times of whole hours] }), defined here.

/** The custom dataset facet naming the partition hours a job read (inbound) or a backfill wrote (outbound). */
const PARTITIONS_FACET = 'backfillPartitions';
/**
 * The most hours the facet may list (a month), checked while parsing so a body cannot make a huge array; the
 * bound that applies is hoursRead's `maxHours` (MAX_PARTITIONS), checked before any hour is made.
 */
const MAX_HOURS_PER_INPUT = 744;
const MAX_INPUTS = 100;

const isoTime = z.iso.datetime({ offset: true, error: 'must be an ISO 8601 time with a zone, e.g. 2026-11-15T05:00:00Z' });

const partitionsFacet = z.looseObject({
  hours: z.array(isoTime).min(1, 'must name at least one hour').max(MAX_HOURS_PER_INPUT, `may name at most ${MAX_HOURS_PER_INPUT} hours`),
});

const inputDataset = z.looseObject({
  namespace: z.string().min(1, 'must not be empty'),
  name: z.string().min(1, 'must not be empty'),
  facets: z.looseObject({ [PARTITIONS_FACET]: partitionsFacet.optional() }).optional(),
});

const runEventSchema = z.looseObject({
  eventType: z.enum(['START', 'RUNNING', 'COMPLETE', 'ABORT', 'FAIL', 'OTHER'], 'must be one of START, RUNNING, COMPLETE, ABORT, FAIL, OTHER').optional(),
  eventTime: isoTime,
  producer: z.string().min(1, 'must name the producer (a URI)'),
  schemaURL: z.string().min(1, 'must be the OpenLineage schema URL'),
  run: z.looseObject({
    runId: z.uuid('must be a UUID'),
    facets: z.looseObject({
      nominalTime: z.looseObject({ nominalStartTime: isoTime, nominalEndTime: isoTime.optional() }).optional(),
    }).optional(),
  }),
  job: z.looseObject({
    namespace: z.string().min(1, 'must not be empty').max(200, 'may be at most 200 characters'),
    name: z.string().min(1, 'must not be empty').max(500, 'may be at most 500 characters'),
  }),
  inputs: z.array(inputDataset).max(MAX_INPUTS, `may list at most ${MAX_INPUTS} datasets`).default([]),
});
export type RunEvent = z.output<typeof runEventSchema>;

/** `run.runId`, `inputs[0].facets.backfillPartitions.hours[2]`: where in the event a problem is. */
function pathOf(path: readonly PropertyKey[]): string {
  return path.reduce<string>((text, key) => (typeof key === 'number' ? `${text}[${key}]` : `${text}${text ? '.' : ''}${String(key)}`), '') || 'the body';
}

/** The event, or a BadInput error naming every field that is wrong (the HTTP answer's text). */
export function parseRunEvent(body: unknown): RunEvent {
  const parsed = runEventSchema.safeParse(body);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.slice(0, 10).map((issue) =>
    `${pathOf(issue.path)} ${issue.code === 'invalid_type' && issue.input === undefined ? 'is missing' : issue.message}`);
  throw new BackfillError(ErrorCode.BadInput, `Not an OpenLineage RunEvent the bot can read: ${problems.join('; ')}.`);
}

/**
 * Whether a dataset name is this table: `warehouse.orders` is the table `warehouse.orders`, and so is
 * `harborlight.warehouse.orders` (OpenLineage's PostgreSQL naming, database.schema.table). Case is ignored,
 * as PostgreSQL folds unquoted names.
 */
export function namesTable(datasetName: string, targetTable: string): boolean {
  const name = datasetName.toLowerCase();
  const table = targetTable.replaceAll('"', '').toLowerCase();
  return name === table || name.endsWith(`.${table}`);
}

/** A consumer name for an unknown job: its name, lower-cased, with anything else than a-z, 0-9 and _ as _. */
export function suggestConsumerName(jobName: string): string {
  const cleaned = jobName.toLowerCase().replace(/[^a-z0-9_]+/g, '_').replace(/^_+|_+$/g, '');
  const named = /^[a-z]/.test(cleaned) ? cleaned : `job_${cleaned}`;
  return named.slice(0, 63).replace(/_+$/, '') || 'lineage_job';
}
