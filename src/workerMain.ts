import { App, LogLevel } from '@slack/bolt';
import { runSlackService } from './processLifecycle.js';
import { SlackMessenger } from './slack/messenger.js';
import { startWorkers } from './worker.js';

// npm run worker: step workers alone, delivering through Slack. Run as many as you like against one Redis
// and one database: deterministic job ids and the step rows keep them from doing anything twice.

runSlackService('backfill-worker', async (pool, config, slack) => {
  // A Bolt App is used only for its configured Web API client; no receiver is started.
  const app = new App({ token: slack.botToken, signingSecret: slack.signingSecret, logLevel: LogLevel.WARN,
    clientOptions: slack.apiUrl ? { slackApiUrl: slack.apiUrl } : {} });
  const messenger = new SlackMessenger(app.client, pool, config.STATUS_THROTTLE_MS);
  const workers = await startWorkers({ pool, config, messenger });
  return {
    stop: () => workers.close(),
    ready: `backfill-bot workers running (concurrency ${config.WORKER_CONCURRENCY}, prefix ${config.QUEUE_PREFIX})`,
  };
});
