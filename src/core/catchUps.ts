import { recordEvent } from '../db/events.js';
import { withTransaction, type Queryable } from '../db/pool.js';
import type { Pipeline } from '../db/pipelines.js';
import type { EngineContext } from './context.js';
import { formatMoney, formatSignedMoney, subtractMoney } from './money.js';
import { totalOverDays } from './partitionStep.js';
import { readReportFigure } from './readers.js';
import type { StepContext } from './steps.js';
import { formatHourRange } from './time.js';

export interface CatchUpNotice {
  catchUpId: number;
  consumer: string;
  owner: string;
  period: string;
  hoursRead: number;
  firstReadAt: Date;
  reportBefore: string | null;
  totalAfter: string;
  firstHour: Date;
  lastHour: Date;
  pipeline: string;
}

/**
 * The normal run has just filled hours that readers read while they were missing (night 9). Records it like
 * a backfill's diff: one catch-up, and per stale reader and day what its report showed and what the table
 * holds now. The notices are delivered later by a worker, so a tick run from the CLI still reaches Slack.
 */
export async function recordCatchUp(ctx: EngineContext, input: { pipeline: Pipeline; filled: Date[]; actor: string }): Promise<number | undefined> {
  const first = input.filled[0];
  const last = input.filled.at(-1);
  if (!first || !last) return undefined;
  return withTransaction(ctx.pool, async (tx) => {
    const readers = await tx.query<{ consumer: string; owner: string; period: string; hoursRead: number; firstReadAt: Date; reportTotalSql: string | null }>(
      `SELECT r.consumer, c.owner, to_char((r.partition_hour AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS period,
              count(DISTINCT r.partition_hour)::int AS "hoursRead", min(r.read_at) AS "firstReadAt", c.report_total_sql AS "reportTotalSql"
       FROM backfill.read_log r JOIN backfill.consumers c ON c.name = r.consumer
       WHERE r.pipeline = $1::text AND r.partition_hour = ANY ($2::timestamptz[]) AND r.read_at < now()
       GROUP BY r.consumer, c.owner, period, c.report_total_sql ORDER BY r.consumer, period`, [input.pipeline.name, input.filled]);
    if (readers.rows.length === 0) return undefined;
    const inserted = await tx.query<{ id: number }>(
      `INSERT INTO backfill.catch_ups (pipeline, first_hour, last_hour, partitions, ran_by) VALUES ($1::text, $2::timestamptz, $3::timestamptz, $4::int, $5::text) RETURNING id`,
      [input.pipeline.name, first, last, input.filled.length, input.actor]);
    const id = inserted.rows[0]?.id;
    if (id === undefined) throw new Error('catch-up insert returned no id');
    for (const reader of readers.rows) {
      const before = reader.reportTotalSql ? await readReportFigure(tx, reader.reportTotalSql, reader.period) : null;
      const after = await totalOverDays(tx, input.pipeline, [reader.period]);
      await tx.query(
        `INSERT INTO backfill.catch_up_notices (catch_up_id, consumer, owner, period, hours_read, first_read_at, report_before, total_after)
         VALUES ($1::bigint, $2::text, $3::text, $4::date, $5::int, $6::timestamptz, $7::numeric, $8::numeric)`,
        [id, reader.consumer, reader.owner, reader.period, reader.hoursRead, reader.firstReadAt, before, after]);
    }
    await recordEvent(tx, { actor: input.actor, kind: 'caught_up', detail: { catchUp: id, pipeline: input.pipeline.name, partitions: input.filled.length, readers: readers.rows.length } });
    return id;
  });
}

export async function listUntoldNotices(db: Queryable, catchUpId?: number): Promise<CatchUpNotice[]> {
  const { rows } = await db.query<CatchUpNotice>(
    `SELECT n.catch_up_id AS "catchUpId", n.consumer, n.owner, to_char(n.period, 'YYYY-MM-DD') AS period, n.hours_read AS "hoursRead",
            n.first_read_at AS "firstReadAt", n.report_before::text AS "reportBefore", n.total_after::text AS "totalAfter",
            c.first_hour AS "firstHour", c.last_hour AS "lastHour", c.pipeline
     FROM backfill.catch_up_notices n JOIN backfill.catch_ups c ON c.id = n.catch_up_id
     WHERE n.told_at IS NULL AND ($1::bigint IS NULL OR n.catch_up_id = $1::bigint)
     ORDER BY n.catch_up_id, n.consumer, n.period`, [catchUpId ?? null]);
  return rows;
}

export function staleReaderText(notice: CatchUpNotice): string {
  const before = notice.reportBefore === null ? 'its figure when you read it is not known' : `${formatMoney(notice.reportBefore)} when you read it`;
  const change = notice.reportBefore === null ? '' : ` (${formatSignedMoney(subtractMoney(notice.totalAfter, notice.reportBefore))})`;
  return `The ${notice.pipeline} numbers for ${formatHourRange(notice.firstHour, notice.lastHour)} are now real: those hours had not landed when ` +
    `${notice.consumer} read ${notice.hoursRead} of them (first at ${notice.firstReadAt.toISOString().slice(0, 16).replace('T', ' ')} UTC). ` +
    `For ${notice.period}: ${before}; ${formatMoney(notice.totalAfter)} now${change}. Re-run or re-read it before relying on it.`;
}

/** Delivers one stale-reader notice once; a repeat delivery finds it told and does nothing. */
export async function tellStaleReader(ctx: StepContext, key: { catchUpId: number; consumer: string; period: string }): Promise<boolean> {
  const notice = (await listUntoldNotices(ctx.pool, key.catchUpId)).find((n) => n.consumer === key.consumer && n.period === key.period);
  if (!notice) return false;
  await ctx.messenger.directMessage(notice.owner, staleReaderText(notice), `cu${key.catchUpId}:${key.consumer}:${key.period}`);
  await withTransaction(ctx.pool, async (tx) => {
    await tx.query(`UPDATE backfill.catch_up_notices SET told_at = now() WHERE catch_up_id = $1::bigint AND consumer = $2::text AND period = $3::date AND told_at IS NULL`,
      [key.catchUpId, key.consumer, key.period]);
    await recordEvent(tx, { actor: 'backfill-bot', kind: 'stale_readers_told', detail: { catchUp: key.catchUpId, consumer: key.consumer, owner: notice.owner, period: key.period } });
  });
  return true;
}
