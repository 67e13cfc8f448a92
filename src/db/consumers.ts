import type { Queryable } from './pool.js';

// The registered consumers of the pipelines' tables (backfill.consumers): reports, exports and models, with
// their owner, how they are re-triggered, and (reports) the query that reads their figure.

/** The consumer's retrigger definition as stored (parsed by retrigger.ts). */
export async function findRetrigger(db: Queryable, consumer: string): Promise<unknown> {
  const { rows } = await db.query<{ retrigger: unknown }>('SELECT retrigger FROM backfill.consumers WHERE name = $1::text', [consumer]);
  return rows[0]?.retrigger;
}

/** The query ($1 = the date) that reads the report's figure, when it has one. */
export async function findReportTotalSql(db: Queryable, report: string): Promise<string | null | undefined> {
  const { rows } = await db.query<{ sql: string | null }>('SELECT report_total_sql AS sql FROM backfill.consumers WHERE name = $1::text', [report]);
  return rows[0]?.sql;
}

export async function findConsumerKind(db: Queryable, name: string): Promise<string | undefined> {
  const { rows } = await db.query<{ kind: string }>('SELECT kind FROM backfill.consumers WHERE name = $1::text', [name]);
  return rows[0]?.kind;
}

/** The reports' names, longest first (so a question naming a longer one is not taken for a shorter one). */
export async function listReportNamesLongestFirst(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(`SELECT name FROM backfill.consumers WHERE kind = 'report' ORDER BY length(name) DESC`);
  return rows.map((row) => row.name);
}

/** The consumer's kind and (a report's) query that reads its figure, when it is registered. */
export async function findReportDefinition(db: Queryable, name: string): Promise<{ sql: string | null; kind: string } | undefined> {
  const { rows } = await db.query<{ sql: string | null; kind: string }>('SELECT report_total_sql AS sql, kind FROM backfill.consumers WHERE name = $1::text', [name]);
  return rows[0];
}

/** The reports that have a query reading their figure, by name: the ones that can be signed. */
export async function listSignableReports(db: Queryable): Promise<string[]> {
  const { rows } = await db.query<{ name: string }>(`SELECT name FROM backfill.consumers WHERE kind = 'report' AND report_total_sql IS NOT NULL ORDER BY name`);
  return rows.map((row) => row.name);
}
