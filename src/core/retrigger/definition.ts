import { z } from 'zod';
import { BackfillError, ErrorCode } from '../../errors.js';
import { isTimeZone, partitionFormatProblem } from './partitionKeys.js';
import { TEMPLATE_NAMES, templateNamesIn } from './templates.js';
import { queueHostProblem, urlProblem, urlShapeProblem } from './urlPolicy.js';

// What a re-trigger is: how a consumer is re-run after its partitions changed. Teams re-run their readers in
// these ways: SQL in the warehouse, a signed webhook, a job on the consumer's own BullMQ queue (for consumers with
// workers of their own), an Airflow 3 DAG run or a Dagster backfill or run (each spoken in its own API, with its
// own authentication and its own way of telling a retry from a second run), or any other orchestrator's REST API
// (start a run with the partitions as its configuration, and wait for its end state when the API says how). The
// same schema checks a stored definition before a replay and the catalog file before it is applied
// (src/core/catalog/schema.ts), so neither can hold what the other would refuse.

/**
 * A secret is named, never written: `{env: RETRIGGER_SECRET_…}` is read from the worker's environment when the
 * replay runs. Only that prefix, so that whoever may apply the catalog cannot send the bot's own credentials
 * (DATABASE_URL, SLACK_BOT_TOKEN) to a URL of their choosing.
 */
const secretRefSchema = z.strictObject({
  env: z.string().regex(/^RETRIGGER_SECRET_[A-Z0-9_]+$/,
    'names an environment variable, which must start with RETRIGGER_SECRET_ (e.g. RETRIGGER_SECRET_ORCH_TOKEN)'),
});
export type SecretRef = z.infer<typeof secretRefSchema>;

// Header names that carry credentials: their value must be a secret reference, not text in the catalog.
const CREDENTIAL_HEADER = /^(authorization|proxy-authorization|cookie)$|token|secret|api[-_]?key|password/i;

const headersSchema = z.record(z.string().regex(/^[A-Za-z0-9-]+$/, 'is not an HTTP header name'), z.union([z.string(), secretRefSchema]))
  .superRefine((headers, issue) => {
    for (const [name, value] of Object.entries(headers)) {
      if (typeof value === 'string' && CREDENTIAL_HEADER.test(name)) {
        issue.addIssue({ code: 'custom', path: [name], message: `carries a credential: write it as {env: RETRIGGER_SECRET_…} and set that variable on the workers; secrets are never stored in the catalog` });
      }
    }
  });

/** Placeholders a template may use; refusing an unknown one now beats sending "{{partiton}}" to an orchestrator. */
function knownPlaceholders(allowed: readonly string[]) {
  return (value: unknown, issue: z.RefinementCtx) => {
    for (const name of templateNamesIn(value)) {
      if (!allowed.includes(name)) issue.addIssue({ code: 'custom', message: `uses {{${name}}}; the placeholders are ${allowed.map((n) => `{{${n}}}`).join(', ')}` });
    }
  };
}

const positiveMs = z.number().int().positive();

// How often and how long an orchestrator's run is watched. Bounded: a poll every millisecond would hammer the
// orchestrator, and a wait of years would hold the step (and the backfill) for ever.
const pollMs = z.number().int().min(10, 'is below 10 ms: poll every 10 ms or more (e.g. 5000)').max(600_000, 'is above 10 minutes: poll at least every 600000 ms');
const timeoutMs = z.number().int().min(100, 'is below 100 ms').max(86_400_000, 'is above 24 hours: a replay waits at most 86400000 ms');

/**
 * A URL the bot calls: http(s), no credentials, the host written out (urlPolicy.ts). The hosts allowed are the
 * deployment's, not the schema's: the catalog checks them with retriggerUrlProblems, the worker when it calls.
 */
const remoteUrl = z.string().superRefine((value, issue) => {
  const problem = urlShapeProblem(value);
  if (problem) issue.addIssue({ code: 'custom', message: problem });
});

const restStatusSchema = z.strictObject({
  /** GET until the run ends; {{run_id}} is the run the POST started. */
  url: remoteUrl.superRefine(knownPlaceholders([...TEMPLATE_NAMES, 'run_id'])),
  /** Where the run's state is in the status answer, as a dotted path (`state`, `data.run.status`). */
  field: z.string().min(1),
  success: z.array(z.string().min(1)).min(1),
  failure: z.array(z.string().min(1)).min(1),
  /** Where the run's id is in the POST's answer; without it, the idempotency key names the run. */
  runIdField: z.string().min(1).optional(),
  pollMs: positiveMs.optional(),
  timeoutMs: positiveMs.optional(),
});

/** An Airflow 3 deployment's DAG, triggered through its public REST API (airflowRetrigger.ts). */
const airflowSchema = z.strictObject({
  kind: z.literal('airflow'),
  /** The API server's address, e.g. https://airflow.example.com: the bot calls {url}/auth/token and {url}/api/v2/…. */
  url: remoteUrl,
  /** Airflow's own rule for a DAG id: letters, digits, `_`, `.` and `-`, at most 250. */
  dagId: z.string().regex(/^[A-Za-z0-9_.-]{1,250}$/, "is not an Airflow dag_id (letters, digits, '_', '.', '-', at most 250)"),
  /** Who the bot logs in as at POST /auth/token: a name written out, or {env: RETRIGGER_SECRET_…}. */
  username: z.union([z.string().min(1), secretRefSchema]),
  password: secretRefSchema,
  /**
   * The run's logical_date: none (null, Airflow 3's manual run; a DAG may run any number of them), or the first
   * or last corrected hour, for a DAG whose tasks read the hour from it.
   */
  logicalDate: z.enum(['first_partition', 'last_partition']).nullable().optional(),
  pollMs: pollMs.optional(),
  timeoutMs: timeoutMs.optional(),
});

/** A Dagster asset's partition key format, as Dagster writes it: strftime directives (partitionKeys.ts). */
const partitionFormatSchema = z.string().min(1).superRefine((value, issue) => {
  const problem = partitionFormatProblem(value);
  if (problem) issue.addIssue({ code: 'custom', message: problem });
});

/** An asset key as Dagster's UI writes it, path parts joined by `/` (warehouse/settlement_report). */
const assetKeySchema = z.string().regex(/^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/, 'is not an asset key: its path parts joined by "/", e.g. warehouse/settlement_report');

/** A Dagster deployment: a backfill of assets (launchPartitionBackfill) or runs of a job (launchRun), dagsterRetrigger.ts. */
const dagsterSchema = z.strictObject({
  kind: z.literal('dagster'),
  /** The webserver's address (Dagster+: https://<org>.dagster.cloud/<deployment>); GraphQL is {url}/graphql. */
  url: remoteUrl,
  /** A backfill of these assets over the corrected partitions. */
  assets: z.array(assetKeySchema).min(1).optional(),
  /** Or one run of this job per corrected partition, the partition in the run's dagster/partition tag. */
  job: z.strictObject({
    name: z.string().min(1),
    location: z.string().min(1),
    repository: z.string().min(1).default('__repository__'),
  }).optional(),
  /** How the asset writes its partition keys: "%Y-%m-%d-%H:%M" for HourlyPartitionsDefinition's default. */
  partitionFormat: partitionFormatSchema,
  /** The partitions definition's timezone (an IANA name); its keys are local times there. Default UTC. */
  timezone: z.string().refine(isTimeZone, 'is not an IANA time zone (e.g. UTC, Europe/Berlin)').optional(),
  /** Dagster+ takes its API token in a header: {Dagster-Cloud-Api-Token: {env: RETRIGGER_SECRET_…}}. */
  headers: headersSchema.optional(),
  pollMs: pollMs.optional(),
  timeoutMs: timeoutMs.optional(),
}).superRefine((value, issue) => {
  if ((value.assets === undefined) === (value.job === undefined)) {
    issue.addIssue({ code: 'custom', path: [value.job ? 'job' : 'assets'], message: 'names either assets (a backfill of those assets) or job (runs of that job), not both and not neither' });
  }
});

const queueConnectionSchema = z.union([
  z.literal('default'),
  z.string().refine((value) => {
    try {
      const url = new URL(value);
      return ['redis:', 'rediss:', 'postgres:', 'postgresql:'].includes(url.protocol) && url.password === '';
    } catch {
      return false;
    }
  }, 'is "default" (the bot\'s own queue backend), a redis:// or postgres:// URL without a password, or {env: RETRIGGER_SECRET_…} for one with'),
  secretRefSchema,
]);

export const retriggerSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('sql'), statements: z.array(z.string().min(1)).min(1) }),
  z.object({ kind: z.literal('webhook'), url: remoteUrl }),
  z.strictObject({
    kind: z.literal('bullmq'),
    queue: z.string().regex(/^[A-Za-z0-9_.-]{1,100}$/, 'is not a queue name (letters, digits, _ . -)'),
    jobName: z.string().min(1),
    connection: queueConnectionSchema.optional(),
    /** The consumer's key prefix on Redis (BullMQ's default is "bull"), or on PostgreSQL its schema bullmq_<prefix>. */
    prefix: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, 'is not a queue prefix (letters, digits, _ and -)').optional(),
    /** Wait for the consumer's worker to finish the job; its failure fails the replay. */
    wait: z.boolean().optional(),
    pollMs: positiveMs.optional(),
    timeoutMs: positiveMs.optional(),
  }),
  z.strictObject({
    kind: z.literal('rest'),
    url: remoteUrl.superRefine(knownPlaceholders(TEMPLATE_NAMES)),
    method: z.enum(['POST', 'PUT']).optional(),
    /** The JSON sent; a string that is exactly "{{partitions}}" becomes the list itself. Default: {conf: {…}}. */
    body: z.json().superRefine(knownPlaceholders(TEMPLATE_NAMES)).optional(),
    headers: headersSchema.optional(),
    status: restStatusSchema.optional(),
  }),
  airflowSchema,
  dagsterSchema,
]);
export type Retrigger = z.infer<typeof retriggerSchema>;
export type RemoteRetrigger = Exclude<Retrigger, { kind: 'sql' }>;

export const RETRIGGER_SHAPES = '{kind: sql, statements: […]}, {kind: webhook, url}, {kind: bullmq, queue, jobName, …}, {kind: airflow, url, dagId, username, password, …}, {kind: dagster, url, assets or job, partitionFormat, …} or {kind: rest, url, …}';

export function parseRetrigger(consumer: string, value: unknown): Retrigger {
  const parsed = retriggerSchema.safeParse(value);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    const where = first && first.path.length > 0 ? ` (${first.path.join('.')}: ${first.message})` : '';
    throw new BackfillError(ErrorCode.BadInput, `consumer ${consumer} has an unusable retrigger definition${where}: expected ${RETRIGGER_SHAPES}`);
  }
  return parsed.data;
}

/**
 * The URLs of a re-trigger (a webhook's, an orchestrator's, a REST call's and its status, a queue's connection) whose hosts
 * RETRIGGER_ALLOWED_HOSTS does not allow, each with its place in the
 * definition and a sentence that never repeats a credential: what the catalog refuses besides the schema's checks.
 */
export function retriggerUrlProblems(retrigger: Retrigger, allowedHosts: readonly string[]): { path: string; problem: string }[] {
  const urls = retrigger.kind === 'webhook' || retrigger.kind === 'airflow' || retrigger.kind === 'dagster' ? [{ path: 'url', url: retrigger.url }]
    : retrigger.kind === 'rest' ? [{ path: 'url', url: retrigger.url }, ...(retrigger.status ? [{ path: 'status.url', url: retrigger.status.url }] : [])]
    : [];
  const problems = urls.flatMap(({ path, url }) => {
    const problem = urlProblem(url, allowedHosts);
    return problem ? [{ path, problem }] : [];
  });
  // A queue's own connection written out (a secret one is checked when the worker uses it).
  const queue = retrigger.kind === 'bullmq' && typeof retrigger.connection === 'string' && retrigger.connection !== 'default'
    ? queueHostProblem(retrigger.connection, allowedHosts) : undefined;
  return queue ? [...problems, { path: 'connection', problem: queue }] : problems;
}
