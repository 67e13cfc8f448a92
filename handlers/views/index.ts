import type { App, ViewSubmitAction } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { StartCallback } from '../../src/views/startModal.js';
import { startSubmission } from './startBackfill.js';

export function register(app: App, deps: SlackDeps): void {
  app.view<ViewSubmitAction>({ type: 'view_submission', callback_id: StartCallback.form }, startSubmission(deps));
  app.view<ViewSubmitAction>({ type: 'view_submission', callback_id: StartCallback.plan }, startSubmission(deps));
}
