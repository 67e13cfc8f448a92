import type { AllMiddlewareArgs, BlockAction, ButtonAction, SlackActionMiddlewareArgs } from '@slack/bolt';
import { pressButton, type ButtonAction as Press } from '../../src/slack/buttons.js';
import type { SlackDeps } from '../../src/slack/deps.js';
import { replyForError } from '../reply.js';

/** Acknowledge / Hold on an announcement DM. Who pressed it is taken from Slack, never from the button. */
export function announcementButton(deps: SlackDeps, press: Press) {
  return async ({ ack, body, action, respond, logger }: AllMiddlewareArgs & SlackActionMiddlewareArgs<BlockAction<ButtonAction>>): Promise<void> => {
    await ack();
    try {
      const note = await pressButton(deps, press, body.user.id, action.value, body.user.name ?? body.user.username);
      if (note) await respond({ response_type: 'ephemeral', replace_original: false, text: note });
    } catch (error) {
      await respond({ response_type: 'ephemeral', replace_original: false, text: replyForError(error, (m) => logger.error(m)) });
    }
  };
}
