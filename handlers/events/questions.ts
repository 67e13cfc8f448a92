import type { AllMiddlewareArgs, SlackEventMiddlewareArgs } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { answerQuestion } from '../../src/slack/questions.js';
import { replyForError } from '../reply.js';

/** "@backfill-bot what did we pay against on 2026-11-15?": answered in the thread it was asked in. */
export function mentionQuestion(deps: SlackDeps) {
  return async ({ event, client, logger }: AllMiddlewareArgs & SlackEventMiddlewareArgs<'app_mention'>): Promise<void> => {
    const reply = await answerQuestion(deps.ctx, event.text, event.user ?? '').catch((error: unknown) => {
      const text = replyForError(error, (m) => logger.error(m));
      return { text, blocks: [] };
    });
    await client.chat.postMessage({ channel: event.channel, thread_ts: event.thread_ts ?? event.ts, ...reply });
  };
}

/** The same question in a DM to the bot. Only plain messages from people: edits and the bot's own are ignored. */
export function directQuestion(deps: SlackDeps) {
  return async ({ message, client, logger }: AllMiddlewareArgs & SlackEventMiddlewareArgs<'message'>): Promise<void> => {
    if (message.channel_type !== 'im' || ('subtype' in message && message.subtype) || !('text' in message) || !message.text) return;
    const reply = await answerQuestion(deps.ctx, message.text, 'user' in message && message.user ? message.user : '').catch((error: unknown) => {
      const text = replyForError(error, (m) => logger.error(m));
      return { text, blocks: [] };
    });
    await client.chat.postMessage({ channel: message.channel, ...reply });
  };
}
