// Staging keeps the writers of the live rows it read at or above its snapshot's xmin (versionsSeenAt), so a publish
// can tell them from writers it did not see (versionsSinceSnapshot). Kept only up to MAX_VERSIONS_SEEN of them: past
// that, none, and a publish measures both sides again. Real PostgreSQL, with an older transaction held open so that
// the rows written after it are above the snapshot's xmin.

import { afterEach, describe, expect, it } from 'vitest';
import { MAX_VERSIONS_SEEN, versionsKept, versionsSeenAt, versionsSinceSnapshot } from '../../src/db/rowStore.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase | undefined;

afterEach(async () => {
  await db?.drop();
  db = undefined;
});

/** A table of `writers` rows, each written by a transaction of its own after an older one began; that one still open. */
async function rowsBesideAnOlderTransaction(d: TestDatabase, writers: number): Promise<{ end(): Promise<void> }> {
  await d.pool.query('CREATE TABLE written (id int PRIMARY KEY)');
  const older = await d.pool.connect();
  await older.query('BEGIN');
  await older.query('SELECT pg_current_xact_id()');
  for (let id = 1; id <= writers; id += 1) await d.pool.query('INSERT INTO written VALUES ($1)', [id]);
  return { async end() { await older.query('ROLLBACK'); older.release(); } };
}

const seenNow = `SELECT ${versionsSeenAt('t.xmin')}::text[] AS seen, pg_snapshot_xmin(pg_current_snapshot())::text AS xmin FROM written t`;

describe('the versions staging keeps of the live rows it read', () => {
  it.each([
    { writers: MAX_VERSIONS_SEEN, kept: true },
    { writers: MAX_VERSIONS_SEEN + 1, kept: false },
  ])('$writers writers above the snapshot\'s xmin: kept is $kept', async ({ writers, kept }) => {
    db = await createTestDatabase('empty');
    const d = db;
    const older = await rowsBesideAnOlderTransaction(d, writers);
    try {
      const { rows: [read] } = await d.pool.query<{ seen: string[]; xmin: string }>(seenNow);
      // Read up to one past the bound, kept only within it.
      expect(read?.seen).toHaveLength(kept ? writers : MAX_VERSIONS_SEEN + 1);
      const seen = versionsKept(read?.seen ?? []);
      expect(seen?.length ?? null).toBe(kept ? writers : null);
      // A publish reading the same rows: none recent when they were kept, every one when not.
      const { rows: [since] } = await d.pool.query<{ rows: number; recent: number }>(
        `SELECT ${versionsSinceSnapshot('t.xmin', '$1', '$2')} FROM written t`, [read?.xmin, seen]);
      expect(since).toMatchObject({ rows: writers, recent: kept ? 0 : writers });
      // A writer staging did not see is recent whatever was kept.
      await d.pool.query('UPDATE written SET id = id WHERE id = 1');
      const { rows: [later] } = await d.pool.query<{ recent: number }>(
        `SELECT ${versionsSinceSnapshot('t.xmin', '$1', '$2')} FROM written t`, [read?.xmin, seen]);
      expect(later?.recent).toBe(kept ? 1 : writers);
    } finally {
      await older.end();
    }
  });

  it('keeps a list, not NULL, however few: at most the one writer of every row', async () => {
    db = await createTestDatabase('empty');
    await db.pool.query('CREATE TABLE written (id int PRIMARY KEY)');
    const { rows: [writer] } = await db.pool.query<{ xid: string }>(
      'WITH w AS (INSERT INTO written SELECT generate_series(1, 10) RETURNING 1) SELECT pg_current_xact_id()::text AS xid FROM w LIMIT 1');
    const { rows: [read] } = await db.pool.query<{ seen: string[] | null }>(seenNow);
    // Empty unless another test's transaction older than the insert was running: then that one writer.
    expect(read?.seen).not.toBeNull();
    expect((read?.seen ?? ['not a list']).every((xid) => BigInt(xid) === BigInt(writer?.xid ?? '-1') % 2n ** 32n)).toBe(true);
  });
});
