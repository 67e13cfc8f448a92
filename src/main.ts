import { serveMetrics } from './http/metrics.js';
import { listenOn, runSlackService } from './processLifecycle.js';
import { createSlackApp } from './app.js';

// npm start: the Slack app (HTTP on PORT, or Socket Mode with SLACK_APP_TOKEN) with the workers in-process.

runSlackService('backfill-bot', async (pool, config, slack) => {
  const bot = await createSlackApp({ ctx: { pool, config }, slack });
  let served: Awaited<ReturnType<typeof serveMetrics>> | undefined;
  try {
    await listenOn('PORT', config.PORT, () => bot.start(config.PORT));
    // Over HTTP, GET /metrics is served beside /slack/events; Socket Mode has no server, so METRICS_PORT gives it one.
    const metricsPort = config.METRICS_PORT;
    served = slack.appToken && metricsPort ? await listenOn('METRICS_PORT', metricsPort, () => serveMetrics(bot.metrics, metricsPort)) : undefined;
  } catch (error) {
    // The workers started with the app: stopped before the pool they use is closed, or the exit waits on them.
    await bot.stop();
    throw error;
  }
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
