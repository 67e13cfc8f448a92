import type { App, BlockAction, ButtonAction } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { ActionId } from '../../src/views/blocks.js';
import { announcementButton } from './announcement.js';

export function register(app: App, deps: SlackDeps): void {
  app.action<BlockAction<ButtonAction>>({ type: 'block_actions', action_id: ActionId.Acknowledge }, announcementButton(deps, 'acknowledge'));
  app.action<BlockAction<ButtonAction>>({ type: 'block_actions', action_id: ActionId.Hold }, announcementButton(deps, 'hold'));
}
