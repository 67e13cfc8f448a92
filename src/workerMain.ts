import { App, LogLevel } from '@slack/bolt';
import { openBackends } from './backends.js';
import { loadConfig, requireSlack } from './config.js';
import { migrate } from './db/migrate.js';
import { createPool, poolBounds } from './db/pool.js';
import { runService, startOn } from './processLifecycle.js';
import { SlackMessenger } from './slack/messenger.js';
import { startWorkers } from './worker.js';

// npm run worker: step workers alone, delivering through Slack. Run as many as you like against one Redis
// and one database: deterministic job ids and the step rows keep them from doing anything twice.

runService(async () => {
  const loaded = loadConfig();
  const slack = requireSlack(loaded);
  const backends = await openBackends(loaded, { log: (line) => console.log(line) });
  return startOn(backends, async (config) => {
    const pool = createPool(config.DATABASE_URL, 'backfill-worker', poolBounds(config));
    try {
      await migrate(pool);
      // A Bolt App is used only for its configured Web API client; no receiver is started.
      const app = new App({ token: slack.botToken, signingSecret: slack.signingSecret, logLevel: LogLevel.WARN,
        clientOptions: slack.apiUrl ? { slackApiUrl: slack.apiUrl } : {} });
      const messenger = new SlackMessenger(app.client, pool, config.STATUS_THROTTLE_MS);
      const workers = await startWorkers({ pool, config, messenger });
      console.log(backends.summary);
      console.log(`backfill-bot workers running (concurrency ${config.WORKER_CONCURRENCY}, prefix ${config.QUEUE_PREFIX})`);
      return async () => {
        await workers.close();
        await pool.end();
      };
    } catch (error) {
      await pool.end();
      throw error;
    }
  });
});
