import { createHash } from 'node:crypto';
import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside, registerSecrets } from '../../redaction.js';
import type { RetriggerEnvironment } from './call.js';
import { fieldOf, isSuccess, retryableStatus, sendJson } from './orchestratorHttp.js';

// The JWT an Airflow 3 API server wants in every call's Authorization header. Airflow issues it at POST
// /auth/token for a username and password (its OAuth2PasswordBearer scheme, schemas/airflow/), for a limited time
// ([api_auth] jwt_expiration_time). A fixed header read at start would stop working when it expires, so each
// worker keeps the token it got, takes a new one a while before its `exp`, and takes a new one at once when
// Airflow answers 401 to it (a restarted API server with a new secret key refuses tokens that have not expired).
//
// The token is a credential the catalog never saw: it is registered with the redaction (src/redaction.ts) as it
// arrives, so no error, event or message can show it, whatever Airflow echoes.

export interface AirflowLogin {
  /** {url}/auth/token. */
  tokenUrl: string;
  username: string;
  password: string;
  /** Where the credentials come from, for a refusal to name (never their values). */
  source: string;
  consumer: string;
}

interface HeldToken {
  token: string;
  /** When to take a new one (ms since the epoch): before it expires, so that no call carries a dying token. */
  renewAt: number;
}

/** A minute before `exp`, or a quarter of the token's life when that is shorter (a token valid for minutes). */
const RENEW_BEFORE_MS = 60_000;

// Per worker process: every replay of the same deployment and user shares one token. The key holds a digest of
// the password, so a changed secret gets a token of its own, and the map never holds the password itself.
const held = new Map<string, Promise<HeldToken>>();

function keyOf(login: AirflowLogin): string {
  return createHash('sha256').update(`${login.tokenUrl}\0${login.username}\0${login.password}`).digest('hex');
}

/** The claims a JWT says it carries (its middle part); nothing is verified: Airflow checks it, the bot only times it. */
function claimsOf(token: string): { exp?: number; iat?: number } {
  try {
    const claims: unknown = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'));
    const number = (name: string) => (typeof fieldOf(claims, name) === 'number' ? (fieldOf(claims, name) as number) : undefined);
    return { exp: number('exp'), iat: number('iat') };
  } catch {
    return {};
  }
}

/** When to renew: before `exp` by a minute or a quarter of the life; a token without `exp` until Airflow refuses it. */
function renewAtOf(token: string): number {
  const { exp, iat } = claimsOf(token);
  if (exp === undefined) return Number.POSITIVE_INFINITY;
  const life = iat === undefined ? Number.POSITIVE_INFINITY : (exp - iat) * 1000;
  return exp * 1000 - Math.min(RENEW_BEFORE_MS, life / 4);
}

/** What Airflow said, quoted: its `detail` when the answer has one (a sentence, or FastAPI's list of problems). */
export function airflowDetail(answer: { json: unknown; text: string }): string {
  const detail = fieldOf(answer.json, 'detail');
  if (typeof detail === 'string') return quoteOutside(detail);
  if (Array.isArray(detail)) {
    // FastAPI's HTTPValidationError: [{loc: ['body', 'logical_date'], msg: 'Field required', type: 'missing'}].
    const problems = detail.map((item) => {
      const loc = fieldOf(item, 'loc');
      const where = Array.isArray(loc) ? loc.filter((part) => part !== 'body').join('.') : '';
      const message = fieldOf(item, 'msg');
      return `${where ? `${where}: ` : ''}${typeof message === 'string' ? message : JSON.stringify(item)}`;
    });
    return quoteOutside(problems.join('; '));
  }
  if (detail !== undefined) return quoteOutside(JSON.stringify(detail));
  return answer.text ? quoteOutside(answer.text) : 'no detail';
}

async function login(login: AirflowLogin, env: RetriggerEnvironment): Promise<HeldToken> {
  const what = (url: string) => `the Airflow login of ${login.consumer}'s re-trigger at ${url}`;
  const answer = await sendJson(login.tokenUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ username: login.username, password: login.password }),
    timeoutMs: env.config.WEBHOOK_TIMEOUT_MS,
  }, what, env);
  if (answer.status === 401 || answer.status === 403) {
    throw new BackfillError(ErrorCode.Config,
      `${what(quoteOutside(login.tokenUrl))} was refused (${answer.status}: ${airflowDetail(answer)}): check ${login.source} on the workers, and that this user may trigger the DAG`,
      { retryable: false });
  }
  if (!isSuccess(answer.status)) {
    throw new BackfillError(ErrorCode.StepFailed, `${what(quoteOutside(login.tokenUrl))} answered ${answer.status}: ${airflowDetail(answer)}`, { retryable: retryableStatus(answer.status) });
  }
  const token = fieldOf(answer.json, 'access_token');
  if (typeof token !== 'string' || token === '') {
    throw new BackfillError(ErrorCode.StepFailed, `${what(quoteOutside(login.tokenUrl))} answered ${answer.status} without an access_token (Airflow 3 answers {access_token: …})`, { retryable: false });
  }
  registerSecrets([token]);
  return { token, renewAt: renewAtOf(token) };
}

/**
 * A token for these credentials: the one this worker holds while it is not due for renewal, else a new one.
 * With `refused`, Airflow has just answered 401 to that token: a new one is taken unless another call already did.
 */
export async function airflowToken(credentials: AirflowLogin, env: RetriggerEnvironment, refused?: string): Promise<string> {
  const key = keyOf(credentials);
  const current = held.get(key);
  if (current) {
    const token = await current.catch(() => undefined);
    if (token && token.token !== refused && Date.now() < token.renewAt) return token.token;
    // Another call may have replaced it while this one waited: take theirs rather than log in twice.
    if (held.get(key) !== current) return airflowToken(credentials, env, refused);
  }
  const next = login(credentials, env);
  held.set(key, next);
  try {
    return (await next).token;
  } catch (error) {
    if (held.get(key) === next) held.delete(key);
    throw error;
  }
}
