import pg from 'pg';
import { Redis } from 'ioredis';
import { BackfillError, ErrorCode } from '../errors.js';
import { createDatabase } from './pool.js';
import { hasSqlState, SqlState } from './sqlState.js';

// What every entry point does before it relies on a service: one try, a short timeout, and when the service is
// not there a sentence naming it (the URL without its password), what was tried, and how to fix it; never a
// stack trace, and never a database created because its name was mistyped.

const CONNECT_TIMEOUT_MS = 5_000;

/** The URL as it can be printed: the password, if any, replaced. */
export function redactUrl(text: string): string {
  try {
    const url = new URL(text);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '(an unparsable URL)';
  }
}

/** Why a connection attempt failed, in a few words a person recognizes. */
function reason(error: unknown): string {
  const e = error as { code?: string; message?: string };
  switch (e.code) {
    case 'ECONNREFUSED': return 'the connection was refused (nothing listens there)';
    case 'ENOTFOUND': case 'EAI_AGAIN': return 'the host name does not resolve';
    case 'ETIMEDOUT': case 'EHOSTUNREACH': case 'ENETUNREACH': return 'the host did not answer';
    case SqlState.InvalidPassword: case SqlState.InvalidAuthorization: return `the server refused the login (${e.message ?? 'authentication failed'})`;
    default: return e.message ?? String(error);
  }
}

/**
 * Connects once to the database in `databaseUrl`. A database that does not exist is created only when
 * `create` says so (the demo, `backfill migrate --create`); otherwise its absence is a refusal naming the way
 * to create it.
 */
export async function requireDatabase(databaseUrl: string, options: { create: boolean; variable?: string }): Promise<void> {
  const variable = options.variable ?? 'DATABASE_URL';
  const url = new URL(databaseUrl);
  const name = decodeURIComponent(url.pathname.slice(1));
  const where = `${url.hostname}:${url.port || 5432}`;
  try {
    await connectOnce(databaseUrl);
    return;
  } catch (error) {
    if (!hasSqlState(error, SqlState.InvalidCatalogName)) {
      throw new BackfillError(ErrorCode.Unreachable,
        `PostgreSQL did not answer at ${where} (${variable}=${redactUrl(databaseUrl)}): ${reason(error)}. ` +
        `Start PostgreSQL there, or set ${variable} to a server that answers.`, { cause: error });
    }
    if (!options.create) {
      throw new BackfillError(ErrorCode.Unreachable,
        `The database "${name}" does not exist on ${where} (${variable}=${redactUrl(databaseUrl)}). ` +
        `Create it with \`npx backfill migrate --create\`, or correct the database name in ${variable}. Nothing was created.`, { cause: error });
    }
  }
  await createDatabase(databaseUrl);
}

async function connectOnce(connectionString: string): Promise<void> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: CONNECT_TIMEOUT_MS, application_name: 'backfill-bot-check' });
  // An error after the connection failed must not surface as an unhandled 'error' event.
  client.on('error', () => undefined);
  await client.connect();
  await client.end().catch(() => undefined);
}

/** One PING to the Redis in `redisUrl`, without the client's endless reconnecting. */
export async function requireRedis(redisUrl: string): Promise<void> {
  const redis = new Redis(redisUrl, { lazyConnect: true, connectTimeout: CONNECT_TIMEOUT_MS, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
  // The socket's own error (ECONNREFUSED, …) says why; connect() itself only rejects with "Connection is closed".
  let cause: unknown;
  redis.on('error', (error) => {
    cause ??= error;
  });
  try {
    await redis.connect();
    await redis.ping();
  } catch (error) {
    const url = new URL(redisUrl);
    throw new BackfillError(ErrorCode.Unreachable,
      `Redis did not answer at ${url.hostname}:${url.port || 6379} (REDIS_URL=${redactUrl(redisUrl)}): ${reason(cause ?? error)}. ` +
      'Start Redis there, or set REDIS_URL to one that answers.', { cause: error });
  } finally {
    redis.disconnect();
  }
}
