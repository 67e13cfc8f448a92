import type { AllMiddlewareArgs, BlockAction, ButtonAction, SlackActionMiddlewareArgs, SlackViewMiddlewareArgs, ViewSubmitAction } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { checkConfirmation, pressStatusButton, runConfirmedAction, type SubmittedValues } from '../../src/slack/statusActions.js';
import { refusedModal } from '../../src/views/statusActions.js';
import { replyForError } from '../reply.js';

/**
 * A button of the status message: the confirmation opens right after the ack (a trigger id lasts about three
 * seconds), or the presser alone is told why not. Who pressed is taken from Slack, never from the button.
 */
export function statusButton(deps: SlackDeps) {
  return async ({ ack, body, action, client, logger }: AllMiddlewareArgs & SlackActionMiddlewareArgs<BlockAction<ButtonAction>>): Promise<void> => {
    await ack();
    const who = { user: body.user.id, userName: body.user.name ?? body.user.username };
    // The Home tab's copy of the buttons has no channel: it acts for the backfill's incident channel, and answers in a modal.
    const onHome = body.container.type === 'view';
    const inChannel = body.channel?.id ?? body.container.channel_id;
    if (typeof inChannel !== 'string' && !onHome) {
      logger.error(`a status button was pressed outside a channel by ${who.user}; nothing was done`);
      return;
    }
    try {
      const view = await pressStatusButton(deps, who, typeof inChannel === 'string' ? { channel: inChannel } : { home: true }, action.value);
      await client.views.open({ trigger_id: body.trigger_id, view });
    } catch (error) {
      const text = replyForError(error, (m) => logger.error(m));
      if (typeof inChannel === 'string') await client.chat.postEphemeral({ channel: inChannel, user: who.user, text });
      else await client.views.open({ trigger_id: body.trigger_id, view: refusedModal(undefined, text) });
    }
  };
}

/**
 * The confirmation submitted: a field to correct or a refusal is the ack's answer (the modal shows it); otherwise
 * the modal closes and the action runs, and the person is told the outcome in the channel, as only they see it.
 */
export function statusConfirmation(deps: SlackDeps) {
  return async ({ ack, body, view, client, logger }: AllMiddlewareArgs & SlackViewMiddlewareArgs<ViewSubmitAction>): Promise<void> => {
    const who = { user: body.user.id, userName: body.user.name };
    let checked: Awaited<ReturnType<typeof checkConfirmation>>;
    try {
      checked = await checkConfirmation(deps, who, view.private_metadata, view.state.values as SubmittedValues);
    } catch (error) {
      await ack({ response_action: 'update', view: refusedModal(undefined, replyForError(error, (m) => logger.error(m))) });
      return;
    }
    if (checked.kind === 'errors') return ack({ response_action: 'errors', errors: checked.errors });
    if (checked.kind === 'refused') return ack({ response_action: 'update', view: checked.view });
    await ack();
    const text = await runConfirmedAction(deps, who, checked).catch((error: unknown) => replyForError(error, (m) => logger.error(m)));
    await client.chat.postEphemeral({ channel: checked.reference.channel, user: who.user, text });
  };
}
