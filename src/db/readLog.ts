import type { Queryable } from './pool.js';

// Who read which partition of which pipeline, and when (backfill.read_log), joined to the consumers they are:
// what decides who is told before a backfill, and who read a hole the normal run filled later.

/** Where a consumer stands to a backfill: who owns it, when they are told, and how it came to read the partitions. */
export interface ConsumerPlacement {
  consumer: string;
  kind: 'report' | 'export' | 'model';
  owner: string;
  notifyRule: 'before' | 'after';
  dependencyRank: number;
  dependsOn: string[];
  readDirectly: boolean;
  partitionsRead: number;
}

/** A consumer of the target partitions: read them directly, or depends on one that did. */
export interface Reader extends ConsumerPlacement {
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

/** Signed reports (report and day) that read this hour: a change under them needs an announcement. */
export async function listSignedReadersOf(tx: Queryable, pipeline: string, hour: Date): Promise<string[]> {
  const { rows } = await tx.query<{ figure: string }>(
    `SELECT DISTINCT s.report || ' ' || to_char(s.period, 'YYYY-MM-DD') AS figure
     FROM backfill.read_log r JOIN backfill.signoffs s ON s.report = r.consumer AND s.period = (r.partition_hour AT TIME ZONE 'UTC')::date
     WHERE r.pipeline = $1::text AND r.partition_hour = $2::timestamptz ORDER BY 1`, [pipeline, hour]);
  return rows.map((row) => row.figure);
}

export interface StaleReader {
  consumer: string;
  owner: string;
  partitionHour: Date;
  readAt: Date;
}

/** The first read of each of these hours by each consumer, with its owner. */
export async function listFirstReads(db: Queryable, pipeline: string, hours: Date[]): Promise<StaleReader[]> {
  const { rows } = await db.query<StaleReader>(
    `SELECT DISTINCT ON (r.consumer, r.partition_hour) r.consumer, c.owner, r.partition_hour AS "partitionHour", r.read_at AS "readAt"
     FROM backfill.read_log r
     JOIN backfill.consumers c ON c.name = r.consumer
     WHERE r.pipeline = $1::text AND r.partition_hour = ANY ($2::timestamptz[])
     ORDER BY r.consumer, r.partition_hour, r.read_at`, [pipeline, hours]);
  return rows;
}

export interface ReaderOfDay {
  consumer: string;
  owner: string;
  period: string;
  hoursRead: number;
  firstReadAt: Date;
  reportTotalSql: string | null;
}

/** Per consumer and day, how many of these hours it read before now and when first, with its report query. */
export async function listReadersByDay(tx: Queryable, pipeline: string, hours: Date[]): Promise<ReaderOfDay[]> {
  const { rows } = await tx.query<ReaderOfDay>(
    `SELECT r.consumer, c.owner, to_char((r.partition_hour AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS period,
            count(DISTINCT r.partition_hour)::int AS "hoursRead", min(r.read_at) AS "firstReadAt", c.report_total_sql AS "reportTotalSql"
     FROM backfill.read_log r JOIN backfill.consumers c ON c.name = r.consumer
     WHERE r.pipeline = $1::text AND r.partition_hour = ANY ($2::timestamptz[]) AND r.read_at < now()
     GROUP BY r.consumer, c.owner, period, c.report_total_sql ORDER BY r.consumer, period`, [pipeline, hours]);
  return rows;
}
