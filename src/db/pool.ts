import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** Anything that can run a query: a pool, or a client inside a transaction. */
export type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>;

// numeric stays a string all the way to the formatter: money never becomes a float.
// bigint (count(*)) is safe as a JS number at the sizes a partition has.
pg.types.setTypeParser(pg.types.builtins.INT8, (value) => Number.parseInt(value, 10));

export function createPool(databaseUrl: string, applicationName = 'backfill-bot'): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl, application_name: applicationName, max: 10 });
  // An idle client losing its connection must not take the process down; the next checkout reconnects.
  pool.on('error', (error) => {
    console.error(`postgres: idle client error: ${error.message}`);
  });
  return pool;
}

export async function withClient<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    return await work(client);
  } finally {
    client.release();
  }
}

const RETRYABLE_SQLSTATES = new Set(['40001', '40P01']);

export async function withTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await withClient(pool, async (client) => {
        await client.query('BEGIN');
        try {
          const result = await work(client);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          await client.query('ROLLBACK').catch(() => undefined);
          throw error;
        }
      });
    } catch (error) {
      const sqlstate = (error as { code?: unknown }).code;
      if (attempt >= attempts || typeof sqlstate !== 'string' || !RETRYABLE_SQLSTATES.has(sqlstate)) throw error;
      // Serialization failures and deadlocks are the database asking us to try again; jitter avoids lockstep.
      await new Promise((resolve) => setTimeout(resolve, 20 * attempt + Math.random() * 30));
    }
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

/** Creates the database named in the URL when it does not exist yet. */
export async function ensureDatabase(databaseUrl: string): Promise<void> {
  await withServerAdmin(databaseUrl, async (admin, name) => {
    const existing = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (existing.rowCount !== 0) return;
    try {
      await admin.query(`CREATE DATABASE ${quoteIdent(name)}`);
    } catch (error) {
      // Two processes starting at once: the other one created it.
      if ((error as { code?: unknown }).code !== '42P04') throw error;
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
