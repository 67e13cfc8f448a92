// Runs once per `vitest run`, before any test file: builds the seeded template databases that
// test/support/db.ts clones for each test file. Rebuilt from scratch every run, so a change to the
// migrations or to the demo seed is always what the tests see.

import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { openBackends } from '../../src/backends.js';
import { loadConfig } from '../../src/config.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool, quoteIdent } from '../../src/db/pool.js';
import { seedDemo } from '../../dev/demo/seed.js';
import { databaseUrl, dropDatabase, TEMPLATE_DATABASES, templateSeed, withAdminClient, type TemplateScenario } from './db.js';

const TEST_EMBEDDED_DIR = fileURLToPath(new URL('../../.backfill-bot/test-pg', import.meta.url));
// A test run keeps nothing: durability of the embedded server's files buys it nothing. Many test files each
// hold pools and queue connections at once. No autovacuum: no test depends on it, and a worker of it in a test
// database refuses that database's DROP … WITH (FORCE) to the bot's role, which may not end it.
const TEST_SERVER_SETTINGS = { fsync: 'off', synchronous_commit: 'off', full_page_writes: 'off', max_connections: '300', autovacuum: 'off' };

// Two engineers' runs share one Postgres: the swap of a template is serialized across processes.
const TEMPLATE_SWAP_LOCK = 'backfill-bot:test-template-swap';

async function seedDatabase(name: string, scenario: TemplateScenario): Promise<void> {
  await withAdminClient((client) => client.query(`CREATE DATABASE ${quoteIdent(name)}`));
  const pool = createPool(databaseUrl(name), 'backfill-bot-test-template');
  try {
    await migrate(pool);
    await seedDemo(pool, templateSeed(scenario));
  } finally {
    // A database with a connection left open can be neither renamed nor cloned.
    await pool.end();
  }
}

/**
 * Seeds under a temporary name and only then replaces the template (drop + rename), so a concurrent run that
 * clones the template at that moment gets the old one or the new one, never one half seeded.
 */
async function buildTemplate(scenario: TemplateScenario): Promise<void> {
  const name = TEMPLATE_DATABASES[scenario];
  const building = `${name}_build_${randomBytes(4).toString('hex')}`;
  try {
    await seedDatabase(building, scenario);
    await withAdminClient(async (client) => {
      await client.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [TEMPLATE_SWAP_LOCK]);
      await client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
      await client.query(`ALTER DATABASE ${quoteIdent(building)} RENAME TO ${quoteIdent(name)}`);
    });
  } catch (error) {
    await dropDatabase(building).catch(() => undefined);
    throw error;
  }
}

/**
 * Opens the run's backends (src/backends.ts decides, as for every entry point: DATABASE_URL's server, or the
 * embedded PostgreSQL under .backfill-bot/test-pg, fsync off since a test run keeps nothing) and builds the
 * templates on that server. The templates stay until the next run replaces them, because a concurrent run may
 * still be cloning them, and they are handy to open with psql. The teardown leaves the embedded server.
 */
export async function setup(): Promise<() => Promise<void>> {
  const started = performance.now();
  const backends = await openBackends(loadConfig({
    DATABASE_URL: process.env.DATABASE_URL,
    REDIS_URL: process.env.REDIS_URL,
    EMBEDDED_PG_DIR: TEST_EMBEDDED_DIR,
  }), { embeddedSettings: TEST_SERVER_SETTINGS, log: (line) => console.log(line) });
  const admin = new URL(backends.config.DATABASE_URL);
  admin.pathname = '/postgres';
  process.env.TEST_DATABASE_ADMIN_URL = admin.toString();
  console.log(`tests on ${backends.summary}`);
  try {
    await Promise.all((Object.keys(TEMPLATE_DATABASES) as TemplateScenario[]).map(buildTemplate));
  } catch (error) {
    await backends.close();
    throw error;
  }
  console.log(`test templates seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return () => backends.close();
}
