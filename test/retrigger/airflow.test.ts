import { afterEach, describe, expect, it } from 'vitest';
import { runUntilSettled } from '../../src/cli/runner.js';
import { loadConfig } from '../../src/config.js';
import type { ReplayCall, RetriggerEnvironment } from '../../src/core/retrigger/call.js';
import { parseRetrigger, retriggerUrlProblems, type RemoteRetrigger } from '../../src/core/retrigger/definition.js';
import { runRemoteRetrigger } from '../../src/core/retrigger/retrigger.js';
import { isBackfillError } from '../../src/errors.js';
import { approvedNight15, countRows, createTestEngine, type TestEngine } from '../support/engine.js';
import { docsEntry } from '../support/orchestrators/docsEntries.js';
import { startAirflowStandIn, type AirflowStandIn, type AirflowStandInOptions } from '../support/orchestrators/airflowStandIn.js';

// The airflow kind against a stand-in that holds every request to Airflow 3's published OpenAPI schemas
// (schemas/airflow/): the trigger body it sends, the token it gets and renews, one run however often a replay is
// retried, and failures that carry Airflow's words but never a secret. Then night 15 end to end with the entry
// docs/catalog.md shows for Airflow 3.

const USERNAME = 'backfill-bot';
const PASSWORD = 'airflow-password-for-tests-7f3e';
const SECRETS = { RETRIGGER_SECRET_AIRFLOW_USERNAME: USERNAME, RETRIGGER_SECRET_AIRFLOW_PASSWORD: PASSWORD };
const HOURS = ['05', '06', '07', '08', '09', '10'].map((h) => new Date(`2026-11-15T${h}:00:00Z`));

let standIn: AirflowStandIn | undefined;
let engine: TestEngine | undefined;
afterEach(async () => {
  await standIn?.close();
  standIn = undefined;
  await engine?.close();
  engine = undefined;
});

/** A worker's environment as loadConfig makes it: the secrets registered with the redaction, loopback allowed. */
function environment(extra: Record<string, string> = {}): RetriggerEnvironment {
  return { config: loadConfig({ WEBHOOK_TIMEOUT_MS: '2000', RETRIGGER_ALLOWED_HOSTS: '127.0.0.1', ...SECRETS, ...extra }) };
}

/** A definition as the replay step reads it from the catalog: parsed, and remote. */
function remote(definition: unknown): RemoteRetrigger {
  const parsed = parseRetrigger('settlement_report', definition);
  if (parsed.kind === 'sql') throw new Error('expected a remote re-trigger');
  return parsed;
}

function airflow(url: string, overrides: Record<string, unknown> = {}): RemoteRetrigger {
  return remote({
    kind: 'airflow', url, dagId: 'settlement_report',
    username: { env: 'RETRIGGER_SECRET_AIRFLOW_USERNAME' }, password: { env: 'RETRIGGER_SECRET_AIRFLOW_PASSWORD' },
    pollMs: 20, timeoutMs: 10_000, ...overrides,
  });
}

const replay = (backfillId = 41): ReplayCall => ({ backfillId, consumer: 'settlement_report', partitions: HOURS, rollback: false });

async function standInWith(options: Partial<AirflowStandInOptions> = {}): Promise<AirflowStandIn> {
  standIn = await startAirflowStandIn({ dags: ['settlement_report'], users: { [USERNAME]: PASSWORD }, ...options });
  return standIn;
}

async function failureOf(promise: Promise<unknown>): Promise<Error & { retryable?: boolean }> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  if (!(error instanceof Error)) throw new Error('expected the replay to fail');
  return error;
}

/** Everything a failure or outcome could show, as one text: where a secret must never be. */
const shown = (value: unknown) => (value instanceof Error ? value.message : JSON.stringify(value));

describe('the airflow re-trigger', () => {
  it('starts a DAG run through /api/v2 with the key as dag_run_id, logical_date null and the partitions in conf, and waits for success', async () => {
    const airflowApi = await standInWith();
    const outcome = await runRemoteRetrigger(airflow(airflowApi.url), replay(), environment());
    expect(outcome).toEqual({
      via: 'airflow', url: airflowApi.url, dagId: 'settlement_report', dagRunId: 'backfill-41-replay-settlement_report', run: 'started', state: 'success',
    });
    expect([...airflowApi.runs.values()]).toEqual([expect.objectContaining({
      dagRunId: 'backfill-41-replay-settlement_report', logicalDate: null,
      conf: { backfill_id: 41, consumer: 'settlement_report', partitions: HOURS.map((h) => h.toISOString()), rollback: false },
      note: 'Replay of settlement_report for backfill #41',
    })]);
    expect(airflowApi.requests.map((r) => `${r.method} ${r.path} ${r.status}`)).toEqual([
      'POST /auth/token 201',
      'POST /api/v2/dags/settlement_report/dagRuns 200',
      'GET /api/v2/dags/settlement_report/dagRuns/backfill-41-replay-settlement_report 200',
      'GET /api/v2/dags/settlement_report/dagRuns/backfill-41-replay-settlement_report 200',
      'GET /api/v2/dags/settlement_report/dagRuns/backfill-41-replay-settlement_report 200',
    ]);
    expect(airflowApi.logins.map((login) => login.body)).toEqual([{ username: USERNAME, password: PASSWORD }]);
  });

  it('sends the first corrected hour as logical_date when the catalog says so', async () => {
    const airflowApi = await standInWith();
    await runRemoteRetrigger(airflow(airflowApi.url, { logicalDate: 'first_partition' }), replay(), environment());
    expect([...airflowApi.runs.values()].map((run) => run.logicalDate)).toEqual(['2026-11-15T05:00:00.000Z']);
  });

  it('starts one run when the replay is retried: the lost answer, then a retry after a lost commit, each get 409 and wait for that run', async () => {
    const airflowApi = await standInWith({ loseFirstTriggerAnswer: true });
    const env = environment();
    const lost = await failureOf(runRemoteRetrigger(airflow(airflowApi.url), replay(), env));
    expect(isBackfillError(lost) && lost.retryable).toBe(true);
    expect(lost.message).toContain(`the Airflow DAG settlement_report of settlement_report at ${airflowApi.url}/api/v2/dags/settlement_report/dagRuns did not answer`);
    for (let attempt = 0; attempt < 2; attempt += 1) {
      expect(await runRemoteRetrigger(airflow(airflowApi.url), replay(), env)).toMatchObject({ run: 'found', state: 'success' });
    }
    expect(airflowApi.runs.size).toBe(1);
    expect(airflowApi.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/dagRuns')).map((r) => r.status)).toEqual([0, 409, 409]);
  });

  it('keeps one token per worker across replays, and takes a new one before it expires rather than after a 401', async () => {
    // Tokens live 2 s; the run takes about 3 s of polls: the worker renews a quarter of the life before `exp`.
    const airflowApi = await standInWith({ tokenLifetimeS: 2, pollsToEnd: 30 });
    const env = environment();
    await runRemoteRetrigger(airflow(airflowApi.url, { pollMs: 100 }), replay(41), env);
    expect(airflowApi.logins.length).toBeGreaterThanOrEqual(2);
    expect(airflowApi.requests.filter((r) => r.status === 401)).toEqual([]);

    const longLived = await standInWith({ tokenLifetimeS: 3600 });
    for (const backfillId of [42, 43]) await runRemoteRetrigger(airflow(longLived.url), replay(backfillId), env);
    expect(longLived.logins).toHaveLength(1);
  });

  it('takes a new token at once when Airflow answers 401 to the one it holds, and goes on', async () => {
    const airflowApi = await standInWith();
    const env = environment();
    await runRemoteRetrigger(airflow(airflowApi.url), replay(41), env);
    airflowApi.revokeTokens();
    expect(await runRemoteRetrigger(airflow(airflowApi.url), replay(42), env)).toMatchObject({ run: 'started', state: 'success' });
    expect(airflowApi.logins).toHaveLength(2);
    expect(airflowApi.requests.slice(5, 8).map((r) => `${r.method} ${r.path.split('/').slice(0, 2).join('/')} ${r.status}`)).toEqual([
      'POST /api 401', 'POST /auth 201', 'POST /api 200',
    ]);
  });

  it("fails the replay when the run fails, with the run's note redacted and no retry", async () => {
    const airflowApi = await standInWith({ end: 'failed', failedNote: `load_report failed: login ${USERNAME}:${PASSWORD}@warehouse refused` });
    const error = await failureOf(runRemoteRetrigger(airflow(airflowApi.url), replay(), environment()));
    expect(error.message).toBe(`settlement_report's DAG run backfill-41-replay-settlement_report of settlement_report ended failed (its note: load_report failed: login [redacted]:[redacted]@warehouse refused) (${airflowApi.url}/api/v2/dags/settlement_report/dagRuns/backfill-41-replay-settlement_report)`);
    expect(isBackfillError(error) && error.retryable).toBe(false);
  });

  it("fails with Airflow's detail when it refuses the trigger, and the stand-in refuses what Airflow 3 refuses", async () => {
    const airflowApi = await standInWith();
    const unknown = await failureOf(runRemoteRetrigger(airflow(airflowApi.url, { dagId: 'settlement_reprot' }), replay(), environment()));
    expect(unknown.message).toBe(`the Airflow DAG settlement_reprot of settlement_report at ${airflowApi.url}/api/v2/dags/settlement_reprot/dagRuns answered 404: The Dag with ID: \`settlement_reprot\` was not found`);
    expect(isBackfillError(unknown) && unknown.retryable).toBe(false);

    // The v1-era call the rest kind makes by default ({conf: …}, a fixed header) is what Airflow 3 refuses: 422.
    const token = String(airflowApi.logins[0]?.token);
    const rest = remote({
      kind: 'rest', url: `${airflowApi.url}/api/v2/dags/settlement_report/dagRuns`, headers: { Authorization: { env: 'RETRIGGER_SECRET_AIRFLOW_AUTH' } },
    });
    const refused = await failureOf(runRemoteRetrigger(rest, replay(), environment({ RETRIGGER_SECRET_AIRFLOW_AUTH: `Bearer ${token}` })));
    expect(refused.message).toContain('answered 422: ');
    expect(refused.message).toContain('"loc":["body","logical_date"],"msg":"Field required"');
  });

  it('never shows the password or a token: a refused login names the variables to check, not their values', async () => {
    const airflowApi = await standInWith({ users: { [USERNAME]: 'another-password' } });
    const error = await failureOf(runRemoteRetrigger(airflow(airflowApi.url), replay(), environment()));
    expect(error.message).toBe(`the Airflow login of settlement_report's re-trigger at ${airflowApi.url}/auth/token was refused (401: Invalid credentials): check RETRIGGER_SECRET_AIRFLOW_USERNAME and RETRIGGER_SECRET_AIRFLOW_PASSWORD on the workers, and that this user may trigger the DAG`);
    expect(isBackfillError(error) && error.retryable).toBe(false);

    // A run whose note echoes the token it was asked with (as a careless callback might): the token is redacted.
    const echoing = await standInWith({ end: 'failed', failedNote: (bearer) => `asked with ${bearer} by ${USERNAME}` });
    const failed = await failureOf(runRemoteRetrigger(airflow(echoing.url), replay(), environment()));
    const token = String(echoing.logins[0]?.token);
    expect(token.length).toBeGreaterThan(20);
    expect(failed.message).toContain('(its note: asked with [redacted] by [redacted])');
    for (const secret of [PASSWORD, USERNAME, token]) expect(shown(failed)).not.toContain(secret);
  });

  it('shows the entry docs/catalog.md gives for Airflow 3 is one the catalog accepts', () => {
    const retrigger = docsEntry('Airflow 3');
    expect(retrigger.kind).toBe('airflow');
    expect(retriggerUrlProblems(retrigger, ['airflow.example.com'])).toEqual([]);
  });
});

describe('night 15 with the settlement report re-triggered in Airflow 3', () => {
  it('runs to done at −12,408.45 with exactly one DAG run, though the replay step was retried', async () => {
    const airflowApi = await standInWith();
    engine = await createTestEngine('month-end', { JOB_ATTEMPTS: '3', RETRIGGER_ALLOWED_HOSTS: '127.0.0.1', ...SECRETS });
    // The entry the documentation gives, pointed at the stand-in and polled quickly.
    const definition = { ...docsEntry('Airflow 3'), url: airflowApi.url, pollMs: 20 };
    await engine.ctx.pool.query(`UPDATE backfill.consumers SET retrigger = $1 WHERE name = 'settlement_report'`, [definition]);
    // The replay's first commit fails, as a worker dying after Airflow started the run would: the step is retried.
    await engine.ctx.pool.query(`
      CREATE SEQUENCE public.replayed_settlement_report;
      CREATE FUNCTION public.fail_first_replay_commit() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.kind = 'replayed' AND NEW.detail->>'consumer' = 'settlement_report' AND nextval('public.replayed_settlement_report') = 1 THEN
          RAISE EXCEPTION 'the worker died before its commit';
        END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER fail_first_replay_commit BEFORE INSERT ON backfill.events FOR EACH ROW EXECUTE FUNCTION public.fail_first_replay_commit();`);

    const id = await approvedNight15(engine.ctx, 'airflow re-trigger test');
    const report = await runUntilSettled(engine.ctx, id, () => undefined, engine.notifier);
    expect(report.backfill.state).toBe('done');
    expect(report.backfill.diff).toBe('-12408.45');
    expect(report.steps.find((step) => step.kind === 'replay' && step.key === 'settlement_report')).toMatchObject({ status: 'done', attempts: 2 });
    expect([...airflowApi.runs.keys()]).toEqual([`settlement_report/backfill-${id}-replay-settlement_report`]);
    expect(airflowApi.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/dagRuns')).map((r) => r.status)).toEqual([200, 409]);
    const { rows } = await engine.ctx.pool.query(
      `SELECT detail->>'via' AS via, detail->>'run' AS run, detail->>'state' AS state FROM backfill.events WHERE backfill_id = $1 AND kind = 'replayed' AND detail->>'consumer' = 'settlement_report'`, [id]);
    expect(rows).toEqual([{ via: 'airflow', run: 'found', state: 'success' }]);
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1 AND detail::text LIKE '%' || $2 || '%'`, [id, PASSWORD])).toBe(0);
  });
});
