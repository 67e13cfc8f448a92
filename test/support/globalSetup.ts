// Runs once per `vitest run`, before any test file: builds the seeded template databases that
// test/support/db.ts clones for each test file. Rebuilt from scratch every run, so a change to the
// migrations or to the demo seed is always what the tests see.

import { randomBytes } from 'node:crypto';
import { migrate } from '../../src/db/migrate.js';
import { createPool, quoteIdent } from '../../src/db/pool.js';
import { seedDemo } from '../../src/demo/seed.js';
import { databaseUrl, dropDatabase, TEMPLATE_DATABASES, templateSeed, withAdminClient, type TemplateScenario } from './db.js';

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

// No teardown: the templates stay until the next run replaces them, because a concurrent run may still be
// cloning them, and they are handy to open with psql.
export async function setup(): Promise<void> {
  const started = performance.now();
  await Promise.all((Object.keys(TEMPLATE_DATABASES) as TemplateScenario[]).map(buildTemplate));
  console.log(`test templates seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
}
