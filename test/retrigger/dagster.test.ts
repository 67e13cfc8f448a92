import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import type { ReplayCall, RetriggerEnvironment } from '../../src/core/retrigger/call.js';
import { LAUNCH_BACKFILL } from '../../src/core/retrigger/dagsterOperations.js';
import { parseRetrigger, retriggerUrlProblems, type RemoteRetrigger } from '../../src/core/retrigger/definition.js';
import { partitionFormatProblem, partitionKeys } from '../../src/core/retrigger/partitionKeys.js';
import { runRemoteRetrigger } from '../../src/core/retrigger/retrigger.js';
import { isBackfillError } from '../../src/errors.js';
import { startDagsterStandIn, type DagsterStandIn, type DagsterStandInOptions } from '../support/orchestrators/dagsterStandIn.js';
import { docsEntry } from '../support/orchestrators/docsEntries.js';
import { GraphqlSchema } from '../support/orchestrators/graphqlSchema.js';

// The dagster kind against a stand-in that checks every operation against Dagster's published GraphQL schema
// (schemas/dagster/) and answers as Dagster's webserver does: partition keys in the asset's own format, one
// backfill (or one run per partition) however often a replay is retried, and refusals that come with HTTP 200
// taken as the failures they are, quoted without a secret.

const TOKEN = 'dagster-cloud-token-for-tests-91c2';
const HOURS = ['05', '06', '07', '08', '09', '10'].map((h) => new Date(`2026-11-15T${h}:00:00Z`));
const KEYS = ['05', '06', '07', '08', '09', '10'].map((h) => `2026-11-15-${h}:00`);
/** The asset's hourly partitions on the 15th, as Dagster names them. */
const DAY_KEYS = Array.from({ length: 24 }, (_, h) => `2026-11-15-${String(h).padStart(2, '0')}:00`);

let standIn: DagsterStandIn | undefined;
afterEach(async () => {
  await standIn?.close();
  standIn = undefined;
});

function environment(): RetriggerEnvironment {
  return { config: loadConfig({ WEBHOOK_TIMEOUT_MS: '2000', RETRIGGER_ALLOWED_HOSTS: '127.0.0.1', RETRIGGER_SECRET_DAGSTER_TOKEN: TOKEN }) };
}

function dagster(url: string, overrides: Record<string, unknown> = {}): RemoteRetrigger {
  const parsed = parseRetrigger('settlement_report', {
    kind: 'dagster', url, assets: ['warehouse/settlement_report'], partitionFormat: '%Y-%m-%d-%H:%M',
    headers: { 'Dagster-Cloud-Api-Token': { env: 'RETRIGGER_SECRET_DAGSTER_TOKEN' } }, pollMs: 20, timeoutMs: 10_000, ...overrides,
  });
  if (parsed.kind === 'sql') throw new Error('expected a remote re-trigger');
  return parsed;
}

const JOB = { job: { name: 'settlement_job', location: 'analytics' }, assets: undefined };
const replay = (backfillId = 41): ReplayCall => ({ backfillId, consumer: 'settlement_report', partitions: HOURS, rollback: false });

async function standInWith(options: Partial<DagsterStandInOptions> = {}): Promise<DagsterStandIn> {
  standIn = await startDagsterStandIn({ partitionKeys: DAY_KEYS, jobs: ['settlement_job'], ...options });
  return standIn;
}

async function failureOf(promise: Promise<unknown>): Promise<Error & { retryable?: boolean }> {
  const error = await promise.then(() => undefined, (e: unknown) => e);
  if (!(error instanceof Error)) throw new Error('expected the replay to fail');
  return error;
}

describe("a Dagster asset's partition keys", () => {
  it('are the hours in the format and time zone the partitions definition declares, each partition once', () => {
    expect(partitionKeys(HOURS, '%Y-%m-%d-%H:%M')).toEqual(KEYS);
    expect(partitionKeys(HOURS, '%Y-%m-%d')).toEqual(['2026-11-15']);
    expect(partitionKeys(HOURS.slice(0, 2), '%Y-%m-%d-%H:%M%z', 'Europe/Berlin')).toEqual(['2026-11-15-06:00+0100', '2026-11-15-07:00+0100']);
    // New York on the night its clocks go back: 05:00Z and 06:00Z are both 01:00 local, told apart by the offset.
    expect(partitionKeys([new Date('2026-11-01T05:00:00Z'), new Date('2026-11-01T06:00:00Z')], '%Y-%m-%d-%H:%M%z', 'America/New_York'))
      .toEqual(['2026-11-01-01:00-0400', '2026-11-01-01:00-0500']);
  });

  it('refuses a format with a directive a time partition key does not use, when the catalog is checked', () => {
    expect(partitionFormatProblem('%Y-%m-%d-%H:%M')).toBeUndefined();
    expect(partitionFormatProblem('%Y-%j')).toBe('uses %j; a partition key format may use %Y %m %d %H %M %S %z and %% (e.g. "%Y-%m-%d-%H:%M")');
    expect(() => dagster('https://dagster.example.com', { partitionFormat: '%Y-%b' })).toThrow('partitionFormat: uses %b');
    expect(() => dagster('https://dagster.example.com', { timezone: 'Mars/Olympus' })).toThrow('timezone: is not an IANA time zone');
    expect(() => dagster('https://dagster.example.com', { job: { name: 'settlement_job', location: 'analytics' } })).toThrow('names either assets');
  });
});

describe('the dagster re-trigger', () => {
  it("launches one asset backfill over the asset's own partition keys, tagged with the replay's key, and waits for it", async () => {
    const api = await standInWith();
    const outcome = await runRemoteRetrigger(dagster(api.url), replay(), environment());
    expect(outcome).toEqual({ via: 'dagster', url: api.url, backfillId: api.backfills[0]?.id, found: false, status: 'COMPLETED' });
    expect(api.backfills).toEqual([expect.objectContaining({
      partitionNames: KEYS, assets: [['warehouse', 'settlement_report']], tags: new Map([['backfill-bot/replay-key', 'backfill-41-replay-settlement_report']]),
    })]);
    expect(api.requests.map((r) => `${String(r.operationName)} ${r.status}`)).toEqual([
      'BackfillBotFindBackfills 200', 'BackfillBotLaunchBackfill 200', 'BackfillBotBackfillStatus 200', 'BackfillBotBackfillStatus 200', 'BackfillBotBackfillStatus 200',
    ]);
    expect(new Set(api.requests.map((r) => r.token))).toEqual(new Set([TOKEN]));
  });

  it('launches one backfill when the replay is retried: the retries find it by its tag and wait for it', async () => {
    const api = await standInWith({ loseFirstLaunchAnswer: true });
    const env = environment();
    const lost = await failureOf(runRemoteRetrigger(dagster(api.url), replay(), env));
    expect(isBackfillError(lost) && lost.retryable).toBe(true);
    expect(lost.message).toContain(`Dagster's BackfillBotLaunchBackfill for settlement_report at ${api.url}/graphql did not answer`);
    for (let attempt = 0; attempt < 2; attempt += 1) {
      expect(await runRemoteRetrigger(dagster(api.url), replay(), env)).toMatchObject({ found: true, status: 'COMPLETED' });
    }
    expect(api.backfills).toHaveLength(1);
    expect(api.requests.filter((r) => r.operationName === 'BackfillBotLaunchBackfill')).toHaveLength(1);
  });

  it("launches one run of the job per partition with Dagster's partition tag; a retry launches only the runs it lacks", async () => {
    const api = await standInWith({ loseFirstLaunchAnswer: true });
    const env = environment();
    expect(isBackfillError(await failureOf(runRemoteRetrigger(dagster(api.url, JOB), replay(), env)))).toBe(true);
    const outcome = await runRemoteRetrigger(dagster(api.url, JOB), replay(), env);
    expect(outcome).toMatchObject({ via: 'dagster', found: false, status: 'SUCCESS' });
    expect(Object.keys((outcome as { runs: Record<string, string> }).runs)).toEqual(KEYS);
    expect(await runRemoteRetrigger(dagster(api.url, JOB), replay(), env)).toMatchObject({ found: true, status: 'SUCCESS' });
    expect(api.runs.map((run) => run.tags.get('dagster/partition')).sort()).toEqual(KEYS);
    expect(new Set(api.runs.map((run) => run.tags.get('backfill-bot/replay-key')))).toEqual(new Set(['backfill-41-replay-settlement_report']));
    expect(api.requests.filter((r) => r.operationName === 'BackfillBotLaunchRun')).toHaveLength(6);
  });

  it('fails the replay when a partition fails, or a run does, without a retry', async () => {
    const api = await standInWith({ end: 'failure' });
    const backfill = await failureOf(runRemoteRetrigger(dagster(api.url), replay(), environment()));
    expect(backfill.message).toBe(`settlement_report's Dagster backfill ${api.backfills[0]?.id} ended COMPLETED with 1 failed partition`);
    expect(isBackfillError(backfill) && backfill.retryable).toBe(false);
    const run = await failureOf(runRemoteRetrigger(dagster(api.url, JOB), replay(42), environment()));
    expect(run.message).toMatch(/^settlement_report's Dagster run [0-9a-f-]{36} \(partition 2026-11-15-05:00\) ended FAILURE$/);
  });

  it('fails a launch Dagster refuses with HTTP 200 (PythonError, InvalidSubsetError, UnauthorizedError), quoting it without the token', async () => {
    for (const __typename of ['PythonError', 'InvalidSubsetError', 'UnauthorizedError'] as const) {
      const api = await standInWith({ refuseLaunches: { __typename, message: `refused for the token ${TOKEN}` } });
      const error = await failureOf(runRemoteRetrigger(dagster(api.url), replay(), environment()));
      expect(error.message).toBe(`Dagster refused the backfill of warehouse/settlement_report for settlement_report (partitions 2026-11-15-05:00 … 2026-11-15-10:00): ${__typename}: refused for the token [redacted]`);
      expect(isBackfillError(error) && error.retryable).toBe(false);
      expect(api.requests.find((r) => r.operationName === 'BackfillBotLaunchBackfill')?.status).toBe(200);
      await api.close();
    }
  });

  it('sends keys the asset has: ISO hours name no partition, and Dagster refuses them', async () => {
    const api = await standInWith();
    const error = await failureOf(runRemoteRetrigger(dagster(api.url, { partitionFormat: '%Y-%m-%dT%H:%M:%S' }), replay(), environment()));
    expect(error.message).toContain('Dagster refused the backfill of warehouse/settlement_report for settlement_report (partitions 2026-11-15T05:00:00 … 2026-11-15T10:00:00): PythonError: ');
    expect(api.backfills).toEqual([]);
  });

  it('fails on GraphQL errors whatever the status: with 200 for good, with 500 to be retried', async () => {
    for (const status of [200, 500] as const) {
      const api = await standInWith({ launchFault: { message: `launch failed (token ${TOKEN})`, status } });
      const error = await failureOf(runRemoteRetrigger(dagster(api.url), replay(), environment()));
      expect(error.message).toBe(`Dagster's BackfillBotLaunchBackfill for settlement_report at ${api.url}/graphql answered ${status} with GraphQL errors: launch failed (token [redacted])`);
      expect(isBackfillError(error) && error.retryable).toBe(status === 500);
      await api.close();
    }
  });

  it("holds operations to Dagster's schema: what the bot sends validates, a field Dagster does not have does not", () => {
    const schema = GraphqlSchema.vendoredDagster();
    const params = { partitionNames: KEYS, assetSelection: [{ path: ['warehouse', 'settlement_report'] }], tags: [{ key: 'backfill-bot/replay-key', value: 'k' }] };
    expect(schema.check(LAUNCH_BACKFILL.query, { backfillParams: params })).toEqual([]);
    expect(schema.check(LAUNCH_BACKFILL.query, { backfillParams: { ...params, partitionKeys: KEYS } }))
      .toEqual(['Variable "$backfillParams" got invalid value; Field "partitionKeys" is not defined by type "LaunchBackfillParams".']);
    expect(schema.check(LAUNCH_BACKFILL.query.replace('backfillId', 'runId'), { backfillParams: params })).toEqual(['Cannot query field "runId" on type "LaunchBackfillSuccess".']);
  });

  it('shows the entry docs/catalog.md gives for Dagster is one the catalog accepts', () => {
    const retrigger = docsEntry('Dagster');
    expect(retrigger).toMatchObject({ kind: 'dagster', assets: ['warehouse/settlement_report'], partitionFormat: '%Y-%m-%d-%H:%M' });
    expect(retriggerUrlProblems(retrigger, ['dagster.example.com'])).toEqual([]);
  });
});
