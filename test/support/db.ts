// One real PostgreSQL database per test file, cloned from a template that globalSetup migrated and seeded once
// per `vitest run`: a clone of the seeded month takes a fraction of a second, seeding it takes seconds.
// Set KEEP_TEST_DB=1 to keep each test database (its name is printed) and look at it with psql afterwards.

import { createHash, randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate } from '../../src/db/migrate.js';
import { createPool, quoteIdent } from '../../src/db/pool.js';
import type { DemoScenario } from '../../dev/demo/constants.js';
import type { TargetShape } from '../../dev/demo/seed.js';

/** A seeded demo world: a scenario, and month-end again with warehouse.orders partitioned by hour. */
export type TemplateScenario = DemoScenario | 'month-end-partitioned';
export type TestScenario = 'empty' | TemplateScenario;

/**
 * What the templates are built from: the migrations and the demo world. Two checkouts testing on one server (a
 * branch with a migration more, say) each get templates of their own, named by this digest, instead of cloning a
 * template the other migrated past them ("the database is at migration 25 but this code only knows 24"). Those of
 * an older digest stay on the server (another checkout may still clone them): drop them by hand when done.
 */
function templateDigest(): string {
  const hash = createHash('sha256');
  for (const folder of ['../../migrations/', '../../dev/demo/']) {
    const dir = fileURLToPath(new URL(folder, import.meta.url));
    for (const name of readdirSync(dir).sort()) hash.update(name).update(readFileSync(`${dir}${name}`));
  }
  return hash.digest('hex').slice(0, 8);
}

const DIGEST = templateDigest();

export const TEMPLATE_DATABASES: Record<TemplateScenario, string> = {
  'month-end': `backfill_bot_test_tpl_month_end_${DIGEST}`,
  'night-9-outage': `backfill_bot_test_tpl_night9_${DIGEST}`,
  'month-end-partitioned': `backfill_bot_test_tpl_month_end_part_${DIGEST}`,
};

/**
 * The partitioned template has hourly partitions on 2026-11-15 only (the night the tests backfill) and daily
 * ones elsewhere: a clone of it costs a fraction of one with 720 partitions.
 */
export function templateSeed(scenario: TemplateScenario): { scenario: DemoScenario; target: TargetShape; hourlyDays?: string[] } {
  return scenario === 'month-end-partitioned' ? { scenario: 'month-end', target: 'partitioned', hourlyDays: ['2026-11-15'] } : { scenario, target: 'plain' };
}

// Tests read the environment directly; only src/ goes through src/config.ts. The server the tests use is
// decided once per run by globalSetup, through src/backends.ts like every entry point (DATABASE_URL's server,
// or the embedded PostgreSQL when it is unset), and handed to the test files as TEST_DATABASE_ADMIN_URL.
export function adminUrl(): string {
  const url = process.env.TEST_DATABASE_ADMIN_URL;
  if (!url) throw new Error('TEST_DATABASE_ADMIN_URL is not set: run the tests through vitest, whose globalSetup sets it');
  return url;
}

/** The Redis the tests use: REDIS_URL when set; unset, the queues are BullMQ's PostgreSQL backend. */
export function testRedisUrl(): string | undefined {
  return process.env.REDIS_URL || undefined;
}

export function databaseUrl(name: string): string {
  const url = new URL(adminUrl());
  url.pathname = `/${encodeURIComponent(name)}`;
  return url.toString();
}

export async function withAdminClient<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: adminUrl(), application_name: 'backfill-bot-test-setup' });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

const CANNOT_TERMINATE = '42501';
const DROP_ATTEMPTS = 20;

/**
 * Drops a test database and ends its sessions. A role that is no superuser may not end an autovacuum worker
 * (42501, "permission denied to terminate process"), which a server with autovacuum on may have in the database
 * at that moment: the drop is tried again once it has moved on.
 */
export async function dropDatabase(name: string): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await withAdminClient((client) => client.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`));
      return;
    } catch (error) {
      if ((error as { code?: unknown }).code !== CANNOT_TERMINATE || attempt >= DROP_ATTEMPTS) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

export interface TestDatabase {
  name: string;
  url: string;
  pool: pg.Pool;
  /** Ends the pool and drops the database (keeps it when KEEP_TEST_DB is set). */
  drop(): Promise<void>;
}

const TEMPLATE_BUSY = '55006';
const NO_SUCH_DATABASE = '3D000';
const CLONE_ATTEMPTS = 10;

/**
 * CREATE DATABASE … TEMPLATE refuses while anyone else is connected to the template (a psql session left open
 * on it, say; Postgres itself waits 5 s for them), and a concurrent run's globalSetup swaps the template in a
 * drop + rename during which it does not exist. Both pass; a few tries ride them out.
 */
async function cloneTemplate(name: string, template: string): Promise<void> {
  for (let attempt = 1; ; attempt += 1) {
    try {
      await withAdminClient((client) => client.query(`CREATE DATABASE ${quoteIdent(name)} TEMPLATE ${quoteIdent(template)}`));
      return;
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if ((code !== TEMPLATE_BUSY && code !== NO_SUCH_DATABASE) || attempt >= CLONE_ATTEMPTS) {
        throw code === NO_SUCH_DATABASE
          ? new Error(`template database ${template} does not exist: run the tests through vitest, whose globalSetup builds it`, { cause: error })
          : error;
      }
      await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
    }
  }
}

export async function createTestDatabase(scenario: TestScenario = 'month-end'): Promise<TestDatabase> {
  const name = `backfill_bot_test_${randomBytes(6).toString('hex')}`;
  if (scenario === 'empty') {
    await withAdminClient((client) => client.query(`CREATE DATABASE ${quoteIdent(name)}`));
  } else {
    await cloneTemplate(name, TEMPLATE_DATABASES[scenario]);
  }
  const url = databaseUrl(name);
  const pool = createPool(url, 'backfill-bot-test');
  if (scenario === 'empty') await migrate(pool);
  return {
    name,
    url,
    pool,
    async drop() {
      await pool.end();
      if (process.env.KEEP_TEST_DB) {
        console.log(`KEEP_TEST_DB: kept test database ${name} (${url})`);
        return;
      }
      await dropDatabase(name);
    },
  };
}
