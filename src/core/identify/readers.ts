import type { Queryable } from '../../db/pool.js';

/**
 * What a report shows for a period, through its report_total_sql ($1 = the date), rounded to the cent and
 * kept as a string; null when the report has no row for it.
 */
export async function readReportFigure(db: Queryable, reportTotalSql: string, period: string): Promise<string | null> {
  const { rows } = await db.query<{ total: string | null }>(`SELECT round(r.total::numeric, 2)::text AS total FROM (${reportTotalSql}) AS r(total)`, [period]);
  return rows[0]?.total ?? null;
}
