import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { loadConfig } from '../../src/config.js';
import { parseCatalogText } from '../../src/core/catalog/schema.js';
import type { RetriggerEnvironment } from '../../src/core/retrigger/call.js';
import { parseRetrigger, type RemoteRetrigger } from '../../src/core/retrigger/definition.js';
import { runRemoteRetrigger } from '../../src/core/retrigger/retrigger.js';
import { systemResolver, type HostResolver } from '../../src/core/retrigger/urlPolicy.js';
import { BullmqReplayJobs } from '../../src/queue/replayJobs.js';
import { BackfillError, ErrorCode, isBackfillError } from '../../src/errors.js';

// Where webhook and REST re-triggers may go (src/core/retrigger/urlPolicy.ts): http(s) only, no credentials in
// the URL, only hosts RETRIGGER_ALLOWED_HOSTS allows, loopback, link-local and metadata addresses only when named
// exactly, checked again when the worker calls (after DNS, connecting to the addresses it checked), no
// redirects; and what an orchestrator answers is quoted only redacted and bounded, a state only when the
// catalog names it. The receivers are real HTTP servers on loopback; the one injected function stands for DNS.

const PASSWORD = 'planted-url-password-7Q2';
const QUERY_KEY = 'planted-query-key-9X4';
const TOKEN = 'planted-orchestrator-token-3K8';
const STATE_SECRET = 'planted-state-secret-5M1';

/** A catalog of one consumer re-triggered as given, as a person writes the file. */
function catalogWith(retrigger: unknown): string {
  return stringify({ pipelines: [], signers: [], consumers: [{ name: 'ops_report', kind: 'report', owner: 'U07OPS', rule: 'after', retrigger }] });
}

/** The refusal the catalog gives (its message), or '' when it accepts the file. */
function catalogRefusal(retrigger: unknown, allowedHosts: readonly string[]): string {
  try {
    parseCatalogText(catalogWith(retrigger), 'ops.yml', allowedHosts);
    return '';
  } catch (error) {
    if (!isBackfillError(error, ErrorCode.BadInput)) throw error;
    return error.message;
  }
}

const refusedAt = (place: string, problem: string) => `The catalog ops.yml was not applied (nothing changed):\n  - consumers[0] (ops_report).retrigger.${place}: ${problem}`;
const HEADER_INSTEAD = "send it in a header whose value is {env: RETRIGGER_SECRET_…} instead (a rest re-trigger's headers), so that the catalog never holds a secret";

describe('the catalog refuses re-trigger URLs that are not http(s), carry credentials or reach a host not allowed', () => {
  const allowed = ['orch.example.com', '*.example.com'];

  it.each([
    ['a file: URL', 'file:///etc/passwd', 'uses file:, which a re-trigger never calls: only http:// and https:// URLs are allowed'],
    ['a data: URL', 'data:text/plain,hello', 'uses data:, which a re-trigger never calls: only http:// and https:// URLs are allowed'],
    ['a gopher: URL', 'gopher://orch.example.com:6379/_FLUSHALL', 'uses gopher:, which a re-trigger never calls: only http:// and https:// URLs are allowed'],
    ['user:password@ in the URL', `https://ops:${PASSWORD}@orch.example.com/hooks/replay`, `carries credentials in the URL (user:password@): ${HEADER_INSTEAD}`],
    ['an api_key in the query', `https://orch.example.com/hooks/replay?dag=ops&api_key=${QUERY_KEY}`, `carries a credential in its query (api_key=[redacted]): ${HEADER_INSTEAD}`],
    ['a placeholder in the host', 'https://{{consumer}}.example.com/replay', 'has a placeholder before its path: write the scheme, host and port out, so that the host it reaches can be checked against RETRIGGER_ALLOWED_HOSTS'],
    ['not a URL', 'orch.example.com/replay', 'must be an http:// or https:// URL, e.g. https://orchestrator.example.com/api/v1/dags/settlement/dagRuns'],
    ['a host not allowed', 'https://orch.example.net/replay',
      'reaches orch.example.net, which RETRIGGER_ALLOWED_HOSTS does not allow (it allows orch.example.com, *.example.com): add orch.example.net to it where the catalog is applied and on every worker, or correct the URL'],
    ['169.254.169.254, though a wildcard is allowed', 'http://169.254.169.254/latest/meta-data/iam/security-credentials/',
      "reaches 169.254.169.254, a cloud metadata service's address, which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)"],
    ['metadata.google.internal under an allowed wildcard', 'http://metadata.google.internal/computeMetadata/v1/',
      "reaches metadata.google.internal, a cloud metadata service's address, which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)"],
    ["AWS's IPv6 metadata address", 'http://[fd00:ec2::254]/latest/meta-data/',
      "reaches fd00:ec2::254, a cloud metadata service's address, which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)"],
    ['the metadata address as IPv4-mapped IPv6', 'http://[::ffff:169.254.169.254]/',
      "reaches ::ffff:a9fe:a9fe, a cloud metadata service's address, which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)"],
    ['a link-local address', 'http://[fe80::1]:8080/replay',
      'reaches fe80::1, a link-local address (169.254.0.0/16, fe80::/10), which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)'],
    ['loopback, not named', 'http://127.0.0.1:8080/admin',
      'reaches 127.0.0.1, a loopback address (127.0.0.0/8, ::1), which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)'],
    ['loopback written as a number', 'http://2130706433:8080/admin',
      'reaches 127.0.0.1, a loopback address (127.0.0.0/8, ::1), which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)'],
    ['localhost, not named', 'http://localhost:8080/admin',
      'reaches localhost, a loopback address (127.0.0.0/8, ::1), which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)'],
  ])('refuses %s with a sentence, never repeating a credential', (_what, url, problem) => {
    const message = catalogRefusal({ kind: 'webhook', url }, allowed);
    expect(message).toBe(refusedAt('url', problem));
    expect(message).not.toContain(PASSWORD);
    expect(message).not.toContain(QUERY_KEY);
  });

  it("checks a REST re-trigger's status URL too, and says which variable to set when none is allowed", () => {
    const rest = {
      kind: 'rest', url: 'https://orch.example.com/api/v1/dags/ops/dagRuns',
      status: { url: 'http://169.254.169.254/latest/{{run_id}}', field: 'state', success: ['success'], failure: ['failed'] },
    };
    expect(catalogRefusal(rest, allowed)).toBe(refusedAt('status.url',
      "reaches 169.254.169.254, a cloud metadata service's address, which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)"));
    expect(catalogRefusal({ kind: 'webhook', url: 'https://orch.example.com/replay' }, [])).toBe(refusedAt('url',
      'reaches orch.example.com, and RETRIGGER_ALLOWED_HOSTS is not set, so no remote re-trigger host is allowed: set RETRIGGER_ALLOWED_HOSTS=orch.example.com (comma-separated; *.example.com covers the names under it) where the catalog is applied and on every worker'));
  });

  it('accepts an allowed host, a wildcard name under it, and a special address only when named exactly', () => {
    expect(catalogRefusal({ kind: 'webhook', url: 'https://orch.example.com/replay?dag=ops' }, allowed)).toBe('');
    expect(catalogRefusal({ kind: 'webhook', url: 'https://airflow.eu.example.com/replay' }, allowed)).toBe('');
    // The wildcard covers the names under example.com, not example.com itself.
    expect(catalogRefusal({ kind: 'webhook', url: 'https://example.com/replay' }, ['*.example.com'])).toContain('reaches example.com, which RETRIGGER_ALLOWED_HOSTS does not allow');
    expect(catalogRefusal({ kind: 'webhook', url: 'http://169.254.169.254/latest' }, ['169.254.169.254'])).toBe('');
    expect(catalogRefusal({ kind: 'webhook', url: 'http://[::1]:8080/replay' }, ['::1'])).toBe('');
  });

  it("checks a BullMQ re-trigger's own queue connection against the same hosts", () => {
    expect(catalogRefusal({ kind: 'bullmq', queue: 'exports', jobName: 'rebuild', connection: 'redis://169.254.169.254:6379' }, allowed)).toBe(refusedAt('connection',
      "reaches 169.254.169.254, a cloud metadata service's address, which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)"));
    expect(catalogRefusal({ kind: 'bullmq', queue: 'exports', jobName: 'rebuild', connection: 'redis://queues.example.com:6379' }, allowed)).toBe('');
    expect(catalogRefusal({ kind: 'bullmq', queue: 'exports', jobName: 'rebuild', connection: 'default' }, [])).toBe('');
  });

  it('the replay checks a stored definition with the same schema: a file: URL in the table is refused before any call', () => {
    expect(() => parseRetrigger('ops_report', { kind: 'webhook', url: 'file:///etc/passwd' })).toThrow(
      'consumer ops_report has an unusable retrigger definition (url: uses file:, which a re-trigger never calls: only http:// and https:// URLs are allowed)');
  });
});

describe('RETRIGGER_ALLOWED_HOSTS', () => {
  it('is read as names, wildcards and IP addresses in one spelling each; unset allows none', () => {
    expect(loadConfig({ RETRIGGER_ALLOWED_HOSTS: ' Airflow.Internal., *.orchestrator.example.com, [::1], 10.0.4.12 ' }).RETRIGGER_ALLOWED_HOSTS)
      .toEqual(['airflow.internal', '*.orchestrator.example.com', '::1', '10.0.4.12']);
    expect(loadConfig({}).RETRIGGER_ALLOWED_HOSTS).toEqual([]);
  });

  it.each(['*', '*.com', 'https://airflow.internal', 'airflow.internal:8080', 'user@host'])('refuses %s with a sentence and an example', (entry) => {
    expect(() => loadConfig({ RETRIGGER_ALLOWED_HOSTS: `airflow.internal,${entry}` })).toThrow(
      `RETRIGGER_ALLOWED_HOSTS: "${entry}" is not a host name, a *.wildcard of at least two labels or an IP address, comma-separated, e.g. airflow.internal,*.orchestrator.example.com,10.0.4.12`);
  });
});

interface Received {
  method: string | undefined;
  url: string | undefined;
  headers: IncomingMessage['headers'];
}

/** A receiver on loopback: each request is recorded and answered by `answer`. */
async function startReceiver(answer: (req: IncomingMessage, received: Received[]) => { status: number; body?: string; headers?: Record<string, string> }): Promise<{ server: Server; port: number; received: Received[] }> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      received.push({ method: req.method, url: req.url, headers: req.headers });
      const { status, body, headers } = answer(req, received);
      res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(body ?? '');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port, received };
}

/** The environment a worker replays in: its configuration, and (standing for DNS) how it resolves names. */
function environment(env: Record<string, string>, resolveHost?: HostResolver): RetriggerEnvironment {
  return { config: loadConfig({ WEBHOOK_SIGNING_SECRET: 'url-policy-test-signing-secret', WEBHOOK_TIMEOUT_MS: '2000', ...env }), resolveHost };
}

const CALL = { backfillId: 7, consumer: 'ops_report', partitions: [new Date('2026-11-15T05:00:00Z')], rollback: false };

/** The replay's refusal, or a failure of the test when it succeeded. */
async function refusalOf(retrigger: RemoteRetrigger, env: RetriggerEnvironment): Promise<BackfillError> {
  const outcome = await runRemoteRetrigger(retrigger, CALL, env).then(() => undefined, (error: unknown) => error);
  if (!isBackfillError(outcome)) throw new Error(`expected a refusal, got ${String(outcome)}`);
  return outcome;
}

describe('at call time', () => {
  let server: Server | undefined;
  afterEach(async () => {
    if (server) await new Promise((resolve) => server?.close(resolve));
    server = undefined;
  });

  it('refuses a host whose DNS answer changed to a metadata or link-local address after the catalog accepted it, and connects only to checked addresses', async () => {
    const receiver = await startReceiver(() => ({ status: 200, body: '{}' }));
    server = receiver.server;
    const url = `http://orch.internal.test:${receiver.port}/replay`;
    // The catalog accepts the URL: the name is allowed (and loopback too, where the receiver is).
    const allowedHosts = 'orch.internal.test,127.0.0.1';
    expect(parseCatalogText(catalogWith({ kind: 'webhook', url }), 'ops.yml', ['orch.internal.test', '127.0.0.1']).consumers).toHaveLength(1);

    // DNS answers the receiver's address: the call reaches it, though no real DNS knows the name, because the
    // connection goes to the address that was checked.
    let answer = ['127.0.0.1'];
    const dns: HostResolver = async (host) => (host === 'orch.internal.test' ? answer.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })) : systemResolver(host));
    const env = environment({ RETRIGGER_ALLOWED_HOSTS: allowedHosts }, dns);
    await expect(runRemoteRetrigger({ kind: 'webhook', url }, CALL, env)).resolves.toMatchObject({ via: 'webhook', status: 200 });
    expect(receiver.received).toHaveLength(1);

    // Then the name is pointed at the metadata service, or at a link-local address among others: refused, not called.
    for (const [addresses, words] of [
      [['169.254.169.254'], "169.254.169.254, a cloud metadata service's address"],
      [['127.0.0.1', 'fe80::1'], 'fe80::1, a link-local address (169.254.0.0/16, fe80::/10)'],
    ] as const) {
      answer = [...addresses];
      const error = await refusalOf({ kind: 'webhook', url }, env);
      expect(error.message).toBe(`webhook ${url} for ops_report was not called: it reaches orch.internal.test, which resolves to ${words}: ` +
        'a re-trigger reaches one only when RETRIGGER_ALLOWED_HOSTS names that address itself');
      expect(error.retryable).toBe(false);
    }
    expect(receiver.received).toHaveLength(1);
  });

  it("refuses localhost as the system's resolver answers it (loopback) unless the address itself is named", async () => {
    const receiver = await startReceiver(() => ({ status: 200 }));
    server = receiver.server;
    const url = `http://localhost:${receiver.port}/replay`;
    const error = await refusalOf({ kind: 'webhook', url }, environment({ RETRIGGER_ALLOWED_HOSTS: 'localhost' }));
    expect(error.message).toMatch(new RegExp(`^webhook ${url} for ops_report was not called: it reaches localhost, which resolves to (127\\.0\\.0\\.1|::1), a loopback address`));
    expect(receiver.received).toHaveLength(0);
    // Named, with every address it resolves to here: called.
    const addresses = (await systemResolver('localhost')).map((entry) => entry.address);
    await expect(runRemoteRetrigger({ kind: 'webhook', url }, CALL, environment({ RETRIGGER_ALLOWED_HOSTS: ['localhost', ...addresses].join(',') })))
      .resolves.toMatchObject({ status: 200 });
    expect(receiver.received).toHaveLength(1);
  });

  it('refuses a URL the worker does not allow, though a catalog checked elsewhere stored it, before any connection', async () => {
    const receiver = await startReceiver(() => ({ status: 200 }));
    server = receiver.server;
    const error = await refusalOf({ kind: 'webhook', url: `http://127.0.0.1:${receiver.port}/replay` }, environment({}));
    expect(error.message).toBe(`webhook http://127.0.0.1:${receiver.port}/replay for ops_report was not called: it reaches 127.0.0.1, and RETRIGGER_ALLOWED_HOSTS is not set, so no remote re-trigger host is allowed: ` +
      'set RETRIGGER_ALLOWED_HOSTS=127.0.0.1 (comma-separated; *.example.com covers the names under it) where the catalog is applied and on every worker');
    expect(receiver.received).toHaveLength(0);
  });

  it("refuses a consumer's queue whose connection secret points at a host not allowed, before connecting, without its password", async () => {
    const password = 'planted-queue-password-2W6';
    const config = { ...loadConfig({ RETRIGGER_ALLOWED_HOSTS: 'queues.example.com', RETRIGGER_SECRET_QUEUE: `redis://:${password}@169.254.169.254:6379/0` }), DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/postgres' };
    const jobs = new BullmqReplayJobs(config);
    try {
      const error = await refusalOf({ kind: 'bullmq', queue: 'exports', jobName: 'rebuild', connection: { env: 'RETRIGGER_SECRET_QUEUE' } }, { config, replayJobs: jobs });
      // The whole URL is the secret's value, so it is redacted whole.
      expect(error.message).toBe("the queue exports of ops_report at [redacted] was not used: it reaches 169.254.169.254, a cloud metadata service's address, " +
        'which a re-trigger reaches only when RETRIGGER_ALLOWED_HOSTS names it exactly (a wildcard does not)');
      expect(error.message).not.toContain(password);
    } finally {
      await jobs.close();
    }
  });

  it('refuses a redirect, without following it or repeating where it pointed', async () => {
    const receiver = await startReceiver(() => ({ status: 302, headers: { location: `http://169.254.169.254/latest/meta-data/?token=${QUERY_KEY}` } }));
    server = receiver.server;
    const base = `http://127.0.0.1:${receiver.port}`;
    const env = environment({ RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
    const webhook = await refusalOf({ kind: 'webhook', url: `${base}/replay` }, env);
    expect(webhook.message).toBe(`webhook ${base}/replay for ops_report answered 302, a redirect, which a re-trigger never follows (it could lead past the host checks): put the URL it redirects to in the catalog`);
    expect(webhook.retryable).toBe(false);
    const rest = await refusalOf({ kind: 'rest', url: `${base}/api/runs` }, env);
    expect(rest.message).toBe(`the re-trigger of ops_report at ${base}/api/runs answered 302, a redirect, which a re-trigger never follows (it could lead past the host checks): put the URL it redirects to in the catalog`);
    // Each was called once, and nothing followed the Location.
    expect(receiver.received.map((request) => request.url)).toEqual(['/replay', '/api/runs']);
  });

  it("quotes an orchestrator's 500 that echoes the secret header redacted and bounded", async () => {
    const receiver = await startReceiver((req) => ({
      status: 500,
      body: JSON.stringify({ error: 'upstream failed', request: { headers: req.headers }, trace: 'x'.repeat(5000) }),
    }));
    server = receiver.server;
    const url = `http://127.0.0.1:${receiver.port}/api/runs`;
    const env = environment({ RETRIGGER_ALLOWED_HOSTS: '127.0.0.1', RETRIGGER_SECRET_ORCH_TOKEN: TOKEN });
    const error = await refusalOf({ kind: 'rest', url, headers: { Authorization: { env: 'RETRIGGER_SECRET_ORCH_TOKEN' } } }, env);
    // The orchestrator did get the token, and did send it back.
    expect(receiver.received[0]?.headers.authorization).toBe(TOKEN);
    expect(error.message).toMatch(new RegExp(`^the re-trigger of ops_report at ${url} answered 500: \\{"error":"upstream failed","request":\\{"headers":\\{`));
    expect(error.message).not.toContain(TOKEN);
    expect(error.message).toContain('[redacted]');
    expect(error.message).toMatch(/… \(\d+ more characters not shown\)$/);
    expect(error.message.length).toBeLessThan(400);
    expect(error.retryable).toBe(true);
  });

  it('never shows a status value the catalog does not name: a status URL whose field holds a secret says "an unrecognised state"', async () => {
    const receiver = await startReceiver((req) => (req.method === 'POST'
      ? { status: 200, body: JSON.stringify({ id: 'run-1' }) }
      : { status: 200, body: JSON.stringify({ data: { state: STATE_SECRET } }) }));
    server = receiver.server;
    const base = `http://127.0.0.1:${receiver.port}`;
    const env = environment({ RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
    const error = await refusalOf({
      kind: 'rest', url: `${base}/api/runs`,
      status: { url: `${base}/internal/config/{{run_id}}`, field: 'data.state', success: ['success'], failure: ['failed', 'upstream_failed'], runIdField: 'id', pollMs: 10, timeoutMs: 50 },
    }, env);
    expect(error.message).toBe(`ops_report's run run-1 is still in an unrecognised state (not one of success, failed, upstream_failed) after 50 ms (${base}/internal/config/run-1)`);
    expect(error.message).not.toContain(STATE_SECRET);
    expect(receiver.received.filter((request) => request.method === 'GET').length).toBeGreaterThan(0);
  });

  it('checks the status URL as filled, at call time: a run id cannot move it to another host', async () => {
    const receiver = await startReceiver(() => ({ status: 200, body: JSON.stringify({ id: '@169.254.169.254/' }) }));
    server = receiver.server;
    const base = `http://127.0.0.1:${receiver.port}`;
    const env = environment({ RETRIGGER_ALLOWED_HOSTS: '127.0.0.1' });
    // The id is encoded into the path, so the URL stays on the allowed host (and is checked again as filled).
    const error = await refusalOf({
      kind: 'rest', url: `${base}/api/runs`,
      status: { url: `${base}/runs/{{run_id}}`, field: 'state', success: ['success'], failure: ['failed'], runIdField: 'id', pollMs: 10, timeoutMs: 30 },
    }, env);
    expect(error.message).toContain(`(${base}/runs/%40169.254.169.254%2F)`);
    expect(receiver.received.filter((request) => request.method === 'GET').every((request) => request.url === '/runs/%40169.254.169.254%2F')).toBe(true);
  });
});
