import type { EngineContext } from '../core/context.js';
import { ACTIVE_STATES } from '../core/states.js';
import { quartersSince, summarizeCosts, type CostSummary } from '../core/file/costs.js';
import { loadBackfillReport, type BackfillReport } from '../core/file/status.js';
import { answerPaidAgainst, type PaidAgainstAnswer } from '../core/finance/paidAgainst.js';
import { listRecentBackfills, type BackfillRow } from '../db/backfills.js';
import { listReportNamesLongestFirst } from '../db/consumers.js';
import { findLatestDiffChart, type UploadedDiffChart } from '../db/diffCharts.js';

// The use cases that are asked rather than commanded: a question in plain words ("what did we pay against on
// 2026-11-15?") and what the Home tab shows. Facts out; src/slack/questions.ts words them.

/** A question asked in plain words: "what did we pay against on 2026-11-15?" (a report may be named too). */
interface PaidAgainstQuestion {
  date: string;
  report?: string | undefined;
}

async function parsePaidAgainstQuestion(ctx: EngineContext, text: string): Promise<PaidAgainstQuestion | undefined> {
  if (!/pa(id|y)\s+against/i.test(text)) return undefined;
  const date = /\b(\d{4}-\d{2}-\d{2})\b/.exec(text)?.[1];
  if (!date) return undefined;
  const names = await listReportNamesLongestFirst(ctx.pool);
  const lower = text.toLowerCase();
  const report = names.find((name) => lower.includes(name) || lower.includes(name.replaceAll('_', ' ')));
  return { date, report };
}

/** The answer to a paid-against question, or undefined when the text asks none. */
export async function askPaidAgainst(ctx: EngineContext, text: string): Promise<PaidAgainstAnswer | undefined> {
  const question = await parsePaidAgainstQuestion(ctx, text);
  return question ? answerPaidAgainst(ctx.pool, question) : undefined;
}

export interface HomeFacts {
  inFlight: BackfillReport[];
  recent: BackfillRow[];
  /** What the backfills of this quarter and the three before it cost, per pipeline. */
  costs: CostSummary;
  /** The last diff chart uploaded, shown under the log. */
  latestChart: UploadedDiffChart | undefined;
}

/** The backfills in flight with their gate, the latest log rows, what backfills cost and the latest diff chart. */
export async function loadHome(ctx: EngineContext): Promise<HomeFacts> {
  const recent = await listRecentBackfills(ctx.pool, 15);
  const inFlight = [];
  for (const backfill of recent.filter((b) => ACTIVE_STATES.includes(b.state))) inFlight.push(await loadBackfillReport(ctx.pool, backfill.id));
  return { inFlight, recent, costs: await summarizeCosts(ctx.pool, quartersSince(new Date())), latestChart: await findLatestDiffChart(ctx.pool) };
}
