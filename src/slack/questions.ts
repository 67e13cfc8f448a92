import type { types } from '@slack/bolt';
import { askPaidAgainst, loadHome } from '../commands/questions.js';
import { findCommand, usageOf } from '../commands/table.js';
import { authorize } from '../core/authorization.js';
import type { EngineContext } from '../core/context.js';
import { homeView, paidAgainstMessage, withLatestDiffChart, type Message } from '../views/blocks.js';

/** The command a plain-word question stands for: its rule and usage come from the command table like any other. */
const PAID_AGAINST = findCommand('paid-against', 'slack');

const HOW_TO_ASK = 'Ask me "what did we pay against on 2026-11-15?" (you may name the report, e.g. settlement report), ' +
  `or use \`${PAID_AGAINST ? usageOf(PAID_AGAINST, 'slack') : '/backfill paid-against'}\`.`;

/** The reply to a mention or a DM, under the paid-against command's rule (anyone); refusals come back as text. */
export async function answerQuestion(ctx: EngineContext, text: string, user: string): Promise<Message> {
  if (PAID_AGAINST) authorize({ actor: user, operator: false }, PAID_AGAINST.rule, PAID_AGAINST.action);
  const answer = await askPaidAgainst(ctx, text);
  if (!answer) return { text: HOW_TO_ASK, blocks: [{ type: 'section', text: { type: 'mrkdwn', text: HOW_TO_ASK } }] };
  return paidAgainstMessage(answer);
}

/** A message's permalink from Slack (chat.getPermalink), or undefined when Slack gives none. */
export type Permalink = (channel: string, ts: string) => Promise<string | undefined>;

/**
 * The Home tab: a "Start a backfill" button, the backfills in flight with their gate and a link to their incident
 * thread, the latest log rows, what backfills cost, the latest diff chart. A thread whose link Slack does not give
 * is named by its channel: the tab is published all the same.
 */
export async function homeTab(ctx: EngineContext, permalink?: Permalink): Promise<types.HomeView> {
  const home = await loadHome(ctx);
  const threadLinks = new Map<number, string>();
  if (permalink) {
    await Promise.all(home.inFlight.map(async ({ backfill }) => {
      if (!backfill.incidentChannel || !backfill.statusTs) return;
      const link = await permalink(backfill.incidentChannel, backfill.statusTs).catch(() => undefined);
      if (link) threadLinks.set(backfill.id, link);
    }));
  }
  return withLatestDiffChart(homeView({ ...home, threadLinks }), home.latestChart);
}
