import { listRecentBackfills } from '../db/backfills.js';
import { listReportNamesLongestFirst } from '../db/consumers.js';
import type { Queryable } from '../db/pool.js';
import { answerPaidAgainst } from '../core/finance/paidAgainst.js';
import { loadBackfillReport } from '../core/file/status.js';
import { quartersSince, summarizeCosts } from '../core/file/costs.js';
import { ACTIVE_STATES } from '../core/engine/stateMachine.js';
import { homeView, paidAgainstMessage, type Message } from '../views/blocks.js';
import type { types } from '@slack/bolt';
import { findCommand, usageOf } from '../commands/table.js';
import { authorize } from '../core/authorization.js';

/** A question asked in plain words: "what did we pay against on 2026-11-15?" (a report may be named too). */
export interface PaidAgainstQuestion {
  date: string;
  report?: string | undefined;
}

export async function parsePaidAgainstQuestion(db: Queryable, text: string): Promise<PaidAgainstQuestion | undefined> {
  if (!/pa(id|y)\s+against/i.test(text)) return undefined;
  const date = /\b(\d{4}-\d{2}-\d{2})\b/.exec(text)?.[1];
  if (!date) return undefined;
  const names = await listReportNamesLongestFirst(db);
  const lower = text.toLowerCase();
  const report = names.find((name) => lower.includes(name) || lower.includes(name.replaceAll('_', ' ')));
  return { date, report };
}

/** The command a plain-word question stands for: its rule and usage come from the command table like any other. */
const PAID_AGAINST = findCommand('paid-against', 'slack');

const HOW_TO_ASK = 'Ask me "what did we pay against on 2026-11-15?" (you may name the report, e.g. settlement report), ' +
  `or use \`${PAID_AGAINST ? usageOf(PAID_AGAINST, 'slack') : '/backfill paid-against'}\`.`;

/** The reply to a mention or a DM, under the paid-against command's rule (anyone); refusals come back as text. */
export async function answerQuestion(db: Queryable, text: string, user: string): Promise<Message> {
  if (PAID_AGAINST) authorize({ actor: user, operator: false }, PAID_AGAINST.rule, PAID_AGAINST.action);
  const question = await parsePaidAgainstQuestion(db, text);
  if (!question) return { text: HOW_TO_ASK, blocks: [{ type: 'section', text: { type: 'mrkdwn', text: HOW_TO_ASK } }] };
  return paidAgainstMessage(await answerPaidAgainst(db, question));
}

/** The Home tab: the backfills in flight with their gate, the latest log rows, and what backfills cost. */
export async function buildHome(db: Queryable): Promise<types.HomeView> {
  const recent = await listRecentBackfills(db, 15);
  const inFlight = [];
  for (const backfill of recent.filter((b) => ACTIVE_STATES.includes(b.state))) {
    inFlight.push(await loadBackfillReport(db, backfill.id));
  }
  // What the backfills of this quarter and the three before it cost, per pipeline.
  return homeView({ inFlight, recent, costs: await summarizeCosts(db, quartersSince(new Date())) });
}
