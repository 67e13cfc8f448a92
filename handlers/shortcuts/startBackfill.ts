import type { AllMiddlewareArgs, BlockAction, ButtonAction, GlobalShortcut, SlackActionMiddlewareArgs, SlackShortcutMiddlewareArgs } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { startForm } from '../../src/slack/startModal.js';
import { replyForError } from '../reply.js';

// The ways into the start form that come from no channel: the "Start a backfill" shortcut and the Home tab's
// button. The form asks for the incident channel. The trigger is good for 3 s: the modal opens right after the ack.

type OpenArgs = Pick<AllMiddlewareArgs, 'client' | 'logger'> & { triggerId: string; user: string };

async function openForm(deps: SlackDeps, { client, logger, triggerId, user }: OpenArgs): Promise<void> {
  try {
    await client.views.open({ trigger_id: triggerId, view: await startForm(deps, {}) });
  } catch (error) {
    // There is no channel to answer in: the person hears why in their DM with the bot.
    await client.chat.postMessage({ channel: user, text: replyForError(error, (m) => logger.error(m)) });
  }
}

/** The global shortcut "Start a backfill" (manifest.yml, callback_id start_backfill). */
export function startShortcut(deps: SlackDeps) {
  return async ({ ack, shortcut, client, logger }: AllMiddlewareArgs & SlackShortcutMiddlewareArgs<GlobalShortcut>): Promise<void> => {
    await ack();
    await openForm(deps, { client, logger, triggerId: shortcut.trigger_id, user: shortcut.user.id });
  };
}

/** The Home tab's "Start a backfill" button. */
export function startButton(deps: SlackDeps) {
  return async ({ ack, body, client, logger }: AllMiddlewareArgs & SlackActionMiddlewareArgs<BlockAction<ButtonAction>>): Promise<void> => {
    await ack();
    await openForm(deps, { client, logger, triggerId: body.trigger_id, user: body.user.id });
  };
}
