import type { App } from '@slack/bolt';
import type { SlackDeps } from '../src/slack/deps.js';
import * as actions from './actions/index.js';
import * as commands from './commands/index.js';
import * as events from './events/index.js';
import * as shortcuts from './shortcuts/index.js';
import * as views from './views/index.js';

export function registerHandlers(app: App, deps: SlackDeps): void {
  commands.register(app, deps);
  actions.register(app, deps);
  events.register(app, deps);
  shortcuts.register(app, deps);
  views.register(app, deps);
}
