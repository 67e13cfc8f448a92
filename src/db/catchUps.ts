import type { Queryable } from './pool.js';

// Catch-ups (backfill.catch_ups): the normal run filled hours that readers had read while they were missing;
// one notice per stale reader and day (backfill.catch_up_notices), told once.

/** Returns the catch-up's id. */
export async function insertCatchUp(tx: Queryable, catchUp: { pipeline: string; firstHour: Date; lastHour: Date; partitions: number; ranBy: string }): Promise<number | undefined> {
  const { rows } = await tx.query<{ id: number }>(
    `INSERT INTO backfill.catch_ups (pipeline, first_hour, last_hour, partitions, ran_by) VALUES ($1::text, $2::timestamptz, $3::timestamptz, $4::int, $5::text) RETURNING id`,
    [catchUp.pipeline, catchUp.firstHour, catchUp.lastHour, catchUp.partitions, catchUp.ranBy]);
  return rows[0]?.id;
}

export interface NewCatchUpNotice {
  consumer: string;
  owner: string;
  period: string;
  hoursRead: number;
  firstReadAt: Date;
  reportBefore: string | null;
  totalAfter: string;
}

export async function insertCatchUpNotice(tx: Queryable, catchUpId: number, notice: NewCatchUpNotice): Promise<void> {
  await tx.query(
    `INSERT INTO backfill.catch_up_notices (catch_up_id, consumer, owner, period, hours_read, first_read_at, report_before, total_after)
     VALUES ($1::bigint, $2::text, $3::text, $4::date, $5::int, $6::timestamptz, $7::numeric, $8::numeric)`,
    [catchUpId, notice.consumer, notice.owner, notice.period, notice.hoursRead, notice.firstReadAt, notice.reportBefore, notice.totalAfter]);
}

export interface CatchUpNotice extends NewCatchUpNotice {
  catchUpId: number;
  firstHour: Date;
  lastHour: Date;
  pipeline: string;
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

export async function markNoticeTold(tx: Queryable, key: { catchUpId: number; consumer: string; period: string }): Promise<void> {
  await tx.query(`UPDATE backfill.catch_up_notices SET told_at = now() WHERE catch_up_id = $1::bigint AND consumer = $2::text AND period = $3::date AND told_at IS NULL`,
    [key.catchUpId, key.consumer, key.period]);
}
