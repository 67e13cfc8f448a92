import type { Queryable } from './pool.js';
import { isSlackUserId } from '../slackUser.js';

/** Slack user id → the name they go by. */
export type People = ReadonlyMap<string, string>;

/** Keeps the names just seen (a slash command's user_name, a button press's user.name); a name unchanged writes nothing. */
export async function rememberPeople(db: Queryable, people: { slackId: string; name: string }[]): Promise<void> {
  const known = people.filter((p) => isSlackUserId(p.slackId) && p.name.trim() !== '');
  if (known.length === 0) return;
  await db.query(
    `INSERT INTO backfill.people (slack_id, name)
     SELECT * FROM unnest($1::text[], $2::text[])
     ON CONFLICT (slack_id) DO UPDATE SET name = EXCLUDED.name, updated_at = now()
     WHERE backfill.people.name IS DISTINCT FROM EXCLUDED.name`,
    [known.map((p) => p.slackId), known.map((p) => p.name.trim())]);
}

/** Everyone the bot knows by name (a few hundred rows at most: read whole, once per command). */
export async function loadPeople(db: Queryable): Promise<People> {
  const { rows } = await db.query<{ slack_id: string; name: string }>('SELECT slack_id, name FROM backfill.people');
  return new Map(rows.map((row) => [row.slack_id, row.name]));
}
