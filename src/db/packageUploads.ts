import type { Queryable } from './pool.js';

// The incident package uploaded by `/backfill log <id>` is a message intent (backfill.message_intents) like every
// message the bot sends, keyed by the backfill and the version of what the package says: the intent row is
// written before the upload, so a double click, a retry or twenty requests at once share one upload, and a
// repeat with nothing new answers where that upload is (the row keeps the Slack file id).

/**
 * What the package is built from, as one digest: the last timeline event (its own package_uploaded events left
 * out, or every upload would be a change), the backfill's state, and every step's status and attempts.
 * Undefined when there is no such backfill.
 */
export async function findPackageVersion(db: Queryable, backfillId: number): Promise<string | undefined> {
  const { rows } = await db.query<{ version: string }>(
    `SELECT md5(concat_ws('|', b.state,
              (SELECT coalesce(max(e.id), 0) FROM backfill.events e WHERE e.backfill_id = b.id AND e.kind <> 'package_uploaded'),
              (SELECT string_agg(s.kind || ':' || s.step_key || ':' || s.status || ':' || s.attempts, ',' ORDER BY s.kind, s.step_key)
               FROM backfill.backfill_steps s WHERE s.backfill_id = b.id))) AS version
     FROM backfill.backfills b WHERE b.id = $1::bigint`, [backfillId]);
  return rows[0]?.version;
}

/**
 * Takes over an upload whose attempt never finished (no file id after `leaseMs`: its process died, or its answer
 * was lost and the thread does not show the file): true for the one caller that takes it.
 */
export async function takeOverStaleUpload(db: Queryable, intent: string, leaseMs: number): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE backfill.message_intents SET created_at = clock_timestamp()
     WHERE intent = $1::text AND ts IS NULL AND created_at < clock_timestamp() - $2::int * interval '1 millisecond'`, [intent, leaseMs]);
  return rowCount === 1;
}
