import { redact } from '../redaction.js';
import type { Queryable } from './pool.js';
import type { ConsumerPlacement } from './readLog.js';

// The readers of one backfill (backfill.backfill_consumers): who is told, when, with which announcement, and
// where it landed. Reading them with acknowledgements and overrides: listBackfillConsumers in backfills.ts.

export interface NewBackfillConsumer extends Omit<ConsumerPlacement, 'kind'> {
  /** What the owner is told, as facts (src/core/notices.ts AnnouncementFacts), kept as the record. */
  announcementFacts: unknown;
}

/** The announcement as stored: facts, or (before migration 0011) text in Slack's markup. */
export interface StoredAnnouncement {
  announcement: string | null;
  announcementFacts: unknown;
}

export async function insertBackfillConsumer(tx: Queryable, backfillId: number, reader: NewBackfillConsumer): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.backfill_consumers (backfill_id, consumer, owner, notify_rule, dependency_rank, depends_on,
                                              read_directly, partitions_read, announcement_facts)
     VALUES ($1::bigint, $2::text, $3::text, $4::text, $5::int, $6::text[], $7::boolean, $8::int, $9::jsonb)`,
    [backfillId, reader.consumer, reader.owner, reader.notifyRule, reader.dependencyRank, reader.dependsOn, reader.readDirectly,
      reader.partitionsRead, JSON.stringify(reader.announcementFacts)]);
}

/** The consumer's owner and the announcement generated for them. */
export async function findBackfillConsumer(db: Queryable, backfillId: number, consumer: string): Promise<({ owner: string } & StoredAnnouncement) | undefined> {
  const { rows } = await db.query<{ owner: string } & StoredAnnouncement>(
    `SELECT owner, announcement, announcement_facts AS "announcementFacts"
     FROM backfill.backfill_consumers WHERE backfill_id = $1::bigint AND consumer = $2::text`, [backfillId, consumer]);
  return rows[0];
}

/** Where the announcement landed (null when nowhere: the backfill has no channel for it). */
export async function recordAnnouncementLanded(tx: Queryable, backfillId: number, consumer: string, landed: { channel: string | null; ts: string | null }): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfill_consumers SET message_channel = $3::text, message_ts = $4::text, announce_retry_at = NULL
     WHERE backfill_id = $1::bigint AND consumer = $2::text`, [backfillId, consumer, landed.channel, landed.ts]);
}

/**
 * Slack rate-limited the announcement: its next try goes out `retryAfterSeconds` from now, by the database
 * clock (the gate shows it). Only while it has not landed.
 */
export async function recordAnnounceRateLimited(db: Queryable, backfillId: number, consumer: string, retryAfterSeconds: number): Promise<void> {
  await db.query(
    `UPDATE backfill.backfill_consumers SET announce_retry_at = clock_timestamp() + $3::int * interval '1 second'
     WHERE backfill_id = $1::bigint AND consumer = $2::text AND message_ts IS NULL`, [backfillId, consumer, Math.max(0, Math.ceil(retryAfterSeconds))]);
}

/** Slack will never take the announcement: its reason, and when (counts as a missing acknowledgement). */
export async function markConsumerUndeliverable(tx: Queryable, backfillId: number, consumer: string | null, slackError: string): Promise<void> {
  await tx.query(
    `UPDATE backfill.backfill_consumers SET undeliverable = $3::text, undeliverable_at = now() WHERE backfill_id = $1::bigint AND consumer = $2::text`,
    [backfillId, consumer, redact(slackError)]);
}
