import type { App } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { backfillCommand } from './backfill.js';

export function register(app: App, deps: SlackDeps): void {
  app.command('/backfill', backfillCommand(deps));
}
