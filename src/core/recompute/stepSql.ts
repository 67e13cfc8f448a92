import { BackfillError, ErrorCode } from '../../errors.js';

/**
 * A pipeline's step is one `INSERT INTO <target> (<columns>) <query>` for exactly one partition ($1 is the
 * hour). The nightly run executes it as written, right after deleting the hour; a backfill stages the same
 * query into its own table, and a preview aggregates it, so rows never have to travel through Node and no
 * rolled-back write is needed to see what the step would produce.
 */
export interface StepSql {
  /** The table the step writes, as written in the SQL (schema-qualified or not). */
  target: string;
  /** The column list, as written (quoted identifiers kept quoted). */
  columns: string[];
  /** The query that yields the partition's rows, in the order of `columns`. */
  query: string;
}

const STEP_SHAPE = /^\s*INSERT\s+INTO\s+((?:"[^"]+"|[A-Za-z_][A-Za-z0-9_$]*)(?:\s*\.\s*(?:"[^"]+"|[A-Za-z_][A-Za-z0-9_$]*))?)\s*\(([^()]*)\)\s*((?:SELECT|WITH|VALUES)\b[\s\S]*?)\s*;?\s*$/i;

export function parseStepSql(pipeline: string, sql: string): StepSql {
  const match = STEP_SHAPE.exec(sql);
  const target = match?.[1];
  const columnList = match?.[2];
  const query = match?.[3];
  if (!target || columnList === undefined || !query) {
    throw new BackfillError(ErrorCode.BadInput,
      `The step of ${pipeline} must be one INSERT INTO <table> (<columns>) SELECT … for the partition $1, with its column list written out, ` +
      'e.g. INSERT INTO warehouse.orders (partition_hour, order_id, amount) SELECT … WHERE event_hour = $1::timestamptz.');
  }
  const columns = columnList.split(',').map((column) => column.trim()).filter(Boolean);
  if (columns.length === 0) throw new BackfillError(ErrorCode.BadInput, `The step of ${pipeline} names no columns in its INSERT.`);
  return { target: target.replace(/\s+/g, ''), columns, query };
}
