import { serveMetrics } from './http/metrics.js';
import { runSlackService } from './processLifecycle.js';
import { createSlackApp } from './slack/app.js';

// npm start: the Slack app (HTTP on PORT, or Socket Mode with SLACK_APP_TOKEN) with the workers in-process.

runSlackService('backfill-bot', async (pool, config, slack) => {
  const bot = await createSlackApp({ ctx: { pool, config }, slack });
  await bot.start(config.PORT);
  // Over HTTP, GET /metrics is served beside /slack/events; Socket Mode has no server, so METRICS_PORT gives it one.
  const served = slack.appToken && config.METRICS_PORT ? await serveMetrics(bot.metrics, config.METRICS_PORT) : undefined;
  return {
    stop: async () => {
      await served?.close();
      await bot.stop();
    },
    ready: slack.appToken
      ? `backfill-bot connected over Socket Mode${served ? ` (GET /metrics on :${served.port})` : ''}`
      : `backfill-bot listening on :${config.PORT} (POST /slack/events, GET /healthz, GET /metrics)`,
  };
});
