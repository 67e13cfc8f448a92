import type { AllMiddlewareArgs, SlackEventMiddlewareArgs } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { homeTab } from '../../src/slack/questions.js';

/** Publishes the Home tab for the person who opened it, with the latest diff chart and links to the incident threads. */
export function homeOpened(deps: SlackDeps) {
  return async ({ event, client }: AllMiddlewareArgs & SlackEventMiddlewareArgs<'app_home_opened'>): Promise<void> => {
    if (event.tab !== 'home') return;
    const permalink = async (channel: string, ts: string) => (await client.chat.getPermalink({ channel, message_ts: ts })).permalink;
    await client.views.publish({ user_id: event.user, view: await homeTab(deps.ctx, permalink) });
  };
}
