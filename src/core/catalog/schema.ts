import { parseDocument } from 'yaml';
import { z } from 'zod';
import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside } from '../../redaction.js';
import { RETRIGGER_SHAPES, retriggerSchema, retriggerUrlProblems } from '../retrigger/definition.js';
import { escalationPathSchema } from '../announce/escalationPath.js';
import { parseHour } from '../time.js';

// The catalog file: the pipelines, their consumers (owner, kind, dependencies, rule, re-trigger) and who signs
// which report, as YAML an engineer reviews in a pull request. Its fields are the database's columns
// (backfill.pipelines, backfill.consumers, backfill.signers), so what the file says is what a backfill reads.
// The file is the whole catalog: what it leaves out, apply removes (src/core/catalog/plan.ts says when that is
// refused). Every problem is reported at once, each with where it is, what is wrong and what would be right.

const NAME_RULE = 'lowercase letters, digits and _, starting with a letter (e.g. settlement_report)';
const name = z.string().regex(/^[a-z][a-z0-9_]{0,62}$/, `is not a usable name: ${NAME_RULE}`);
const SLACK_USER_RULE = 'a Slack member id, U… or W… (e.g. U07SETTLE; in Slack: the profile, ⋯, Copy member ID)';
const slackUser = z.string().regex(/^[UW][A-Z0-9]{2,}$/, `is not a Slack user id: write ${SLACK_USER_RULE}`);
const sql = z.string().trim().min(1, 'is empty: write the SQL');

/** An hour as the file writes it, kept as one spelling (2026-11-14T23:00Z) so the plan compares like with like. */
function isoHour(hour: Date): string {
  return `${hour.toISOString().slice(0, 13)}:00Z`;
}

const hour = z.string().transform((text, ctx) => {
  try {
    return isoHour(parseHour(text));
  } catch {
    ctx.addIssue({ code: 'custom', message: 'is not a whole UTC hour: write it as 2026-11-14T23:00Z' });
    return z.NEVER;
  }
});

const catalogPipelineSchema = z.strictObject({
  name,
  target_table: z.string().regex(/^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$/, 'is not a schema-qualified table: write schema.table, e.g. warehouse.orders'),
  partition_column: z.string().min(1).default('partition_hour'),
  key_columns: z.array(z.string().min(1)).min(1, 'is empty: name the columns that identify a row'),
  measure_column: z.string().min(1),
  /** INSERT INTO <target> (…) SELECT … for the hour $1: the one write path. */
  step_sql: sql,
  /** One row (rows, total) for the hour $1, cheaper than the step: the preview's estimate. */
  estimate_sql: sql.nullable().default(null),
  source_shards_sql: sql,
  shards_expected: z.number().int().positive().default(1),
  /**
   * The last hour already correct in the table: the normal run starts with the hour after it. Only a start:
   * apply writes it when the pipeline has no watermark yet, and after that the run and backfills move it.
   */
  watermark: hour.nullable().default(null),
});

export const catalogConsumerSchema = z.strictObject({
  name,
  kind: z.enum(['report', 'export', 'model']),
  owner: slackUser,
  /** The pipeline whose table it reads itself; unset when it reads another consumer's output. */
  pipeline: name.nullable().default(null),
  depends_on: z.array(name).default([]),
  /** before: told first and must acknowledge; after: told once the run is done. */
  rule: z.enum(['before', 'after']),
  /** A rank below which it never replays, whatever it depends on (explicit_rank). */
  rank: z.number().int().positive().nullable().default(null),
  retrigger: retriggerSchema,
  /** A report's figure for the date $1: what finance signs and the compare reads. */
  report_total_sql: sql.nullable().default(null),
  /** Whom to tell, and after how long, while the owner has not acknowledged (src/core/announce/escalationPath.ts). */
  escalation: escalationPathSchema.default([]),
});

const catalogSignersSchema = z.strictObject({
  report: name,
  users: z.array(slackUser).min(1, 'is empty: name who may sign, or leave the report out'),
});

const catalogSchema = z.strictObject({
  pipelines: z.array(catalogPipelineSchema).default([]),
  consumers: z.array(catalogConsumerSchema).default([]),
  signers: z.array(catalogSignersSchema).default([]),
});

export type Catalog = z.output<typeof catalogSchema>;
export type CatalogPipeline = Catalog['pipelines'][number];
export type CatalogConsumer = Catalog['consumers'][number];

/** A refusal of the file: every problem found, none of it applied. */
function catalogRefusal(source: string, problems: readonly string[]): BackfillError {
  return new BackfillError(ErrorCode.BadInput,
    `The catalog ${source} was not applied (nothing changed):\n${problems.map((problem) => `  - ${problem}`).join('\n')}`,
    { details: { problems } });
}

/** Where a problem is, as a person finds it in the file: `consumers[1] (payout_export).owner`. */
function placeOf(document: unknown, path: readonly PropertyKey[]): string {
  let current: unknown = document;
  let place = '';
  for (const part of path) {
    place += typeof part === 'number' ? `[${part}]` : `${place ? '.' : ''}${String(part)}`;
    current = current !== null && typeof current === 'object' ? (current as Record<PropertyKey, unknown>)[part] : undefined;
    const named = current !== null && typeof current === 'object' ? (current as { name?: unknown; report?: unknown }) : undefined;
    const label = typeof named?.name === 'string' ? named.name : typeof named?.report === 'string' ? named.report : undefined;
    if (typeof part === 'number' && label) place += ` (${label})`;
  }
  return place || 'the file';
}

/**
 * The file's text as a checked catalog, or a refusal listing every problem. `allowedHosts` is
 * RETRIGGER_ALLOWED_HOSTS where the file is checked (none when not given): a webhook or REST re-trigger to any
 * other host is refused here, before it is stored, and again by the worker when it calls.
 */
export function parseCatalogText(text: string, source: string, allowedHosts: readonly string[] = []): Catalog {
  const document = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (document.errors.length > 0) {
    throw catalogRefusal(source, document.errors.map((error) => `not valid YAML: ${error.message.split('\n')[0] ?? error.message}`));
  }
  const raw: unknown = document.toJS() ?? {};
  const parsed = catalogSchema.safeParse(raw);
  if (!parsed.success) {
    throw catalogRefusal(source, parsed.error.issues.map((issue) => `${placeOf(raw, issue.path)}: ${describeIssue(issue, raw)}`));
  }
  const problems = [...retriggerHostProblems(parsed.data, raw, allowedHosts), ...crossCheck(parsed.data)];
  if (problems.length > 0) throw catalogRefusal(source, problems);
  return parsed.data;
}

function describeIssue(issue: z.core.$ZodIssue, raw: unknown): string {
  const value = issue.path.reduce<unknown>((at, part) => (at !== null && typeof at === 'object' ? (at as Record<PropertyKey, unknown>)[part] : undefined), raw);
  if (issue.code === 'unrecognized_keys') return `has ${issue.keys.map((key) => `"${key}"`).join(', ')}, which the catalog does not know here (a typo?)`;
  if (issue.code === 'invalid_type' && value === undefined) return `is missing (${issue.expected} expected)`;
  if (issue.code === 'invalid_union' && issue.path[issue.path.length - 1] === 'retrigger') return `is not a re-trigger the bot knows: expected ${RETRIGGER_SHAPES}`;
  // The value is repeated only where the rule is about it (a name, an owner): never a header's, which may be a secret,
  // and redacted, since a rule about a URL (a queue's connection) is about a value that may carry a password.
  const quoted = typeof value === 'string' || typeof value === 'number' ? `${quoteOutside(JSON.stringify(value))} ` : '';
  return issue.message.startsWith('is ') ? `${quoted}${issue.message}` : issue.message;
}

/** Every re-trigger URL whose host the deployment does not allow, placed as the schema's problems are. */
function retriggerHostProblems(catalog: Catalog, raw: unknown, allowedHosts: readonly string[]): string[] {
  return catalog.consumers.flatMap((consumer, index) => retriggerUrlProblems(consumer.retrigger, allowedHosts)
    .map(({ path, problem }) => `${placeOf(raw, ['consumers', index, 'retrigger', ...path.split('.')])}: ${problem}`));
}

/** What holds across entries: unique names, known pipelines and consumers, signable reports, no cycle. */
function crossCheck(catalog: Catalog): string[] {
  const problems: string[] = [];
  const pipelines = new Set(catalog.pipelines.map((pipeline) => pipeline.name));
  const consumers = new Map(catalog.consumers.map((consumer) => [consumer.name, consumer]));
  problems.push(...duplicates('pipeline', catalog.pipelines.map((p) => p.name)), ...duplicates('consumer', catalog.consumers.map((c) => c.name)),
    ...duplicates('signers entry for report', catalog.signers.map((s) => s.report)));
  for (const consumer of catalog.consumers) {
    if (consumer.pipeline !== null && !pipelines.has(consumer.pipeline)) {
      problems.push(`consumer ${consumer.name}: pipeline "${consumer.pipeline}" is not declared in the file; declared pipelines: ${[...pipelines].join(', ') || '(none)'}`);
    }
    for (const dependency of consumer.depends_on) {
      if (dependency === consumer.name) problems.push(`consumer ${consumer.name}: depends_on names itself; list only the consumers whose output it reads`);
      else if (!consumers.has(dependency)) problems.push(`consumer ${consumer.name}: depends_on "${dependency}" is not a consumer in the file; consumers: ${[...consumers.keys()].join(', ')}`);
    }
    if (consumer.escalation.length > 0 && consumer.rule !== 'before') {
      problems.push(`consumer ${consumer.name}: escalation is for a consumer whose rule is before: nobody waits for the acknowledgement of one told after the run (remove it, or make the rule before)`);
    }
    if (consumer.report_total_sql !== null && consumer.kind !== 'report') {
      problems.push(`consumer ${consumer.name}: report_total_sql is for reports only; this one is a ${consumer.kind} (remove it, or make the kind report)`);
    }
  }
  for (const entry of catalog.signers) {
    const report = consumers.get(entry.report);
    if (!report || report.kind !== 'report' || report.report_total_sql === null) {
      problems.push(`signers of ${entry.report}: signers sign a report's figure, so ${entry.report} must be a consumer of kind report with report_total_sql in the file`);
    }
    problems.push(...duplicates(`signer of ${entry.report}`, entry.users));
  }
  const cycle = findCycle(catalog.consumers);
  if (cycle) problems.push(`consumers depend on each other in a cycle: ${cycle.join(' → ')}; remove one of these depends_on links so every chain ends`);
  return problems;
}

function duplicates(what: string, names: readonly string[]): string[] {
  const seen = new Set<string>();
  const repeated = new Set(names.filter((item) => seen.has(item) || !seen.add(item)));
  return [...repeated].map((item) => `${what} ${item} is declared more than once; keep one`);
}

/**
 * A cycle of depends_on, as the names around it with the first repeated at the end (a → b → a), or undefined.
 * Depth-first with the path kept, so the cycle is named, not only detected.
 */
function findCycle(consumers: readonly { name: string; depends_on: readonly string[] }[]): string[] | undefined {
  const edges = new Map(consumers.map((consumer) => [consumer.name, consumer.depends_on]));
  const done = new Set<string>();
  const visit = (node: string, path: string[]): string[] | undefined => {
    const at = path.indexOf(node);
    if (at >= 0) return [...path.slice(at), node];
    if (done.has(node)) return undefined;
    for (const next of edges.get(node) ?? []) {
      const cycle = visit(next, [...path, node]);
      if (cycle) return cycle;
    }
    done.add(node);
    return undefined;
  };
  for (const consumer of [...edges.keys()].sort()) {
    const cycle = visit(consumer, []);
    if (cycle) return cycle;
  }
  return undefined;
}
