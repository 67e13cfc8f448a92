import { z } from 'zod';
import type { CatchUpNotice } from '../db/catchUps.js';

// What the core tells people, as facts. The core decides who is told what and when; how it reads (Slack's
// markup, a terminal line with names, the incident package) is a view's business (src/views/notices.ts).

const money = z.string().regex(/^-?\d+(\.\d+)?$/);

/**
 * Everything an owner's announcement says, fixed when the backfill is created and kept with it as the record
 * of what they were told: reminders and the answered message show these same facts again. The schema reads the
 * stored facts (jsonb) back into their types; dates come back from JSON as strings.
 */
const announcementFactsSchema = z.object({
  backfillId: z.number().int().nullable(),
  pipeline: z.string(),
  reason: z.string(),
  requestedBy: z.string(),
  firstHour: z.coerce.date(),
  lastHour: z.coerce.date(),
  partitionCount: z.number().int(),
  direction: z.enum(['up', 'down', 'unchanged']),
  /** Totals over the affected days now and after the change, from the step run in a rolled-back preview. */
  totalBefore: money,
  expectedTotalAfter: money,
  /** The pipeline's estimate query, or the step's own query run in full. */
  previewedBy: z.enum(['estimate', 'step']),
  days: z.array(z.string()),
  reader: z.object({
    consumer: z.string(), kind: z.enum(['report', 'export', 'model']), readDirectly: z.boolean(), partitionsRead: z.number().int(),
    dependsOn: z.array(z.string()), notifyRule: z.enum(['before', 'after']),
  }),
  /** The signed figures of the reader's own report. */
  signed: z.array(z.object({ report: z.string(), period: z.string(), total: money, signedBy: z.string(), signedAt: z.coerce.date() })),
  /** Owners whose acknowledgement the run waits for. */
  gateOwners: z.array(z.string()),
});

export type AnnouncementFacts = z.infer<typeof announcementFactsSchema>;

export type Notice =
  | { kind: 'announcement'; facts: AnnouncementFacts }
  /** An announcement stored as text by an earlier version (Slack's markup), shown as it was written. */
  | { kind: 'recorded'; text: string }
  | { kind: 'after_run'; backfillId: number; pipeline: string; reason: string; consumer: string; totalBefore: string; totalAfter: string | null; diff: string | null }
  | { kind: 'rolled_back'; backfillId: number; pipeline: string; consumer: string; rolledBackBy: string | null; totalBefore: string }
  | { kind: 'undeliverable'; backfillId: number; step: string; owner: string | null; consumer: string | null; slackError: string }
  | { kind: 'stale_reader'; notice: CatchUpNotice };

/**
 * The announcement kept with a backfill's reader: its facts when they were stored, else the text an earlier
 * version stored. Facts that no longer parse are a fault in the record, not something to guess around.
 */
export function storedAnnouncement(row: { announcement: string | null; announcementFacts: unknown }): Notice {
  if (row.announcementFacts !== null && row.announcementFacts !== undefined) {
    return { kind: 'announcement', facts: announcementFactsSchema.parse(row.announcementFacts) };
  }
  return { kind: 'recorded', text: row.announcement ?? '' };
}
