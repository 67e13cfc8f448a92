// auto_explain for the benchmark's --explain run: every statement a session runs that takes longer than a
// threshold comes back to the client as a NOTICE with its EXPLAIN (ANALYZE, BUFFERS) plan, so the plans are the
// real ones of the engine's own statements (no copy of their SQL here), in the parent and in worker processes.
// Needs a superuser, as the bench's local server has.

import pg from 'pg';
import { startupSettings, withStartupSettings, type Pool } from '../src/db/pool.js';

export interface CapturedPlan {
  ms: number;
  /** The statement as the client sent it, whitespace folded. */
  query: string;
  /** The plan, without the duration and Query Text lines. */
  plan: string;
}

/**
 * Startup settings that load auto_explain at NOTICE level for every statement of the session over
 * `minDurationMs`. Needs a superuser (session_preload_libraries).
 */
function autoExplainSettings(minDurationMs: number, options: { nodeTiming: boolean }): Record<string, string> {
  return {
    session_preload_libraries: 'auto_explain', 'auto_explain.log_level': 'notice', 'auto_explain.log_min_duration': String(Math.max(0, Math.round(minDurationMs))),
    'auto_explain.log_analyze': 'on', 'auto_explain.log_buffers': 'on', 'auto_explain.log_timing': options.nodeTiming ? 'on' : 'off',
    'auto_explain.log_nested_statements': 'off',
  };
}

/** The same as connection options, for a worker process's PGOPTIONS. */
export function autoExplainOptions(minDurationMs: number, options: { nodeTiming: boolean }): string {
  return Object.entries(autoExplainSettings(minDurationMs, options)).map(([name, value]) => `-c ${name}=${value}`).join(' ');
}

/** Hands every auto_explain notice a connection of the pool receives to `sink`. */
export function listenForPlans(pool: Pool, sink: (plan: CapturedPlan) => void): void {
  pool.on('connect', (client) => {
    client.on('notice', (notice) => {
      const plan = parseNotice(notice.message ?? '');
      if (plan) sink(plan);
    });
  });
}

/**
 * A pool of this process whose statements over `minDurationMs` come back with their plans, with JIT as the bot's
 * own sessions have it (DATABASE_JIT): a plan compiled here and not in the timed runs is not theirs.
 */
export function explainingPool(databaseUrl: string, minDurationMs: number, nodeTiming: boolean, sink: (plan: CapturedPlan) => void, jit: 'off' | 'server'): Pool {
  // The same startup settings as the bot's pools (createPool), joined to the URL's own options as theirs are.
  const connectionString = withStartupSettings(databaseUrl, { ...autoExplainSettings(minDurationMs, { nodeTiming }), ...startupSettings({ jit }) });
  const pool = new pg.Pool({ connectionString, application_name: 'backfill-bench-explain', max: 10 });
  pool.on('error', (error) => console.error(`postgres (explain pool): ${error.message}`));
  listenForPlans(pool, sink);
  return pool;
}

function parseNotice(message: string): CapturedPlan | undefined {
  const head = /^duration: ([\d.]+) ms {2}plan:\n/.exec(message);
  if (!head?.[1]) return undefined;
  const body = message.slice(head[0].length).replace(/^Query Text: /, '');
  // The query text may span lines, some starting at column 0: the plan starts at the first node with costs.
  const lines = body.split('\n');
  const top = lines.findIndex((line) => /\(cost=\d/.test(line));
  const query = (top < 0 ? body : lines.slice(0, top).join('\n')).replace(/\s+/g, ' ').trim();
  const plan = top < 0 ? '' : lines.slice(top).join('\n');
  return { ms: Number(head[1]), query, plan: plan.trimEnd() };
}

export interface StatementSummary {
  /** The statement, parameters left as $n, shortened for printing. */
  statement: string;
  calls: number;
  totalMs: number;
  maxMs: number;
  /** The plan of its slowest call. */
  slowestPlan: string;
}

/** Captured plans grouped by statement text, heaviest total first. */
export function summarizePlans(plans: CapturedPlan[], limit: number): StatementSummary[] {
  const byStatement = new Map<string, StatementSummary>();
  for (const plan of plans) {
    const summary = byStatement.get(plan.query) ?? { statement: plan.query, calls: 0, totalMs: 0, maxMs: -1, slowestPlan: '' };
    summary.calls += 1;
    summary.totalMs += plan.ms;
    if (plan.ms > summary.maxMs) {
      summary.maxMs = plan.ms;
      summary.slowestPlan = plan.plan;
    }
    byStatement.set(plan.query, summary);
  }
  return [...byStatement.values()].sort((a, b) => b.totalMs - a.totalMs).slice(0, limit);
}
