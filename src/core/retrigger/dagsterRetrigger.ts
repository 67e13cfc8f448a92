import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside, redact } from '../../redaction.js';
import { replayKey, resolveSecret, type ReplayCall, type RetriggerEnvironment } from './call.js';
import {
  BACKFILL_STATUS, BACKFILLS_LOOKED_AT, FIND_BACKFILLS, FIND_RUNS, LAUNCH_BACKFILL, LAUNCH_RUN, PARTITION_TAG, REPLAY_KEY_TAG, RUN_STATUS,
  type Operation,
} from './dagsterOperations.js';
import type { Retrigger } from './definition.js';
import { fieldOf, isSuccess, pollUntil, retryableStatus, sendJson } from './orchestratorHttp.js';
import { partitionKeys } from './partitionKeys.js';

// A re-trigger through Dagster's GraphQL API (POST {url}/graphql), in one of two shapes:
//   - assets: one asset backfill (launchPartitionBackfill) over the corrected partitions;
//   - job: one run of the job per corrected partition (launchRun), the partition in Dagster's dagster/partition tag.
// The partitions are sent as the asset's own keys (partitionKeys.ts), not as ISO hours, which name no partition.
//
// Dagster does not deduplicate a launch, so the bot does: everything it launches carries the replay's key in a tag,
// and every attempt first looks for what an earlier one launched (runsOrError filtered by that tag; the newest
// backfills' tags, since the backfill list cannot be filtered by tag) and launches only what is missing. Then it
// polls until the backfill or every run is in a terminal status.
//
// A refused launch is not an HTTP error: Dagster answers 200 with a PythonError, InvalidSubsetError,
// UnauthorizedError, … result, and a malformed operation gets `errors` (with 400 from Dagster's webserver, with
// 200 from some servers in front of it). Both are failures, quoting Dagster's message through quoteOutside.

type DagsterRetrigger = Extract<Retrigger, { kind: 'dagster' }>;

const DEFAULT_POLL_MS = 5_000;
const DEFAULT_TIMEOUT_MS = 60 * 60_000;

// BulkActionStatus as the schema excerpt names it, with COMPLETED_SUCCESS and COMPLETED_FAILED, which later
// Dagster versions add (dagster_graphql/schema/backfill.py). Only these are ever repeated in a message.
const BACKFILL_SUCCEEDED = ['COMPLETED', 'COMPLETED_SUCCESS'];
const BACKFILL_FAILED = ['FAILED', 'CANCELED', 'COMPLETED_FAILED'];
const BACKFILL_UNDER_WAY = ['REQUESTED', 'CANCELING'];
// RunStatus, likewise.
const RUN_SUCCEEDED = ['SUCCESS'];
const RUN_FAILED = ['FAILURE', 'CANCELED'];
const RUN_UNDER_WAY = ['QUEUED', 'NOT_STARTED', 'MANAGED', 'STARTING', 'STARTED', 'CANCELING'];

const known = (lists: string[][], value: unknown): string | undefined => lists.flat().find((status) => status === value);

export interface DagsterOutcome {
  url: string;
  /** The backfill, or the runs by partition key, that the replay waited for. */
  backfillId?: string;
  runs?: Record<string, string>;
  /** Whether an earlier attempt had launched it (all of it, for runs). */
  found: boolean;
  status: string;
}

interface DagsterApi {
  endpoint: string;
  base: string;
  headers: Record<string, string>;
  env: RetriggerEnvironment;
  consumer: string;
}

function apiOf(retrigger: DagsterRetrigger, call: ReplayCall, env: RetriggerEnvironment): DagsterApi {
  const base = retrigger.url.replace(/\/+$/, '');
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
  for (const [name, value] of Object.entries(retrigger.headers ?? {})) {
    headers[name.toLowerCase()] = typeof value === 'string' ? value : resolveSecret(env, call.consumer, value);
  }
  return { endpoint: `${base}/graphql`, base, headers, env, consumer: call.consumer };
}

/** Sends one operation; returns its `data`, or fails on `errors` (whatever the HTTP status) and on a non-2xx. */
async function graphql(api: DagsterApi, operation: Operation, variables: Record<string, unknown>): Promise<unknown> {
  const what = (url: string) => `Dagster's ${operation.name} for ${api.consumer} at ${url}`;
  const answer = await sendJson(api.endpoint, {
    method: 'POST', headers: api.headers, timeoutMs: api.env.config.WEBHOOK_TIMEOUT_MS,
    body: JSON.stringify({ query: operation.query, variables, operationName: operation.name }),
  }, what, api.env);
  const errors = fieldOf(answer.json, 'errors');
  if (Array.isArray(errors) && errors.length > 0) {
    const messages = errors.map((error) => fieldOf(error, 'message')).filter((message): message is string => typeof message === 'string');
    throw new BackfillError(ErrorCode.StepFailed,
      `${what(quoteOutside(api.endpoint))} answered ${answer.status} with GraphQL errors: ${quoteOutside(messages.join('; ') || answer.text)}`,
      { retryable: retryableStatus(answer.status) });
  }
  if (!isSuccess(answer.status)) {
    throw new BackfillError(ErrorCode.StepFailed, `${what(quoteOutside(api.endpoint))} answered ${answer.status}${answer.text ? `: ${quoteOutside(answer.text)}` : ''}`,
      { retryable: retryableStatus(answer.status) });
  }
  return fieldOf(answer.json, 'data');
}

/** A union result: its __typename, and the object. A missing one is an answer Dagster's schema does not give. */
function resultOf(data: unknown, field: string, operation: Operation): { type: string; value: unknown } {
  const value = fieldOf(data, field);
  const type = fieldOf(value, '__typename');
  if (typeof type !== 'string') {
    throw new BackfillError(ErrorCode.StepFailed, `Dagster's ${operation.name} answered without a ${field} result: is the url Dagster's webserver?`, { retryable: false });
  }
  return { type, value };
}

/** A result that is one of the error types: its type and Dagster's message, quoted. */
function refusal(result: { type: string; value: unknown }): string {
  const message = fieldOf(result.value, 'message');
  return `${quoteOutside(result.type, 60)}${typeof message === 'string' ? `: ${quoteOutside(message)}` : ''}`;
}

function tagsOf(value: unknown): Map<string, string> {
  const tags = fieldOf(value, 'tags');
  const pairs = Array.isArray(tags) ? tags.map((tag) => [fieldOf(tag, 'key'), fieldOf(tag, 'value')]) : [];
  return new Map(pairs.filter((pair): pair is [string, string] => typeof pair[0] === 'string' && typeof pair[1] === 'string'));
}

function resultsOf(result: { type: string; value: unknown }): unknown[] {
  const results = fieldOf(result.value, 'results');
  return Array.isArray(results) ? results : [];
}

/** Launches (or finds) what the catalog names and waits for it to end. */
export async function callDagster(retrigger: DagsterRetrigger, call: ReplayCall, env: RetriggerEnvironment): Promise<DagsterOutcome> {
  const api = apiOf(retrigger, call, env);
  const keys = partitionKeys(call.partitions, retrigger.partitionFormat, retrigger.timezone);
  const bounds = { pollMs: retrigger.pollMs ?? DEFAULT_POLL_MS, timeoutMs: retrigger.timeoutMs ?? DEFAULT_TIMEOUT_MS };
  const outcome = retrigger.job
    ? await replayAsRuns(api, retrigger.job, call, keys, bounds)
    : await replayAsBackfill(api, retrigger.assets ?? [], call, keys, bounds);
  return { url: redact(api.base), ...outcome };
}

// ---- assets: one backfill -----------------------------------------------------------------------------------

async function findBackfill(api: DagsterApi, key: string): Promise<string | undefined> {
  const result = resultOf(await graphql(api, FIND_BACKFILLS, { limit: BACKFILLS_LOOKED_AT }), 'partitionBackfillsOrError', FIND_BACKFILLS);
  if (result.type !== 'PartitionBackfills') {
    throw new BackfillError(ErrorCode.StepFailed, `Dagster did not list its backfills for ${api.consumer}'s replay: ${refusal(result)}`, { retryable: true });
  }
  const mine = resultsOf(result).find((backfill) => tagsOf(backfill).get(REPLAY_KEY_TAG) === key);
  const id = fieldOf(mine, 'id');
  return typeof id === 'string' ? id : undefined;
}

async function replayAsBackfill(api: DagsterApi, assets: readonly string[], call: ReplayCall, keys: string[], bounds: { pollMs: number; timeoutMs: number }): Promise<Omit<DagsterOutcome, 'url'>> {
  const key = replayKey(call);
  const earlier = await findBackfill(api, key);
  let backfillId = earlier;
  if (backfillId === undefined) {
    const result = resultOf(await graphql(api, LAUNCH_BACKFILL, {
      backfillParams: {
        partitionNames: keys,
        assetSelection: assets.map((asset) => ({ path: asset.split('/') })),
        tags: [{ key: REPLAY_KEY_TAG, value: key }],
      },
    }), 'launchPartitionBackfill', LAUNCH_BACKFILL);
    const id = fieldOf(result.value, 'backfillId');
    if (result.type !== 'LaunchBackfillSuccess' || typeof id !== 'string') {
      throw new BackfillError(ErrorCode.StepFailed, `Dagster refused the backfill of ${assets.join(', ')} for ${call.consumer} (partitions ${keys[0] ?? ''} … ${keys.at(-1) ?? ''}): ${refusal(result)}`, { retryable: false });
    }
    backfillId = id;
  }
  const status = await waitForBackfill(api, backfillId, call, bounds);
  return { backfillId: quoteOutside(backfillId, 100), found: earlier !== undefined, status };
}

/** The failed partitions an asset backfill reports (its status alone says COMPLETED when some failed, in older Dagster). */
function failedPartitions(backfill: unknown): number {
  const statuses = fieldOf(fieldOf(backfill, 'assetBackfillData'), 'assetBackfillStatuses');
  if (!Array.isArray(statuses)) return 0;
  return statuses.reduce((sum: number, status) => {
    const count = fieldOf(status, 'numPartitionsFailed');
    return sum + (typeof count === 'number' ? count : fieldOf(status, 'failed') === true ? 1 : 0);
  }, 0);
}

async function waitForBackfill(api: DagsterApi, backfillId: string, call: ReplayCall, bounds: { pollMs: number; timeoutMs: number }): Promise<string> {
  const named = `${call.consumer}'s Dagster backfill ${quoteOutside(backfillId, 100)}`;
  let last: string | undefined;
  const end = await pollUntil(bounds, async () => {
    const result = resultOf(await graphql(api, BACKFILL_STATUS, { backfillId }), 'partitionBackfillOrError', BACKFILL_STATUS);
    if (result.type !== 'PartitionBackfill') {
      // Gone: nobody can say whether it ran. A PythonError may pass: the retry finds the backfill by its tag again.
      throw new BackfillError(ErrorCode.StepFailed, `Dagster did not answer the status of ${named}: ${refusal(result)}`, { retryable: result.type !== 'BackfillNotFoundError' });
    }
    last = known([BACKFILL_SUCCEEDED, BACKFILL_FAILED, BACKFILL_UNDER_WAY], fieldOf(result.value, 'status'));
    const failed = failedPartitions(result.value);
    if ((last !== undefined && BACKFILL_FAILED.includes(last)) || (last !== undefined && BACKFILL_SUCCEEDED.includes(last) && failed > 0)) {
      const error = fieldOf(fieldOf(result.value, 'error'), 'message');
      throw new BackfillError(ErrorCode.StepFailed,
        `${named} ended ${last}${failed > 0 ? ` with ${failed} failed partition${failed === 1 ? '' : 's'}` : ''}${typeof error === 'string' ? `: ${quoteOutside(error)}` : ''}`,
        { retryable: false });
    }
    return last !== undefined && BACKFILL_SUCCEEDED.includes(last) ? last : undefined;
  });
  if (end === 'timed out') {
    throw new BackfillError(ErrorCode.StepFailed,
      `${named} is still ${last ?? 'in an unrecognised status'} after ${bounds.timeoutMs} ms; a retry waits for the same backfill, or raise timeoutMs in ${call.consumer}'s retrigger`,
      { retryable: true });
  }
  return end;
}

// ---- job: one run per partition ----------------------------------------------------------------------------

type JobTarget = NonNullable<DagsterRetrigger['job']>;

/** The runs an earlier attempt launched, by partition key: the newest run of each (a re-execution copies its tags). */
async function findRuns(api: DagsterApi, key: string): Promise<Map<string, string>> {
  const result = resultOf(await graphql(api, FIND_RUNS, { filter: { tags: [{ key: REPLAY_KEY_TAG, value: key }] } }), 'runsOrError', FIND_RUNS);
  if (result.type !== 'Runs') {
    throw new BackfillError(ErrorCode.StepFailed, `Dagster did not list the runs of ${api.consumer}'s replay: ${refusal(result)}`, { retryable: true });
  }
  const runs = new Map<string, string>();
  for (const run of resultsOf(result)) {
    const partition = tagsOf(run).get(PARTITION_TAG);
    const runId = fieldOf(run, 'runId');
    if (partition !== undefined && typeof runId === 'string' && !runs.has(partition)) runs.set(partition, runId);
  }
  return runs;
}

async function replayAsRuns(api: DagsterApi, job: JobTarget, call: ReplayCall, keys: string[], bounds: { pollMs: number; timeoutMs: number }): Promise<Omit<DagsterOutcome, 'url'>> {
  const key = replayKey(call);
  const runs = await findRuns(api, key);
  const earlier = keys.every((partition) => runs.has(partition));
  for (const partition of keys.filter((candidate) => !runs.has(candidate))) {
    const result = resultOf(await graphql(api, LAUNCH_RUN, {
      executionParams: {
        selector: { jobName: job.name, repositoryName: job.repository, repositoryLocationName: job.location },
        executionMetadata: { tags: [{ key: PARTITION_TAG, value: partition }, { key: REPLAY_KEY_TAG, value: key }] },
      },
    }), 'launchRun', LAUNCH_RUN);
    const runId = fieldOf(fieldOf(result.value, 'run'), 'runId');
    if (result.type !== 'LaunchRunSuccess' || typeof runId !== 'string') {
      throw new BackfillError(ErrorCode.StepFailed, `Dagster refused the run of ${job.name} for ${call.consumer}'s partition ${partition}: ${refusal(result)}`, { retryable: false });
    }
    runs.set(partition, runId);
  }
  const waiting = new Map(keys.map((partition) => [partition, runs.get(partition) ?? '']));
  const last = new Map<string, string | undefined>();
  const end = await pollUntil(bounds, async () => {
    for (const [partition, runId] of waiting) {
      const result = resultOf(await graphql(api, RUN_STATUS, { runId }), 'runOrError', RUN_STATUS);
      const named = `${call.consumer}'s Dagster run ${quoteOutside(runId, 100)} (partition ${partition})`;
      if (result.type !== 'Run') {
        throw new BackfillError(ErrorCode.StepFailed, `Dagster did not answer the status of ${named}: ${refusal(result)}`, { retryable: result.type !== 'RunNotFoundError' });
      }
      const status = known([RUN_SUCCEEDED, RUN_FAILED, RUN_UNDER_WAY], fieldOf(result.value, 'status'));
      if (status !== undefined && RUN_FAILED.includes(status)) throw new BackfillError(ErrorCode.StepFailed, `${named} ended ${status}`, { retryable: false });
      if (status !== undefined && RUN_SUCCEEDED.includes(status)) waiting.delete(partition);
      else last.set(partition, status);
    }
    return waiting.size === 0 ? 'SUCCESS' : undefined;
  });
  if (end === 'timed out') {
    const [partition, runId] = [...waiting][0] ?? ['', ''];
    throw new BackfillError(ErrorCode.StepFailed,
      `${call.consumer}'s Dagster run ${quoteOutside(runId, 100)} (partition ${partition}) is still ${last.get(partition) ?? 'in an unrecognised status'} after ${bounds.timeoutMs} ms, with ${waiting.size} of ${keys.length} runs unfinished; a retry waits for the same runs, or raise timeoutMs in ${call.consumer}'s retrigger`,
      { retryable: true });
  }
  return { runs: Object.fromEntries([...runs].filter(([partition]) => keys.includes(partition)).map(([partition, runId]) => [partition, quoteOutside(runId, 100)])), found: earlier, status: end };
}
