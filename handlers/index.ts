import type { App } from '@slack/bolt';
import type { SlackDeps } from '../src/slack/deps.js';
import * as actions from './actions/index.js';
import * as commands from './commands/index.js';
import * as events from './events/index.js';

export function registerHandlers(app: App, deps: SlackDeps): void {
  commands.register(app, deps);
  actions.register(app, deps);
  events.register(app, deps);
}
