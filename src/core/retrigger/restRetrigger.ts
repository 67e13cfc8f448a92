import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside, redact } from '../../redaction.js';
import { retryableStatus, sendJson } from './orchestratorHttp.js';
import { replayKey, resolveSecret, type ReplayCall, type RetriggerEnvironment } from './call.js';
import type { Retrigger } from './definition.js';
import { fillTemplate, valueAt, type TemplateValues } from './templates.js';
import type { NameOfCall } from './urlPolicy.js';

// A re-trigger through an orchestrator's REST API: one call starts a run with the corrected partitions as its
// configuration, under an idempotency key that every attempt of the step repeats (so an orchestrator that
// dedupes starts one run however often the step is retried; Airflow, whose run id it can be, answers 409 to
// the second). When the catalog says how to read the run's state, the step waits for its end: a success state
// completes the replay, a failure state fails it naming the run and the state.
//
// Everything the orchestrator answers is outside text: its error bodies are quoted only through quoteOutside
// (redacted, bounded), a run id only quoted, and a state only when it is one the catalog names (success or
// failure). Anything else is "an unrecognised state": a status URL pointed at another endpoint would otherwise
// post whatever its `field` holds (a token) to the incident channel.

type RestRetrigger = Extract<Retrigger, { kind: 'rest' }>;
type RestStatus = NonNullable<RestRetrigger['status']>;

const DEFAULT_POLL_MS = 2_000;
const DEFAULT_TIMEOUT_MS = 10 * 60_000;

export interface RestOutcome {
  url: string;
  status: number;
  idempotencyKey: string;
  runId?: string;
  state?: string;
}

function templateValues(call: ReplayCall): TemplateValues {
  const partitions = call.partitions.map((hour) => hour.toISOString());
  return {
    partitions, backfill_id: call.backfillId, consumer: call.consumer, idempotency_key: replayKey(call),
    first_partition: partitions[0] ?? '', last_partition: partitions[partitions.length - 1] ?? '',
  };
}

/** Airflow's and most orchestrators' shape: the run's configuration under `conf`. */
const DEFAULT_BODY = { conf: { backfill_id: '{{backfill_id}}', consumer: '{{consumer}}', partitions: '{{partitions}}' } };

function headersOf(retrigger: RestRetrigger, call: ReplayCall, env: RetriggerEnvironment): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json', 'idempotency-key': replayKey(call) };
  for (const [name, value] of Object.entries(retrigger.headers ?? {})) {
    headers[name.toLowerCase()] = typeof value === 'string' ? value : resolveSecret(env, call.consumer, value);
  }
  return headers;
}

function refuseAnswer(what: NameOfCall, url: string, status: number, text: string): never {
  const retryable = retryableStatus(status);
  throw new BackfillError(ErrorCode.StepFailed, `${what(quoteOutside(url))} answered ${status}${text ? `: ${quoteOutside(text)}` : ''}`, { retryable });
}

/** The states the catalog names, as the refusal lists them. */
function namedStates(status: RestStatus): string {
  return [...status.success, ...status.failure].map((state) => quoteOutside(state, 40)).join(', ');
}

/** Starts the run (or finds it started by an earlier attempt) and, with `status`, waits for its end state. */
export async function callRest(retrigger: RestRetrigger, call: ReplayCall, env: RetriggerEnvironment): Promise<RestOutcome> {
  const values = templateValues(call);
  const url = String(fillTemplate(retrigger.url, values, true));
  const what = (quoted: string) => `the re-trigger of ${call.consumer} at ${quoted}`;
  const answer = await sendJson(url, {
    method: retrigger.method ?? 'POST', headers: headersOf(retrigger, call, env),
    body: JSON.stringify(fillTemplate(retrigger.body ?? DEFAULT_BODY, values)), timeoutMs: env.config.WEBHOOK_TIMEOUT_MS,
  }, what, env);
  // 409: a run under this key exists already, started by an earlier attempt whose answer was lost.
  if ((answer.status < 200 || answer.status > 299) && answer.status !== 409) refuseAnswer(what, url, answer.status, answer.text);
  const outcome: RestOutcome = { url: redact(url), status: answer.status, idempotencyKey: replayKey(call) };
  if (!retrigger.status) return outcome;
  const found = retrigger.status.runIdField ? valueAt(answer.json, retrigger.status.runIdField) : undefined;
  const runId = found === undefined || found === null ? replayKey(call) : String(found);
  const state = await waitForEnd(retrigger, retrigger.status, { ...values, run_id: runId }, call, env);
  return { ...outcome, runId: quoteOutside(runId), state };
}

/** Polls the run's state until it is one of the success or failure states, or the time runs out. */
async function waitForEnd(retrigger: RestRetrigger, status: RestStatus, values: TemplateValues, call: ReplayCall, env: RetriggerEnvironment): Promise<string> {
  const url = String(fillTemplate(status.url, values, true));
  const deadline = Date.now() + (status.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  // The run id came in the orchestrator's answer: quoted, like the URL it was filled into.
  const run = `${call.consumer}'s run ${quoteOutside(String(values.run_id), 100)}`;
  const what = (quoted: string) => `the status of ${run} at ${quoted}`;
  for (;;) {
    const answer = await sendJson(url, { method: 'GET', headers: headersOf(retrigger, call, env), timeoutMs: env.config.WEBHOOK_TIMEOUT_MS }, what, env);
    if (answer.status < 200 || answer.status > 299) refuseAnswer(what, url, answer.status, answer.text);
    const found = valueAt(answer.json, status.field);
    const state = typeof found === 'string' || typeof found === 'number' || typeof found === 'boolean' ? String(found) : undefined;
    if (state !== undefined && status.success.includes(state)) return state;
    if (state !== undefined && status.failure.includes(state)) {
      throw new BackfillError(ErrorCode.StepFailed, `${run} ended ${state} (${quoteOutside(url)})`, { retryable: false });
    }
    if (Date.now() >= deadline) {
      // Retryable: the next attempt sends the same key, finds the same run and waits for it again. The state is
      // not shown: only the catalog's own states are, since the field may hold anything (a token, a page).
      throw new BackfillError(ErrorCode.StepFailed,
        `${run} is still in an unrecognised state (not one of ${namedStates(status)}) after ${status.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms (${quoteOutside(url)})`, { retryable: true });
    }
    await new Promise((resolve) => setTimeout(resolve, status.pollMs ?? DEFAULT_POLL_MS));
  }
}
