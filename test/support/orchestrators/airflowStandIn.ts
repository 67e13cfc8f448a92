import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { serveStandIn } from './standInServer.js';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { parse } from 'yaml';

// An Airflow 3 API server as its published OpenAPI documents define it (schemas/airflow/, vendored with their
// licence), on loopback, for the airflow re-trigger's tests:
//   - POST /auth/token takes a LoginBody and answers 201 with a LoginResponse: a JWT (HS256) that expires after
//     `tokenLifetimeS`, as Airflow's do ([api_auth] jwt_expiration_time); a wrong password gets 401;
//   - every /api/v2 call wants `Authorization: Bearer <jwt>`, and answers 401 to none, an expired one, or one
//     issued before revokeTokens() (an API server restarted with a new secret key);
//   - POST /api/v2/dags/{dag_id}/dagRuns validates its body against TriggerDAGRunPostBody with ajv (required
//     logical_date, nullable; additionalProperties false) and answers 422 in FastAPI's HTTPValidationError shape
//     otherwise, 404 for a DAG it does not have, 409 for a dag_run_id it already has (Airflow's unique-constraint
//     handler), and 200 with a DAGRunResponse;
//   - GET /api/v2/dags/{dag_id}/dagRuns/{dag_run_id} answers the run: queued, running, then `end`.
// Every answer it gives is validated against the response schema the document names for it: a stand-in that
// drifted from Airflow's shapes fails its own test, not silently.

// ajv-formats is CommonJS with `exports.default`; under NodeNext the default import is the module object.
const addFormats = addFormatsModule.default;

const SCHEMAS = fileURLToPath(new URL('../../../schemas/airflow/', import.meta.url));

function openApiValidators(): (name: string) => ValidateFunction {
  // OpenAPI 3.1's schemas are JSON Schema 2020-12. The documents' own top-level members are declared as
  // annotations, so that ajv reads each whole document and its `#/components/schemas/…` references resolve.
  const ajv = new Ajv2020({ strictSchema: true, strictTypes: false, allErrors: true });
  for (const keyword of ['openapi', 'info', 'paths', 'components']) ajv.addKeyword(keyword);
  addFormats(ajv);
  ajv.addSchema(parse(readFileSync(`${SCHEMAS}v2-rest-api-excerpt.yaml`, 'utf8')) as object, 'airflow-rest');
  ajv.addSchema(parse(readFileSync(`${SCHEMAS}simple-auth-manager-excerpt.yaml`, 'utf8')) as object, 'airflow-auth');
  return (name) => {
    const validate = ajv.getSchema(name);
    if (!validate) throw new Error(`no schema ${name} in schemas/airflow`);
    return validate;
  };
}

/** ajv's errors in the shape FastAPI answers a request that fails its model with (HTTPValidationError). */
function validationDetail(errors: readonly ErrorObject[] | null | undefined, input: unknown): { type: string; loc: (string | number)[]; msg: string; input: unknown }[] {
  return (errors ?? []).map((error) => {
    const path = error.instancePath.split('/').filter(Boolean);
    if (error.keyword === 'required') {
      return { type: 'missing', loc: ['body', ...path, String(error.params.missingProperty)], msg: 'Field required', input };
    }
    if (error.keyword === 'additionalProperties') {
      return { type: 'extra_forbidden', loc: ['body', ...path, String(error.params.additionalProperty)], msg: 'Extra inputs are not permitted', input };
    }
    return { type: error.keyword, loc: ['body', ...path], msg: error.message ?? error.keyword, input };
  });
}

interface AirflowRun {
  dagId: string;
  dagRunId: string;
  logicalDate: string | null;
  conf: Record<string, unknown> | null;
  note: string | null;
  polls: number;
  queuedAt: string;
}

export interface AirflowStandInOptions {
  dags: string[];
  /** The users /auth/token knows, by name. */
  users: Record<string, string>;
  /** How long a token is valid. Default an hour. */
  tokenLifetimeS?: number;
  /** How a run ends, after `pollsToEnd` looks at it (queued on the first, running until then). */
  end?: 'success' | 'failed';
  pollsToEnd?: number;
  /** The note a run carries when it has failed (a DAG's on_failure_callback can set one), or one made from the caller's token. */
  failedNote?: string | ((bearer: string) => string);
  /** The first trigger starts the run and then loses its answer (the connection drops), as a worker dying would see it. */
  loseFirstTriggerAnswer?: boolean;
}

export interface AirflowStandIn {
  url: string;
  runs: Map<string, AirflowRun>;
  /** Every request, in order: method, path, the status answered. */
  requests: { method: string; path: string; status: number }[];
  /** The bodies /auth/token was given, and the tokens it issued. */
  logins: { body: unknown; token?: string }[];
  /** From now on, every token issued before is refused with 401. */
  revokeTokens(): void;
  close(): Promise<void>;
}

interface Claims {
  sub: string;
  iat: number;
  nbf: number;
  exp: number;
  jti: string;
}

export async function startAirflowStandIn(options: AirflowStandInOptions): Promise<AirflowStandIn> {
  const schema = openApiValidators();
  const secret = randomBytes(32);
  const runs = new Map<string, AirflowRun>();
  const requests: AirflowStandIn['requests'] = [];
  const logins: AirflowStandIn['logins'] = [];
  const revoked = new Set<string>();
  let triggers = 0;

  const sign = (claims: Claims): string => {
    const encode = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
    const unsigned = `${encode({ alg: 'HS256', typ: 'JWT' })}.${encode(claims)}`;
    return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`;
  };
  const verify = (token: string): Claims | undefined => {
    const [head, body, signature] = token.split('.');
    if (!head || !body || !signature) return undefined;
    const expected = Buffer.from(createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url'));
    const given = Buffer.from(signature);
    if (expected.length !== given.length || !timingSafeEqual(expected, given)) return undefined;
    const claims = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as Claims;
    const now = Date.now() / 1000;
    return claims.exp > now && !revoked.has(claims.jti) ? claims : undefined;
  };

  /** Answers, after checking the answer against the response schema the document names for it. */
  const answer = (res: ServerResponse, req: IncomingMessage, status: number, body: unknown, schemaName: string): void => {
    const validate = schema(schemaName);
    if (!validate(body)) throw new Error(`the stand-in's own ${status} answer is not a ${schemaName}: ${JSON.stringify(validate.errors)}`);
    requests.push({ method: req.method ?? '', path: req.url ?? '', status });
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };
  const refuse = (res: ServerResponse, req: IncomingMessage, status: number, detail: unknown) =>
    answer(res, req, status, { detail }, 'airflow-rest#/components/schemas/HTTPExceptionResponse');

  const noteOf = (run: AirflowRun, state: string, bearer: string): string | null => {
    if (state !== 'failed' || options.failedNote === undefined) return run.note;
    return typeof options.failedNote === 'string' ? options.failedNote : options.failedNote(bearer);
  };
  const runResponse = (run: AirflowRun, state: string, bearer: string): object => ({
    dag_run_id: run.dagRunId, dag_id: run.dagId, logical_date: run.logicalDate, queued_at: run.queuedAt,
    start_date: state === 'queued' ? null : run.queuedAt, end_date: state === 'success' || state === 'failed' ? new Date().toISOString() : null,
    duration: null, data_interval_start: run.logicalDate, data_interval_end: run.logicalDate, run_after: run.queuedAt,
    last_scheduling_decision: null, run_type: 'manual', state, triggered_by: 'rest_api', triggering_user_name: 'backfill-bot',
    conf: run.conf, note: noteOf(run, state, bearer), dag_versions: [], bundle_version: null, dag_display_name: run.dagId,
  });

  const handle = (req: IncomingMessage, res: ServerResponse, text: string): void => {
    const path = new URL(req.url ?? '/', 'http://stand-in').pathname;
    if (req.method === 'POST' && path === '/auth/token') {
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return answer(res, req, 422, { detail: [{ type: 'json_invalid', loc: ['body'], msg: 'JSON decode error' }] }, 'airflow-rest#/components/schemas/HTTPValidationError');
      }
      logins.push({ body });
      const validate = schema('airflow-auth#/components/schemas/LoginBody');
      if (!validate(body)) return answer(res, req, 422, { detail: validationDetail(validate.errors, body) }, 'airflow-rest#/components/schemas/HTTPValidationError');
      const { username, password } = body as { username: string; password: string };
      if (options.users[username] !== password) return refuse(res, req, 401, 'Invalid credentials');
      const now = Math.floor(Date.now() / 1000);
      const token = sign({ sub: username, iat: now, nbf: now, exp: now + (options.tokenLifetimeS ?? 3600), jti: randomUUID() });
      const login = logins.at(-1);
      if (login) login.token = token;
      return answer(res, req, 201, { access_token: token }, 'airflow-auth#/components/schemas/LoginResponse');
    }
    if (!path.startsWith('/api/v2/')) return refuse(res, req, 404, 'Not Found');
    const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (!bearer) return refuse(res, req, 401, 'Not authenticated');
    if (!verify(bearer)) return refuse(res, req, 401, 'Invalid JWT token');

    const runsPath = /^\/api\/v2\/dags\/([^/]+)\/dagRuns$/.exec(path);
    const runPath = /^\/api\/v2\/dags\/([^/]+)\/dagRuns\/([^/]+)$/.exec(path);
    if (req.method === 'POST' && runsPath) {
      const dagId = decodeURIComponent(runsPath[1] ?? '');
      if (!options.dags.includes(dagId)) return refuse(res, req, 404, `The Dag with ID: \`${dagId}\` was not found`);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return answer(res, req, 422, { detail: [{ type: 'json_invalid', loc: ['body'], msg: 'JSON decode error' }] }, 'airflow-rest#/components/schemas/HTTPValidationError');
      }
      const validate = schema('airflow-rest#/components/schemas/TriggerDAGRunPostBody');
      if (!validate(body)) return answer(res, req, 422, { detail: validationDetail(validate.errors, body) }, 'airflow-rest#/components/schemas/HTTPValidationError');
      const trigger = body as { dag_run_id?: string | null; logical_date: string | null; conf?: Record<string, unknown> | null; note?: string | null };
      const queuedAt = new Date().toISOString();
      const dagRunId = trigger.dag_run_id ?? `manual__${queuedAt}`;
      if (runs.has(`${dagId}/${dagRunId}`)) {
        return refuse(res, req, 409, {
          reason: 'Unique constraint violation', statement: 'hidden', orig_error: 'hidden',
          message: `Serious error when handling your request. Check logs for more details - you will find it in api server when you look for ID ${randomBytes(4).toString('hex')}`,
        });
      }
      const run: AirflowRun = { dagId, dagRunId, logicalDate: trigger.logical_date, conf: trigger.conf ?? null, note: trigger.note ?? null, polls: 0, queuedAt };
      runs.set(`${dagId}/${dagRunId}`, run);
      triggers += 1;
      if (options.loseFirstTriggerAnswer && triggers === 1) {
        requests.push({ method: 'POST', path, status: 0 });
        req.socket.destroy();
        return;
      }
      return answer(res, req, 200, runResponse(run, 'queued', bearer), 'airflow-rest#/components/schemas/DAGRunResponse');
    }
    if (req.method === 'GET' && runPath) {
      const dagId = decodeURIComponent(runPath[1] ?? '');
      const dagRunId = decodeURIComponent(runPath[2] ?? '');
      const run = runs.get(`${dagId}/${dagRunId}`);
      if (!run) return refuse(res, req, 404, `The DagRun with dag_id: \`${dagId}\` and run_id: \`${dagRunId}\` was not found`);
      run.polls += 1;
      const state = run.polls >= (options.pollsToEnd ?? 3) ? options.end ?? 'success' : run.polls === 1 ? 'queued' : 'running';
      return answer(res, req, 200, runResponse(run, state, bearer), 'airflow-rest#/components/schemas/DAGRunResponse');
    }
    return refuse(res, req, 404, 'Not Found');
  };

  const served = await serveStandIn(handle, (res, message) => res.writeHead(500, { 'content-type': 'text/plain' }).end(message));
  return {
    url: served.url,
    runs, requests, logins,
    revokeTokens: () => {
      for (const { token } of logins) {
        const claims = token ? (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as Claims) : undefined;
        if (claims) revoked.add(claims.jti);
      }
    },
    close: served.close,
  };
}
