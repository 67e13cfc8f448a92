import type pg from 'pg';
import type { Queryable } from './pool.js';

/**
 * The only door for SQL the catalog supplies rather than the bot: a pipeline's step_sql, source_shards_sql and
 * estimate_sql, a report's report_total_sql, a consumer's re-trigger statements, and the bot's statements that
 * embed one of them (staging and previewing the step's query, reading a report's figure). Every such statement
 * runs through here, so there is one place that shows what of the warehouse's own code the bot executes, with
 * which bound parameters (the hour, the date, the corrected partitions), and one place to bound, log or audit it.
 * Its text is the catalog's, registered by an operator: it is run as written, never built from values.
 */
export async function runPipelineSql<R extends pg.QueryResultRow = pg.QueryResultRow>(db: Queryable, sql: string, params: unknown[]): Promise<pg.QueryResult<R>> {
  return db.query<R>(sql, params);
}

/**
 * What a report shows for a period, through its report_total_sql ($1 = the date), rounded to the cent and
 * kept as a string; null when the report has no row for it.
 */
export async function readReportFigure(db: Queryable, reportTotalSql: string, period: string): Promise<string | null> {
  const { rows } = await runPipelineSql<{ total: string | null }>(db, `SELECT round(r.total::numeric, 2)::text AS total FROM (${reportTotalSql}) AS r(total)`, [period]);
  return rows[0]?.total ?? null;
}
