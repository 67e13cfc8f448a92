import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrate, readMigrations } from '../src/db/migrate.js';
import { createTestDatabase } from './support/db.js';

describe('migrations', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    db = await createTestDatabase('empty');
  });
  afterAll(async () => db.drop());

  it('apply once even when several processes start at the same time', async () => {
    const results = await Promise.all([migrate(db.pool), migrate(db.pool), migrate(db.pool)]);
    expect(results.flat()).toEqual([]);
    const { rows } = await db.pool.query('SELECT version FROM public.backfill_bot_migrations ORDER BY version');
    expect(rows.map((r) => r.version)).toEqual((await readMigrations()).map((m) => m.version));
  });

  it('refuse a database newer than the code', async () => {
    await db.pool.query(`INSERT INTO public.backfill_bot_migrations (version, name) VALUES (999, '0999_future.sql')`);
    await expect(migrate(db.pool)).rejects.toThrow(/database is at migration 999 but this code only knows/);
    await db.pool.query('DELETE FROM public.backfill_bot_migrations WHERE version = 999');
  });

  it('refuse a consumer dependency cycle, naming the consumers in it', async () => {
    const insert = `INSERT INTO backfill.consumers (name, kind, owner, notify_rule, retrigger) VALUES ($1, 'report', 'U1', 'before', '{"kind":"sql","statements":["select 1"]}')`;
    for (const name of ['a_report', 'b_export', 'c_model']) await db.pool.query(insert, [name]);
    await db.pool.query(`INSERT INTO backfill.consumer_dependencies VALUES ('b_export', 'a_report'), ('c_model', 'b_export')`);
    const ranks = await db.pool.query('SELECT name, dependency_rank FROM backfill.consumers ORDER BY name');
    expect(ranks.rows).toEqual([{ name: 'a_report', dependency_rank: 1 }, { name: 'b_export', dependency_rank: 2 }, { name: 'c_model', dependency_rank: 3 }]);
    await expect(db.pool.query(`INSERT INTO backfill.consumer_dependencies VALUES ('a_report', 'c_model')`))
      .rejects.toThrow(/cycle through: a_report, b_export, c_model/);
  });
});
