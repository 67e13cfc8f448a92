import type { Queryable } from './pool.js';

// One row per message a step means to send (backfill.message_intents, migration 0005). The row is written and
// committed before the message goes out, and gets its ts once Slack answers, or once the message is found in
// the conversation's history after a crash in between. A row without ts is an attempt whose fate is unknown.

export interface MessageIntent {
  intent: string;
  backfillId: number | null;
  channel: string;
  ts: string | null;
  createdAt: Date;
  deliveredAt: Date | null;
  /** True when the ts came from the conversation's history rather than from Slack's answer. */
  recovered: boolean;
}

export async function findMessageIntent(db: Queryable, intent: string): Promise<MessageIntent | undefined> {
  const { rows } = await db.query<MessageIntent>(
    `SELECT intent, backfill_id AS "backfillId", channel, ts, created_at AS "createdAt", delivered_at AS "deliveredAt", recovered
     FROM backfill.message_intents WHERE intent = $1::text`, [intent]);
  return rows[0];
}

/** Writes the intent before its message is sent. False when a row was there already (another attempt's). */
export async function insertMessageIntent(db: Queryable, intent: { intent: string; backfillId: number | null; channel: string }): Promise<boolean> {
  const result = await db.query(
    `INSERT INTO backfill.message_intents (intent, backfill_id, channel) VALUES ($1::text, $2::bigint, $3::text)
     ON CONFLICT (intent) DO NOTHING`, [intent.intent, intent.backfillId, intent.channel]);
  return result.rowCount === 1;
}

/** Slack's answer (or the history) says where the message landed. */
export async function recordMessageDelivered(db: Queryable, delivered: { intent: string; channel: string; ts: string; recovered: boolean }): Promise<void> {
  await db.query(
    `UPDATE backfill.message_intents SET channel = $2::text, ts = $3::text, delivered_at = clock_timestamp(), recovered = $4::boolean
     WHERE intent = $1::text AND ts IS NULL`, [delivered.intent, delivered.channel, delivered.ts, delivered.recovered]);
}

/**
 * Slack answered ok:false, so this attempt posted nothing: the row goes, and a later attempt sends without
 * first searching the history for a message that cannot be there.
 */
export async function forgetUndeliveredIntent(db: Queryable, intent: string): Promise<void> {
  await db.query('DELETE FROM backfill.message_intents WHERE intent = $1::text AND ts IS NULL', [intent]);
}
