import type { Queryable } from './pool.js';

// Who may acknowledge or hold in an owner's place (backfill.delegates: leave, shifts).

/** The owners this person is a delegate of. */
export async function listOwnersDelegatingTo(db: Queryable, delegate: string): Promise<string[]> {
  const { rows } = await db.query<{ owner: string }>('SELECT owner FROM backfill.delegates WHERE delegate = $1::text', [delegate]);
  return rows.map((row) => row.owner);
}

/** Every owner and delegate, in order. */
export async function listDelegates(db: Queryable): Promise<{ owner: string; delegate: string }[]> {
  const { rows } = await db.query<{ owner: string; delegate: string }>('SELECT owner, delegate FROM backfill.delegates ORDER BY owner, delegate');
  return rows;
}

export async function insertDelegate(db: Queryable, owner: string, delegate: string): Promise<void> {
  await db.query('INSERT INTO backfill.delegates (owner, delegate) VALUES ($1::text, $2::text) ON CONFLICT DO NOTHING', [owner, delegate]);
}

/** True when there was such a delegate. */
export async function deleteDelegate(db: Queryable, owner: string, delegate: string): Promise<boolean> {
  const removed = await db.query('DELETE FROM backfill.delegates WHERE owner = $1::text AND delegate = $2::text', [owner, delegate]);
  return (removed.rowCount ?? 0) > 0;
}
