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
    const user = body.user.id;
    const channel = body.channel?.id ?? body.container.channel_id;
    if (typeof channel !== 'string') {
      logger.error(`a status button was pressed outside a channel by ${user}; nothing was done`);
      return;
    }
    try {
      const view = await pressStatusButton(deps, { user, userName: body.user.name ?? body.user.username }, channel, action.value);
      await client.views.open({ trigger_id: body.trigger_id, view });
    } catch (error) {
      await client.chat.postEphemeral({ channel, user, text: replyForError(error, (m) => logger.error(m)) });
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
