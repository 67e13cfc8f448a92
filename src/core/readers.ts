import type { Queryable } from '../db/pool.js';

/** A consumer of the target partitions: read them directly, or depends on one that did. */
export interface Reader {
  consumer: string;
  kind: 'report' | 'export' | 'model';
  owner: string;
  notifyRule: 'before' | 'after';
  dependencyRank: number;
  dependsOn: string[];
  readDirectly: boolean;
  partitionsRead: number;
  retrigger: unknown;
  reportTotalSql: string | null;
}

/**
 * Who read these partitions, in dependency order: the read log joined to the targets, plus every consumer
 * that depends (transitively) on one of those readers, since it consumed their output. A consumer that read
 * none of the targets and depends on none of their readers is not listed.
 */
export async function listReaders(db: Queryable, pipeline: string, hours: Date[]): Promise<Reader[]> {
  const { rows } = await db.query<Reader>(
    `WITH RECURSIVE direct AS (
       SELECT consumer, count(DISTINCT partition_hour)::int AS partitions_read
       FROM backfill.read_log
       WHERE pipeline = $1::text AND partition_hour = ANY ($2::timestamptz[])
       GROUP BY consumer
     ), affected (consumer) AS (
       SELECT consumer FROM direct
       UNION
       SELECT d.consumer FROM backfill.consumer_dependencies d JOIN affected a ON d.depends_on = a.consumer
     )
     SELECT c.name AS consumer, c.kind, c.owner, c.notify_rule AS "notifyRule", c.dependency_rank AS "dependencyRank",
            coalesce((SELECT array_agg(d.depends_on ORDER BY d.depends_on) FROM backfill.consumer_dependencies d
                      WHERE d.consumer = c.name), '{}') AS "dependsOn",
            (direct.consumer IS NOT NULL) AS "readDirectly", coalesce(direct.partitions_read, 0) AS "partitionsRead",
            c.retrigger, c.report_total_sql AS "reportTotalSql"
     FROM (SELECT DISTINCT consumer FROM affected) a
     JOIN backfill.consumers c ON c.name = a.consumer
     LEFT JOIN direct ON direct.consumer = c.name
     ORDER BY c.dependency_rank, c.name`, [pipeline, hours]);
  return rows;
}

/**
 * What a report shows for a period, through its report_total_sql ($1 = the date), rounded to the cent and
 * kept as a string; null when the report has no row for it.
 */
export async function readReportFigure(db: Queryable, reportTotalSql: string, period: string): Promise<string | null> {
  const { rows } = await db.query<{ total: string | null }>(`SELECT round(r.total::numeric, 2)::text AS total FROM (${reportTotalSql}) AS r(total)`, [period]);
  return rows[0]?.total ?? null;
}

export interface SignedFigure {
  signoffId: number;
  report: string;
  period: string;
  total: string;
  signedBy: string;
  signedAt: Date;
}

/** The latest signature of each report among the readers, for each day the targets fall in. */
export async function listSignedFigures(db: Queryable, reports: string[], days: string[]): Promise<SignedFigure[]> {
  const { rows } = await db.query<SignedFigure>(
    `SELECT DISTINCT ON (report, period) id AS "signoffId", report, to_char(period, 'YYYY-MM-DD') AS period,
            total::text AS total, signed_by AS "signedBy", signed_at AS "signedAt"
     FROM backfill.signoffs
     WHERE report = ANY ($1::text[]) AND period = ANY ($2::date[])
     ORDER BY report, period, signed_at DESC, id DESC`, [reports, days]);
  return rows;
}
