import { BackfillError, ErrorCode } from '../../errors.js';
import { replayKey, resolveSecret, type ReplayCall, type Retrigger, type RetriggerEnvironment } from './retrigger.js';
import { fillTemplate, valueAt, type TemplateValues } from './templates.js';

// A re-trigger through an orchestrator's REST API: one call starts a run with the corrected partitions as its
// configuration, under an idempotency key that every attempt of the step repeats (so an orchestrator that
// dedupes starts one run however often the step is retried; Airflow, whose run id it can be, answers 409 to
// the second). When the catalog says how to read the run's state, the step waits for its end: a success state
// completes the replay, a failure state fails it naming the run and the state.

type RestRetrigger = Extract<Retrigger, { kind: 'rest' }>;
type RestStatus = NonNullable<RestRetrigger['status']>;

const DEFAULT_POLL_MS = 2_000;
const DEFAULT_TIMEOUT_MS = 10 * 60_000;
// Worth another attempt: the orchestrator is busy or briefly away. Any other 4xx will answer the same again.
const RETRYABLE_STATUS = new Set([408, 425, 429]);

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

async function send(url: string, init: RequestInit, what: string, timeoutMs: number): Promise<{ status: number; json: unknown; text: string }> {
  let response: Response;
  try {
    response = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    throw new BackfillError(ErrorCode.StepFailed, `${what} ${url} did not answer: ${(error as Error).message}`, { cause: error, retryable: true });
  }
  const text = await response.text();
  let json: unknown;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, json, text };
}

function refuseAnswer(what: string, url: string, status: number, text: string): never {
  const retryable = status >= 500 || RETRYABLE_STATUS.has(status);
  throw new BackfillError(ErrorCode.StepFailed, `${what} ${url} answered ${status}${text ? `: ${text.slice(0, 200)}` : ''}`, { retryable });
}

/** Starts the run (or finds it started by an earlier attempt) and, with `status`, waits for its end state. */
export async function callRest(retrigger: RestRetrigger, call: ReplayCall, env: RetriggerEnvironment): Promise<RestOutcome> {
  const values = templateValues(call);
  const url = String(fillTemplate(retrigger.url, values, true));
  const what = `the re-trigger of ${call.consumer} at`;
  const answer = await send(url, {
    method: retrigger.method ?? 'POST', headers: headersOf(retrigger, call, env),
    body: JSON.stringify(fillTemplate(retrigger.body ?? DEFAULT_BODY, values)),
  }, what, env.config.WEBHOOK_TIMEOUT_MS);
  // 409: a run under this key exists already, started by an earlier attempt whose answer was lost.
  if ((answer.status < 200 || answer.status > 299) && answer.status !== 409) refuseAnswer(what, url, answer.status, answer.text);
  const outcome: RestOutcome = { url, status: answer.status, idempotencyKey: replayKey(call) };
  if (!retrigger.status) return outcome;
  const found = retrigger.status.runIdField ? valueAt(answer.json, retrigger.status.runIdField) : undefined;
  const runId = found === undefined || found === null ? replayKey(call) : String(found);
  const state = await waitForEnd(retrigger, retrigger.status, { ...values, run_id: runId }, call, env);
  return { ...outcome, runId, state };
}

/** Polls the run's state until it is one of the success or failure states, or the time runs out. */
async function waitForEnd(retrigger: RestRetrigger, status: RestStatus, values: TemplateValues, call: ReplayCall, env: RetriggerEnvironment): Promise<string> {
  const url = String(fillTemplate(status.url, values, true));
  const deadline = Date.now() + (status.timeoutMs ?? DEFAULT_TIMEOUT_MS);
  const what = `the status of ${call.consumer}'s run ${String(values.run_id)} at`;
  for (;;) {
    const answer = await send(url, { method: 'GET', headers: headersOf(retrigger, call, env) }, what, env.config.WEBHOOK_TIMEOUT_MS);
    if (answer.status < 200 || answer.status > 299) refuseAnswer(what, url, answer.status, answer.text);
    const state = String(valueAt(answer.json, status.field) ?? '(no value)');
    if (status.success.includes(state)) return state;
    if (status.failure.includes(state)) {
      throw new BackfillError(ErrorCode.StepFailed, `${call.consumer}'s run ${String(values.run_id)} ended ${state} (${url})`, { retryable: false });
    }
    if (Date.now() >= deadline) {
      // Retryable: the next attempt sends the same key, finds the same run and waits for it again.
      throw new BackfillError(ErrorCode.StepFailed, `${call.consumer}'s run ${String(values.run_id)} is still ${state} after ${status.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms (${url})`, { retryable: true });
    }
    await new Promise((resolve) => setTimeout(resolve, status.pollMs ?? DEFAULT_POLL_MS));
  }
}
