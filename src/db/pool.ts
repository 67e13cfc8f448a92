import { AsyncLocalStorage } from 'node:async_hooks';
import pg from 'pg';
import { logger } from '../log.js';
import { BackfillError, ErrorCode, isBackfillError } from '../errors.js';
import { hasSqlState, SqlState } from './sqlState.js';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** Anything that can run a query: a pool, or a client inside a transaction. */
export type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>;

// numeric stays a string all the way to the formatter: money never becomes a float.
// bigint (count(*)) is safe as a JS number at the sizes a partition has.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number.parseInt(value, 10));

/**
 * The settings every session of the bot carries. How long a statement may run, and wait for a lock, before
 * PostgreSQL cancels it (config: STATEMENT_TIMEOUT_MS, LOCK_TIMEOUT_MS), and how long a session may sit idle
 * inside a transaction before PostgreSQL ends it (IDLE_IN_TRANSACTION_TIMEOUT_MS): a worker frozen (SIGSTOP, a
 * paused VM) or gone between two statements of a transaction otherwise holds its locks for ever, since its kernel
 * still answers TCP keepalives. And whether PostgreSQL may compile its plans with JIT (DATABASE_JIT).
 */
export interface SessionSettings {
  statementTimeoutMs?: number | undefined;
  lockTimeoutMs?: number | undefined;
  idleInTransactionTimeoutMs?: number | undefined;
  /**
   * 'off': the session runs with `jit = off`. PostgreSQL decides to compile a plan from its total cost alone,
   * then compiles every node's expressions, pruned or not: a consumer's replay joining a day to a target of
   * 720 hourly partitions spent 2.4 s compiling 4,300 functions to read 1.2 million rows in 0.5 s
   * (docs/benchmark.md). 'server' (or unset): the server's own setting.
   */
  jit?: 'off' | 'server' | undefined;
}

export function sessionSettings(config: {
  STATEMENT_TIMEOUT_MS: number; LOCK_TIMEOUT_MS: number; STEP_LEASE_MS: number; IDLE_IN_TRANSACTION_TIMEOUT_MS?: number | undefined;
  DATABASE_JIT: 'off' | 'server';
}): SessionSettings {
  return {
    statementTimeoutMs: config.STATEMENT_TIMEOUT_MS, lockTimeoutMs: config.LOCK_TIMEOUT_MS,
    // A step's transaction idle longer than its lease belongs to a worker whose claim is gone anyway.
    idleInTransactionTimeoutMs: config.IDLE_IN_TRANSACTION_TIMEOUT_MS ?? config.STEP_LEASE_MS,
    jit: config.DATABASE_JIT,
  };
}

/** What of the session's settings goes in the startup packet (the timeouts are node-postgres' own options). */
export function startupSettings(settings: Pick<SessionSettings, 'jit'>): Record<string, string> {
  return settings.jit === 'off' ? { jit: 'off' } : {};
}

/**
 * The URL with `-c name=value` settings added to the startup packet's options, after those the URL or PGOPTIONS
 * already give (node-postgres takes the URL's `options` over its own config's, and PGOPTIONS only without
 * either, so the settings must join them in the URL to keep them).
 */
export function withStartupSettings(databaseUrl: string, settings: Record<string, string>): string {
  const entries = Object.entries(settings);
  if (entries.length === 0) return databaseUrl;
  const url = new URL(databaseUrl);
  const given = url.searchParams.get('options') ?? process.env.PGOPTIONS ?? '';
  const added = entries.map(([name, value]) => `-c ${name}=${value}`);
  url.searchParams.set('options', [given.trim(), ...added].filter(Boolean).join(' '));
  return url.toString();
}

/**
 * When the first TCP keepalive probe goes out on an idle connection (node-postgres' keepAlive; the interval and
 * count are the OS's). It finds a server or a network path that vanished without a word (a failover, a dropped
 * NAT entry), which otherwise leaves a query waiting for the OS default of two hours.
 */
const KEEPALIVE_INITIAL_DELAY_MS = 30_000;

/** The connections each pool has open, so a stopping process can cancel what they still run. */
const openClients = new WeakMap<pg.Pool, Set<pg.PoolClient>>();

/**
 * A pool whose every connection carries the settings (sent in the startup packet, so no statement of the bot runs
 * without them). Without settings the server's defaults apply: the bot's entry points (npm start, the worker, the
 * CLI, the demo) always pass them.
 */
export function createPool(databaseUrl: string, applicationName = 'backfill-bot', settings: SessionSettings = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: withStartupSettings(databaseUrl, startupSettings(settings)),
    application_name: applicationName, max: 10,
    statement_timeout: settings.statementTimeoutMs, lock_timeout: settings.lockTimeoutMs,
    idle_in_transaction_session_timeout: settings.idleInTransactionTimeoutMs,
    keepAlive: true, keepAliveInitialDelayMillis: KEEPALIVE_INITIAL_DELAY_MS,
  });
  // An idle client losing its connection must not take the process down; the next checkout reconnects.
  pool.on('error', (error) => {
    logger().warn({ err: error.message }, 'postgres: an idle client lost its connection');
  });
  const clients = new Set<pg.PoolClient>();
  openClients.set(pool, clients);
  pool.on('connect', (client) => {
    clients.add(client);
    // A checked-out client whose connection dies between queries emits 'error' on itself, not on the pool:
    // without a listener that would end the process. The query in flight (or the next) fails and is retried.
    client.on('error', (error) => logger().warn({ err: error.message }, 'postgres: a connection was lost'));
  });
  pool.on('remove', (client) => clients.delete(client));
  return pool;
}

// pg learns each connection's backend pid from the server (BackendKeyData); @types/pg does not declare it.
const backendPid = (client: pg.PoolClient): number | undefined => (client as pg.PoolClient & { processID?: number }).processID;

/**
 * Cancels every statement this pool's connections are running now (pg_cancel_backend, from a connection of its
 * own, since the pool's may all be busy). Their transactions roll back; the callers get a Cancelled error.
 * Returns how many statements were cancelled.
 */
export async function cancelRunningStatements(pool: pg.Pool): Promise<number> {
  const pids = [...(openClients.get(pool) ?? [])].map(backendPid).filter((pid): pid is number => pid !== undefined);
  if (pids.length === 0) return 0;
  const canceller = new pg.Client({
    connectionString: pool.options.connectionString, application_name: 'backfill-bot-cancel', statement_timeout: 10_000,
  });
  await canceller.connect();
  try {
    const { rows } = await canceller.query<{ n: number }>(
      `SELECT count(*) FILTER (WHERE pg_cancel_backend(pid))::int AS n FROM pg_stat_activity
       WHERE pid = ANY ($1::int[]) AND state = 'active' AND pid <> pg_backend_pid()`, [pids]);
    return rows[0]?.n ?? 0;
  } finally {
    await canceller.end();
  }
}

/**
 * A statement PostgreSQL cancelled, as a sentence: past STATEMENT_TIMEOUT_MS (not retried: the same work would
 * run as long again), past LOCK_TIMEOUT_MS waiting for a lock (retried: the holder usually finishes), or on
 * request (a stopping worker: retried by another). Anything else is returned as it is.
 */
export function explainCancellation(error: unknown, pool?: pg.Pool): unknown {
  if (isBackfillError(error) || !(error instanceof Error)) return error;
  const limit = (ms: unknown) => (typeof ms === 'number' ? ` (${ms} ms)` : '');
  if (hasSqlState(error, SqlState.LockNotAvailable) && /lock timeout/.test(error.message)) {
    return new BackfillError(ErrorCode.Timeout,
      `A statement waited longer than LOCK_TIMEOUT_MS${limit(pool?.options.lock_timeout)} for a lock another transaction holds, and PostgreSQL cancelled it; ` +
      'nothing of its transaction was committed. It can be retried; if it keeps waiting, pg_stat_activity shows the transaction holding the lock.', { cause: error, retryable: true });
  }
  if (hasSqlState(error, SqlState.QueryCanceled) && /statement timeout/.test(error.message)) {
    return new BackfillError(ErrorCode.Timeout,
      `A statement ran longer than STATEMENT_TIMEOUT_MS${limit(pool?.options.statement_timeout)} and PostgreSQL cancelled it; nothing of its transaction was committed. ` +
      'Raise STATEMENT_TIMEOUT_MS if the work really is that large, or find what it waited on (pg_stat_activity, EXPLAIN).', { cause: error });
  }
  if (hasSqlState(error, SqlState.QueryCanceled)) {
    return new BackfillError(ErrorCode.Cancelled,
      'A statement was cancelled on request (its worker was stopping, or someone ran pg_cancel_backend); nothing of its transaction was committed, and it can be retried.',
      { cause: error, retryable: true });
  }
  return error;
}

/** One round trip: the health check's proof that the database answers. */
export async function pingDatabase(db: Queryable): Promise<void> {
  await db.query('SELECT 1');
}

export async function withClient<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    return await work(client);
  } catch (error) {
    throw explainCancellation(error, pool);
  } finally {
    client.release();
  }
}

/**
 * The name transactions started inside `work` carry in pg_stat_activity.application_name (SET LOCAL: from their
 * BEGIN to their end, and only then). A step's transactions carry its claim's (stepClaims.ts), so a worker taking
 * the step over finds the session still holding it, and no other, by that name: a pid can be reused, a name
 * made from a claim's token cannot.
 */
const transactionName = new AsyncLocalStorage<string>();

export function withTransactionsNamed<T>(name: string, work: () => Promise<T>): Promise<T> {
  return transactionName.run(name, work);
}

/**
 * Ends the sessions of the bot's own role, other than this one, whose open transaction carries one of `names` (see
 * withTransactionsNamed), waiting up to `waitMs` for each to be gone; their transactions roll back and their locks
 * go. Only its own role's: that is all a role that is no superuser may signal, and all the bot should.
 * Returns the pids ended.
 */
export async function terminateTransactionsNamed(db: Queryable, names: readonly string[], waitMs: number): Promise<number[]> {
  if (names.length === 0) return [];
  const { rows } = await db.query<{ pid: number }>(
    // MATERIALIZED: every condition is decided before anyone is signalled (the planner may order quals as it likes).
    `WITH holders AS MATERIALIZED (
       SELECT pid FROM pg_stat_activity
       WHERE application_name = ANY ($1::text[]) AND usename = current_user AND datname = current_database()
         AND pid <> pg_backend_pid() AND xact_start IS NOT NULL)
     SELECT pid FROM holders WHERE pg_terminate_backend(pid, $2::bigint)`, [names, waitMs]);
  return rows.map((row) => row.pid);
}

export async function withTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await withClient(pool, async (client) => {
        try {
          // One round trip for the transaction and the name it carries: one simple-protocol string, so the name
          // goes as an escaped literal (it is the bot's own, a claim's: stepClaims.ts claimHolderName).
          const name = transactionName.getStore();
          await client.query(name === undefined ? 'BEGIN' : `BEGIN; SELECT set_config('application_name', ${client.escapeLiteral(name)}, true)`);
          const result = await work(client);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => undefined);
          throw error;
        }
      });
    } catch (error) {
      if (attempt >= attempts || !hasSqlState(error, SqlState.SerializationFailure, SqlState.DeadlockDetected)) throw error;
      // Serialization failures and deadlocks are the database asking us to try again; jitter avoids lockstep.
      await new Promise((resolve) => setTimeout(resolve, 20 * attempt + Math.random() * 30));
    }
  }
}

/**
 * A savepoint of the caller's transaction (the tick's per-hour one, a stage's indexes, a step's companion hour, start's
 * envelope, a catalog removal), a rollback to it, and its release.
 */
export type SavepointName = 'tick_hour' | 'index_like_target' | 'preview_keep' | 'catalog_remove' | 'companion_hour';

export async function setSavepoint(tx: Queryable, name: SavepointName): Promise<void> {
  await tx.query(`SAVEPOINT ${name}`);
}

export async function rollbackToSavepoint(tx: Queryable, name: SavepointName): Promise<void> {
  await tx.query(`ROLLBACK TO SAVEPOINT ${name}`);
}

/** What undoneIfRefused gives back: the work's value, or the refusal it undid. */
export type Refusable<T> = { done: true; value: T } | { done: false; error: unknown };

/**
 * Runs `work` in a savepoint of the caller's transaction. Where it throws an error `refusal` accepts, what it did is
 * undone, the transaction stays usable, and the error is given back instead; any other error is thrown.
 */
export async function undoneIfRefused<T>(tx: Queryable, name: SavepointName, work: () => Promise<T>, refusal: (error: unknown) => boolean): Promise<Refusable<T>> {
  await tx.query(`SAVEPOINT ${name}`);
  try {
    const value = await work();
    await tx.query(`RELEASE SAVEPOINT ${name}`);
    return { done: true, value };
  } catch (error) {
    if (!refusal(error)) throw error;
    // One round trip for the two (a simple-protocol string: the name is one of SavepointName).
    await tx.query(`ROLLBACK TO SAVEPOINT ${name}; RELEASE SAVEPOINT ${name}`);
    return { done: false, error };
  }
}

/** Runs `work` on a connection to the "postgres" database of the server in the URL; gives it the URL's database name. */
async function withServerAdmin<T>(databaseUrl: string, work: (admin: pg.Client, name: string) => Promise<T>): Promise<T> {
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  url.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: url.toString(), application_name: 'backfill-bot-setup' });
  await admin.connect();
  try {
    return await work(admin, name);
  } finally {
    await admin.end();
  }
}

/** Creates the database named in the URL; one that another process created meanwhile is fine. */
export async function createDatabase(databaseUrl: string): Promise<void> {
  await withServerAdmin(databaseUrl, async (admin, name) => {
    try {
      await admin.query(`CREATE DATABASE ${quoteIdent(name)}`);
    } catch (error) {
      if (!hasSqlState(error, SqlState.DuplicateDatabase)) throw error;
    }
  });
}

/** Drops the database named in the URL, if it exists, disconnecting whoever is still on it. */
export async function dropDatabase(databaseUrl: string): Promise<void> {
  await withServerAdmin(databaseUrl, async (admin, name) => {
    await admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
  });
}

/** A new, empty database under the URL's name (for the demo and the benchmark, never the working one). */
export async function recreateDatabase(databaseUrl: string): Promise<void> {
  await dropDatabase(databaseUrl);
  await withServerAdmin(databaseUrl, async (admin, name) => {
    await admin.query(`CREATE DATABASE ${quoteIdent(name)}`);
  });
}

export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Quotes a possibly schema-qualified name such as warehouse.orders. */
export function quoteQualified(name: string): string {
  return name.split('.').map(quoteIdent).join('.');
}

/** Called after each statement of a transaction that offers it; a test acts there (another writer commits). */
export type StatementSeam = (statement: string) => Promise<void>;

/**
 * The client, with `seam` awaited after each of its statements: how a test puts another writer between any two
 * statements of a publish or a rollback. Without a seam (always, outside tests) the client itself.
 */
export function withStatementSeam(client: PoolClient, seam: StatementSeam | undefined): PoolClient {
  if (!seam) return client;
  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') {
        return async (...args: Parameters<PoolClient['query']>) => {
          const result: unknown = await (target.query as (...a: unknown[]) => Promise<unknown>)(...args);
          const text = args[0];
          await seam(typeof text === 'string' ? text : String((text as { text?: unknown } | undefined)?.text ?? ''));
          return result;
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
