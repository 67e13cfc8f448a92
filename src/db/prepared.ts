import { createHash } from 'node:crypto';

/*
 * The bot's own statements that every step runs (its claim, its reads of the backfill, the pipeline and the
 * target, its bookkeeping writes, its finish), prepared under a name on each connection that runs them: the
 * server parses one once a connection and, after its first five runs, keeps one generic plan (plan_cache_mode
 * auto), where an unnamed statement is parsed and planned at every run.
 *
 * PERF: at 60 rows a partition the server's log of one backfill put the parse and bind (planning) of the unnamed
 * statements at 16 ms a partition, against a backfill's 25-30 ms a partition besides the raw step's SQL.
 *
 * Only for texts fixed in code: a name stays prepared on its connection for the connection's life, so a text that
 * varies (a run's own table, a pipeline's SQL, a value written into the text) would grow every connection's
 * statements without bound. Such texts stay unnamed; `prepared` refuses to name more than MAX_PREPARED texts in
 * one process, which only a varying text can reach.
 *
 * A migration that changed the type of a column one of these selects would fail it on a connection that prepared it
 * before ("cached plan must not change result type"): workers restart on a deploy, so none outlives one (as for
 * the named statements of src/db/steps.ts).
 */

/** A statement of fixed text under its name, as pg's query takes it: `db.query(prepared(SQL), values)`. */
export interface PreparedStatement {
  readonly name: string;
  readonly text: string;
}

export const MAX_PREPARED = 256;

const byText = new Map<string, PreparedStatement>();

/** The statement of this text, named after it (the same text, the same name and object). */
export function prepared(text: string): PreparedStatement {
  const known = byText.get(text);
  if (known) return known;
  if (byText.size >= MAX_PREPARED) {
    throw new Error(`prepared(): more than ${MAX_PREPARED} statement texts named in one process; one of them varies and must be sent unnamed: ${text.slice(0, 120)}`);
  }
  const statement = { name: `backfill_s_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`, text };
  byText.set(text, statement);
  return statement;
}

/** The texts this process named so far, in the order it first ran them. */
export function preparedTexts(): string[] {
  return [...byText.keys()];
}
