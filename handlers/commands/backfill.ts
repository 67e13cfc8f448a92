import type { AllMiddlewareArgs, SlackCommandMiddlewareArgs } from '@slack/bolt';
import { runBackfillCommand } from '../../src/slack/commands.js';
import type { SlackDeps } from '../../src/slack/deps.js';
import { startForm } from '../../src/slack/startModal.js';
import { replyForError } from '../reply.js';

/** /backfill: ack at once (Slack allows 3 s), do the work, answer ephemerally through response_url. */
export function backfillCommand(deps: SlackDeps) {
  return async ({ command, ack, respond, client, logger }: AllMiddlewareArgs & SlackCommandMiddlewareArgs): Promise<void> => {
    await ack();
    try {
      // Without arguments it opens the form to start a backfill, for this channel; `/backfill help` lists the commands.
      if (command.text.trim() === '') {
        await client.views.open({ trigger_id: command.trigger_id, view: await startForm(deps, { channel: command.channel_id }) });
        return;
      }
      const reply = await runBackfillCommand(deps, { user: command.user_id, userName: command.user_name, channel: command.channel_id, text: command.text });
      await respond({ response_type: 'ephemeral', ...reply });
    } catch (error) {
      await respond({ response_type: 'ephemeral', text: replyForError(error, (m) => logger.error(m)) });
    }
  };
}
