import type { App } from '@slack/bolt';
import type { SlackDeps } from '../../src/slack/deps.js';
import { homeOpened } from './home.js';
import { directQuestion, mentionQuestion } from './questions.js';

export function register(app: App, deps: SlackDeps): void {
  app.event('app_mention', mentionQuestion(deps));
  app.event('app_home_opened', homeOpened(deps));
  app.message(directQuestion(deps));
}
