import type { Queryable } from './pool.js';

// The diff charts uploaded to incident threads are message intents (backfill.message_intents) like every
// message a step sends, so that a retried step never uploads one twice. Their intent is the diff message's
// intent with DIFF_CHART_SUFFIX, and where a message's row keeps its ts, a chart's keeps the Slack file id:
// what Slack gave back to say where it landed, and what the App Home needs to show it again.

const DIFF_CHART_SUFFIX = ':chart';

export const diffChartIntent = (diffIntent: string): string => `${diffIntent}${DIFF_CHART_SUFFIX}`;

export interface UploadedDiffChart {
  backfillId: number;
  fileId: string;
  channel: string;
}

/** The chart uploaded last, over all backfills; undefined when none was. */
export async function findLatestDiffChart(db: Queryable): Promise<UploadedDiffChart | undefined> {
  const { rows } = await db.query<UploadedDiffChart>(
    `SELECT backfill_id::int AS "backfillId", ts AS "fileId", channel
     FROM backfill.message_intents
     WHERE right(intent, length($1::text)) = $1::text AND ts IS NOT NULL AND backfill_id IS NOT NULL
     ORDER BY delivered_at DESC, intent DESC LIMIT 1`, [DIFF_CHART_SUFFIX]);
  return rows[0];
}
