// A CLI command whose PostgreSQL session goes away under it (a restart, pg_terminate_backend): it says that the
// connection was lost, where to see whether it took effect, and whether running it again is safe; no raw stack.

import { execFile } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBackfill } from '../src/core/announce/start.js';
import { CLI } from './support/cli.js';
import { countRows, createTestEngine, type TestEngine } from './support/engine.js';
import { waitUntil } from './support/wait.js';

describe('a CLI command that loses its database connection', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('rollback cut off mid-command says the connection was lost, names `status <id>`, and that it is safe to repeat', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: 'U07ONCALL' });
    const database = new URL(engine.ctx.config.DATABASE_URL).pathname.slice(1);
    // A second session holds the backfill's row, which rollback locks first: the CLI's session waits on it.
    const holder = new pg.Client({ connectionString: engine.ctx.config.DATABASE_URL });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM backfill.backfills WHERE id = $1::bigint FOR UPDATE', [backfill.id]);

      let out = '';
      const child = execFile(process.execPath, ['--import', 'tsx', CLI, 'rollback', String(backfill.id), 'wrong', 'currency'], {
        env: { ...process.env, DATABASE_URL: engine.ctx.config.DATABASE_URL, QUEUE_PREFIX: engine.ctx.config.QUEUE_PREFIX },
      }, (_error, stdout, stderr) => (out = stdout + stderr));
      const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));

      let waiting: number | undefined;
      await waitUntil(async () => {
        // Read from the pool, not the holder: inside a transaction pg_stat_activity is a snapshot that never changes.
        const { rows } = await engine.ctx.pool.query<{ pid: number }>(
          `SELECT pid FROM pg_stat_activity WHERE datname = $1::text AND application_name = 'backfill-cli' AND wait_event_type = 'Lock'`, [database]);
        waiting = rows[0]?.pid;
        return waiting !== undefined || child.exitCode !== null;
      }, 'the CLI waiting on the backfill row', 30_000);
      expect(waiting).toBeDefined();
      // As a PostgreSQL restart would: the session ends under the statement (57P01 admin_shutdown).
      await engine.ctx.pool.query('SELECT pg_terminate_backend($1::int)', [waiting]);

      expect(await exited).toBe(1);
      expect(out).toContain(`The connection to PostgreSQL was lost while \`rollback\` ran (the server restarted, or the session was ended). ` +
        `Whether it took effect is in the database: once PostgreSQL is back, run \`npx backfill status ${backfill.id}\`. ` +
        'rollback commits in one transaction, so it took effect whole or not at all, and running it again is safe: it does it, or says it was done.');
      expect(out).not.toMatch(/\n\s+at /);
      expect(out).not.toContain('terminating connection due to administrator command');
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    // Indeed it did not take effect: no rollback was recorded.
    expect(await countRows(engine.ctx, `SELECT 1 FROM backfill.events WHERE backfill_id = $1::bigint AND kind = 'rolled_back'`, [backfill.id])).toBe(0);
  });
});
