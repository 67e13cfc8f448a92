import type { App, BlockAction, ButtonAction, GlobalShortcut } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { START_FORM_ACTION } from '../../src/views/blocks.js';
import { StartCallback } from '../../src/views/startModal.js';
import { startButton, startShortcut } from './startBackfill.js';

export function register(app: App, deps: SlackDeps): void {
  app.shortcut<GlobalShortcut>({ type: 'shortcut', callback_id: StartCallback.shortcut }, startShortcut(deps));
  app.action<BlockAction<ButtonAction>>({ type: 'block_actions', action_id: START_FORM_ACTION }, startButton(deps));
}
