import { urlPolicyFor, type RetriggerEnvironment } from './call.js';
import { callChecked, type OutboundCall } from './outboundHttp.js';
import { checkUrlForCall, type NameOfCall } from './urlPolicy.js';

// What the Airflow and Dagster kinds share: one JSON call through the checked way out (outboundHttp.ts), which
// statuses are worth another attempt, and the wait for a run's end. The answers are outside text: read as JSON
// when they are, quoted only through quoteOutside when shown.

export interface JsonAnswer {
  status: number;
  /** The answer parsed, or undefined when it is not JSON (or was cut at outboundHttp's bound). */
  json: unknown;
  text: string;
}

/** Checks the URL as it is now (host allowed, DNS answered), calls it, and reads its answer as JSON if it is. */
export async function sendJson(url: string, call: OutboundCall, what: NameOfCall, env: RetriggerEnvironment): Promise<JsonAnswer> {
  const checked = await checkUrlForCall(url, urlPolicyFor(env), what);
  const answer = await callChecked(what, checked, call);
  let json: unknown;
  try {
    json = answer.text ? JSON.parse(answer.text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: answer.status, json, text: answer.text };
}

/** Worth another attempt: the orchestrator is busy, briefly away or failed inside. Any other 4xx answers the same again. */
export function retryableStatus(status: number): boolean {
  return status >= 500 || status === 408 || status === 425 || status === 429;
}

export function isSuccess(status: number): boolean {
  return status >= 200 && status <= 299;
}

/** A JSON object's field, or undefined when the value is not an object. */
export function fieldOf(value: unknown, name: string): unknown {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>)[name] : undefined;
}

export interface PollBounds {
  pollMs: number;
  timeoutMs: number;
}

/**
 * Calls `look` until it returns a value, `pollMs` apart, for at most `timeoutMs`; then 'timed out'. A look
 * that throws ends the wait with its error.
 */
export async function pollUntil<T>(bounds: PollBounds, look: () => Promise<T | undefined>): Promise<T | 'timed out'> {
  const deadline = Date.now() + bounds.timeoutMs;
  for (;;) {
    const found = await look();
    if (found !== undefined) return found;
    if (Date.now() >= deadline) return 'timed out';
    await new Promise((resolve) => setTimeout(resolve, Math.min(bounds.pollMs, Math.max(0, deadline - Date.now()))));
  }
}
