import type { App, BlockAction, ButtonAction, ViewSubmitAction } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { ActionId } from '../../src/views/blocks.js';
import { CONFIRMATION_CALLBACK_ID, StatusActionId } from '../../src/views/statusActions.js';
import { announcementButton } from './announcement.js';
import { statusButton, statusConfirmation } from './statusActions.js';

export function register(app: App, deps: SlackDeps): void {
  app.action<BlockAction<ButtonAction>>({ type: 'block_actions', action_id: ActionId.Acknowledge }, announcementButton(deps, 'acknowledge'));
  app.action<BlockAction<ButtonAction>>({ type: 'block_actions', action_id: ActionId.Hold }, announcementButton(deps, 'hold'));
  // The status message's buttons and the confirmation each opens (its submission is this action's end).
  for (const actionId of Object.values(StatusActionId)) app.action<BlockAction<ButtonAction>>({ type: 'block_actions', action_id: actionId }, statusButton(deps));
  app.view<ViewSubmitAction>({ type: 'view_submission', callback_id: CONFIRMATION_CALLBACK_ID }, statusConfirmation(deps));
}
