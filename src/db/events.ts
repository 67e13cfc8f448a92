import { redact, redactDeep } from '../redaction.js';
import { recordedActing } from './acting.js';
import type { Queryable } from './pool.js';
import { prepared } from './prepared.js';

/** Timeline kinds: every step, decision and refusal the product records. */
export type EventKind =
  | 'planned' | 'requested' | 'announced' | 'acknowledged' | 'held' | 'released' | 'overridden' | 'approved'
  | 'cancelled' | 'refused' | 'state_changed' | 'job_enqueued' | 'step_started' | 'step_retried' | 'step_done'
  | 'step_failed' | 'recomputed' | 'watermark_moved' | 'replayed' | 'compared' | 'notified' | 'finished' | 'failed'
  | 'tick' | 'announcement_sent' | 'reminded' | 'diff_posted' | 'status_posted'
  | 'signed' | 'signer_added' | 'signer_removed' | 'caught_up' | 'stale_readers_told' | 'package_uploaded'
  | 'staged' | 'unavailable' | 'paused' | 'continued' | 'stopped' | 'write_fenced' | 'rolled_back'
  | 'capacity_approved' | 'late_rows_kept' | 'delegate_added' | 'delegate_removed'
  | 'claim_lost' | 'step_blocked' | 'undeliverable' | 'sized' | 'pruned' | 'catalog_applied'
  | 'lineage_proposed' | 'lineage_confirmed' | 'lineage_rejected' | 'lineage_emitted' | 'lineage_emit_failed'
  | 'escalated' | 'escalation_stopped' | 'escalation_not_sent';

export interface TimelineEvent {
  id: number;
  backfillId: number | null;
  at: Date;
  actor: string;
  /** The person whose rights the actor used, when it was someone else (the CLI's --as), and why. */
  onBehalfOf: string | null;
  onBehalfReason: string | null;
  kind: EventKind;
  detail: Record<string, unknown>;
}

/**
 * Records one event. `actor` is whose rights were used; when the command in force acts on that person's behalf
 * (src/db/acting.ts), the row names the real actor and keeps the person acted for and the reason beside it; a CLI
 * user mapped to a Slack id is named as the CLI user, with that Slack id in actor_person.
 * The detail and the reason are redacted here (eventValues), the one door to the timeline: a detail can carry outside
 * text (an orchestrator's answer, a webhook's error), and the timeline is shown in Slack and the incident package.
 */
export async function recordEvent(db: Queryable, event: NewEvent): Promise<void> {
  await db.query(prepared(`INSERT INTO backfill.events (${EVENT_COLUMNS}) VALUES (${eventParameters(1)})`), eventValues(event));
}

/**
 * Records several events in one statement, in their order (their ids ascend as given), as recordEvent records each.
 * PERF: a dispatch that enqueues a backfill's stages recorded each in a commit of its own, some 3 ms apiece with
 * four steps running beside it.
 */
export async function recordEvents(db: Queryable, events: readonly NewEvent[]): Promise<void> {
  if (events.length === 0) return;
  const values = events.map(eventValues);
  const columns = EVENT_TYPES.map((_type, n) => values.map((value) => value[n] ?? null));
  await db.query(prepared(`INSERT INTO backfill.events (${EVENT_COLUMNS})
     SELECT ${EVENT_COLUMNS} FROM unnest(${EVENT_TYPES.map((type, n) => `$${n + 1}::${type}[]`).join(', ')}) WITH ORDINALITY AS e(${EVENT_COLUMNS}, n) ORDER BY n`), columns);
}

export interface NewEvent {
  backfillId?: number | null;
  actor: string;
  kind: EventKind;
  detail?: Record<string, unknown>;
}

/** The events table's columns as recordEvent writes them, for a statement that records an event beside its own write. */
export const EVENT_COLUMNS = 'backfill_id, actor, kind, detail, on_behalf_of, on_behalf_reason, actor_person';
const EVENT_TYPES = ['bigint', 'text', 'text', 'jsonb', 'text', 'text', 'text'] as const;

/** The parameters of eventValues in a statement, from $`first` on, each cast to its column's type: `$1::bigint, $2::text, …`. */
export function eventParameters(first: number): string {
  return EVENT_TYPES.map((type, n) => `$${first + n}::${type}`).join(', ');
}

/** The values of EVENT_COLUMNS for `event` (eventParameters), redacted and with the command's acting recorded as recordEvent records them. */
export function eventValues(event: NewEvent): [number | null, string, EventKind, string, string | null, string | null, string | null] {
  const behalf = recordedActing(event.actor);
  return [event.backfillId ?? null, behalf?.actor ?? event.actor, event.kind, JSON.stringify(redactDeep(event.detail ?? {})), behalf?.onBehalfOf ?? null,
    behalf && behalf.reason !== null ? redact(behalf.reason) : null, behalf?.actorPerson ?? null];
}

export async function listEvents(db: Queryable, backfillId: number): Promise<TimelineEvent[]> {
  const { rows } = await db.query<TimelineEvent>(
    `SELECT id, backfill_id AS "backfillId", at, actor, on_behalf_of AS "onBehalfOf", on_behalf_reason AS "onBehalfReason", kind, detail FROM backfill.events
     WHERE backfill_id = $1::bigint ORDER BY id`, [backfillId]);
  return rows;
}

/** Who holds the backfill: the actor of its latest hold. */
export async function findLastHolder(db: Queryable, backfillId: number): Promise<string | undefined> {
  const { rows } = await db.query<{ actor: string }>(
    // The person whose hold it is: the one acted for, when an operator held it on their behalf; the Slack id of
    // a mapped CLI user, so that they release it from either front end.
    `SELECT coalesce(on_behalf_of, actor_person, actor) AS actor FROM backfill.events WHERE backfill_id = $1::bigint AND kind = 'held' ORDER BY id DESC LIMIT 1`, [backfillId]);
  return rows[0]?.actor;
}

/**
 * Everyone behind the backfill's request: the person whose rights it used, the real actor and the person that
 * actor is (a mapped CLI user's Slack id). The two-operator rule keeps all of them from being the second approval.
 */
export async function listRequesters(db: Queryable, backfillId: number): Promise<string[]> {
  const { rows } = await db.query<{ person: string }>(
    `SELECT DISTINCT p.person FROM backfill.events e,
       LATERAL unnest(ARRAY[e.actor, e.actor_person, e.on_behalf_of]) AS p(person)
     WHERE e.backfill_id = $1::bigint AND e.kind = 'requested' AND p.person IS NOT NULL`, [backfillId]);
  return rows.map((row) => row.person);
}

/** How many times the backfill was paused (its timeline's 'paused' events). */
export async function countPauses(db: Queryable, backfillId: number): Promise<number | undefined> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM backfill.events WHERE backfill_id = $1::bigint AND kind = 'paused'`, [backfillId]);
  return rows[0]?.n;
}
