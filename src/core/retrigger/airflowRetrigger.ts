import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside, redact } from '../../redaction.js';
import { airflowDetail, airflowToken, type AirflowLogin } from './airflowAuth.js';
import { replayKey, resolveSecret, type ReplayCall, type RetriggerEnvironment } from './call.js';
import type { Retrigger } from './definition.js';
import { fieldOf, isSuccess, pollUntil, retryableStatus, sendJson, type JsonAnswer } from './orchestratorHttp.js';
import type { NameOfCall } from './urlPolicy.js';

// A re-trigger as an Airflow 3 DAG run, through Airflow's public REST API as its OpenAPI document defines it
// (schemas/airflow/v2-rest-api-excerpt.yaml):
//   - POST {url}/api/v2/dags/{dag_id}/dagRuns with a TriggerDAGRunPostBody: `dag_run_id` is the replay's key,
//     `logical_date` is there (the schema requires it; null unless the catalog says an hour), `conf` holds the
//     partitions. Airflow ignores an Idempotency-Key; a run id it already has is refused with 409, so a retried
//     step (whose first answer was lost) finds the run its first attempt started instead of starting a second.
//   - GET …/dagRuns/{dag_run_id} until its state is success or failed: the run is named by the bot's own key, so
//     the poll never depends on reading Airflow's answer for an id.
//   - a JWT from POST {url}/auth/token (airflowAuth.ts), kept per worker, renewed before it expires and once when
//     Airflow answers 401.
// Airflow's answers are outside text: its `detail` is quoted through quoteOutside (redacted, bounded), and a run's
// state is shown only when it is one DagRunState names.

type AirflowRetrigger = Extract<Retrigger, { kind: 'airflow' }>;

const DEFAULT_POLL_MS = 5_000;
const DEFAULT_TIMEOUT_MS = 60 * 60_000;

/** DagRunState (schemas/airflow/v2-rest-api-excerpt.yaml): the only states a message repeats. */
const DAG_RUN_STATES = ['queued', 'running', 'success', 'failed'] as const;
type DagRunState = (typeof DAG_RUN_STATES)[number];

export interface AirflowOutcome {
  url: string;
  dagId: string;
  dagRunId: string;
  /** started: this attempt's POST made the run; found: Airflow had it already (409), from an earlier attempt. */
  run: 'started' | 'found';
  state: 'success';
}

/** One Airflow deployment as one replay talks to it: where, as whom, with the token this worker holds. */
interface AirflowApi {
  base: string;
  login: AirflowLogin;
  env: RetriggerEnvironment;
}

function apiOf(retrigger: AirflowRetrigger, call: ReplayCall, env: RetriggerEnvironment): AirflowApi {
  const base = retrigger.url.replace(/\/+$/, '');
  const username = typeof retrigger.username === 'string' ? retrigger.username : resolveSecret(env, call.consumer, retrigger.username);
  const source = typeof retrigger.username === 'string'
    ? `the username in the catalog and ${retrigger.password.env}`
    : `${retrigger.username.env} and ${retrigger.password.env}`;
  return {
    base, env,
    login: { tokenUrl: `${base}/auth/token`, username, password: resolveSecret(env, call.consumer, retrigger.password), source, consumer: call.consumer },
  };
}

/**
 * Calls the API with this worker's token; on a 401, once more with a new one (the token expired early, or the
 * API server's secret changed). A new token refused too is an answer: the user may not do this.
 */
async function authorized(api: AirflowApi, url: string, method: 'GET' | 'POST', body: unknown, what: NameOfCall): Promise<JsonAnswer> {
  const send = async (token: string) => sendJson(url, {
    method,
    headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
    body: body === undefined ? undefined : JSON.stringify(body),
    timeoutMs: api.env.config.WEBHOOK_TIMEOUT_MS,
  }, what, api.env);
  const token = await airflowToken(api.login, api.env);
  const answer = await send(token);
  if (answer.status !== 401) return answer;
  const renewed = await send(await airflowToken(api.login, api.env, token));
  if (renewed.status === 401) {
    throw new BackfillError(ErrorCode.Config,
      `${what(quoteOutside(url))} refused a token Airflow had just issued (401: ${airflowDetail(renewed)}): check that the user in ${api.login.source} may use the API`,
      { retryable: false });
  }
  return renewed;
}

function refuse(what: NameOfCall, url: string, answer: JsonAnswer): never {
  throw new BackfillError(ErrorCode.StepFailed, `${what(quoteOutside(url))} answered ${answer.status}: ${airflowDetail(answer)}`, { retryable: retryableStatus(answer.status) });
}

/** The TriggerDAGRunPostBody: every field the schema knows and none it does not (additionalProperties: false). */
function triggerBody(retrigger: AirflowRetrigger, call: ReplayCall): Record<string, unknown> {
  const partitions = call.partitions.map((hour) => hour.toISOString());
  const logicalDate = retrigger.logicalDate === 'first_partition' ? partitions[0]
    : retrigger.logicalDate === 'last_partition' ? partitions.at(-1) : undefined;
  return {
    dag_run_id: replayKey(call),
    logical_date: logicalDate ?? null,
    conf: { backfill_id: call.backfillId, consumer: call.consumer, partitions, rollback: call.rollback },
    note: `${call.rollback ? 'Rollback replay' : 'Replay'} of ${call.consumer} for backfill #${call.backfillId}`,
  };
}

/** Starts the DAG run (or finds the one an earlier attempt started) and waits for it to succeed. */
export async function callAirflow(retrigger: AirflowRetrigger, call: ReplayCall, env: RetriggerEnvironment): Promise<AirflowOutcome> {
  const api = apiOf(retrigger, call, env);
  const dagRunId = replayKey(call);
  const runsUrl = `${api.base}/api/v2/dags/${encodeURIComponent(retrigger.dagId)}/dagRuns`;
  const what = (url: string) => `the Airflow DAG ${retrigger.dagId} of ${call.consumer} at ${url}`;
  const answer = await authorized(api, runsUrl, 'POST', triggerBody(retrigger, call), what);
  // 409: Airflow has a run with this id, which only an earlier attempt of this replay can have started.
  if (!isSuccess(answer.status) && answer.status !== 409) refuse(what, runsUrl, answer);
  await waitForRun(api, retrigger, call, `${runsUrl}/${encodeURIComponent(dagRunId)}`, answer.status === 409);
  return { url: redact(api.base), dagId: retrigger.dagId, dagRunId, run: answer.status === 409 ? 'found' : 'started', state: 'success' };
}

function stateOf(json: unknown): DagRunState | undefined {
  const state = fieldOf(json, 'state');
  return DAG_RUN_STATES.find((known) => known === state);
}

async function waitForRun(api: AirflowApi, retrigger: AirflowRetrigger, call: ReplayCall, url: string, conflicted: boolean): Promise<void> {
  const run = `${call.consumer}'s DAG run ${replayKey(call)} of ${retrigger.dagId}`;
  const what = (quoted: string) => `the status of ${run} at ${quoted}`;
  const timeoutMs = retrigger.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  let last: DagRunState | undefined;
  const end = await pollUntil({ pollMs: retrigger.pollMs ?? DEFAULT_POLL_MS, timeoutMs }, async () => {
    const answer = await authorized(api, url, 'GET', undefined, what);
    if (answer.status === 404 && conflicted) {
      // The 409 was not this run id: with a logical date, another run of the DAG holds the same one.
      throw new BackfillError(ErrorCode.StepFailed,
        `Airflow refused to start ${run} with 409 and has no run of that id (${airflowDetail(answer)}): another run of ${retrigger.dagId} holds the same logical_date; set logicalDate in ${call.consumer}'s retrigger to null, or clear that run`,
        { retryable: false });
    }
    if (!isSuccess(answer.status)) refuse(what, url, answer);
    last = stateOf(answer.json);
    if (last === 'success') return 'success';
    if (last === 'failed') {
      const note = fieldOf(answer.json, 'note');
      throw new BackfillError(ErrorCode.StepFailed,
        `${run} ended failed${typeof note === 'string' && note !== '' ? ` (its note: ${quoteOutside(note)})` : ''} (${quoteOutside(url)})`, { retryable: false });
    }
    return undefined;
  });
  if (end === 'timed out') {
    // Retryable: the next attempt's POST gets 409 for the same id and waits for that same run again.
    throw new BackfillError(ErrorCode.StepFailed,
      `${run} is still ${last ?? 'in an unrecognised state'} after ${timeoutMs} ms (${quoteOutside(url)}); a retry waits for the same run, or raise timeoutMs in ${call.consumer}'s retrigger`,
      { retryable: true });
  }
}
