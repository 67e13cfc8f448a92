import { runSlackService } from './processLifecycle.js';
import { createSlackApp } from './slack/app.js';

// npm start: the Slack app (HTTP on PORT, or Socket Mode with SLACK_APP_TOKEN) with the workers in-process.

runSlackService('backfill-bot', async (pool, config, slack) => {
  const bot = await createSlackApp({ ctx: { pool, config }, slack });
  await bot.start(config.PORT);
  return {
    stop: () => bot.stop(),
    ready: slack.appToken ? 'backfill-bot connected over Socket Mode' : `backfill-bot listening on :${config.PORT} (POST /slack/events, GET /healthz)`,
  };
});
