import { App, LogLevel, type webApi } from '@slack/bolt';
import { serveMetrics } from './http/metrics.js';
import { logger } from './log.js';
import { Metrics } from './metrics.js';
import { listenOn, runSlackService } from './processLifecycle.js';
import { boltLogger } from './slack/boltLogger.js';
import { postingClientFor, SlackMessenger } from './slack/delivery/messenger.js';
import { redactingFetch } from './slack/delivery/outgoing.js';
import { startWorkers } from './worker.js';

// npm run worker: step workers alone, delivering through Slack. Run as many as you like against one Redis
// and one database: deterministic job ids and the step rows keep them from doing anything twice.

runSlackService('backfill-worker', async (pool, config, slack) => {
  const log = logger();
  const metrics = new Metrics(pool, log);
  // A Bolt App is used only for its configured Web API client; no receiver is started.
  const clientOptions: webApi.WebClientOptions = { ...(slack.apiUrl ? { slackApiUrl: slack.apiUrl } : {}), fetch: redactingFetch(metrics.slackFetch(slack.apiUrl)) };
  const app = new App({ token: slack.botToken, signingSecret: slack.signingSecret, logger: boltLogger(log), logLevel: LogLevel.WARN, clientOptions });
  const poster = postingClientFor(app.client, { fetch: clientOptions.fetch, logger: clientOptions.logger });
  const messenger = new SlackMessenger(app.client, pool, config.STATUS_THROTTLE_MS, poster);
  const workers = await startWorkers({ pool, config, messenger, log, metrics });
  metrics.watchQueue(workers.queue);
  // No receiver, so no /metrics beside it: METRICS_PORT gives the worker a server of its own.
  const metricsPort = config.METRICS_PORT;
  const served = metricsPort ? await listenOn('METRICS_PORT', metricsPort, () => serveMetrics(metrics, metricsPort, log)).catch(async (error: unknown) => {
    // Closed before the pool they use is, or the exit waits on them.
    await workers.close();
    throw error;
  }) : undefined;
  return {
    stop: async () => {
      await served?.close();
      await workers.close();
    },
    ready: `backfill-bot workers running (concurrency ${config.WORKER_CONCURRENCY}, prefix ${config.QUEUE_PREFIX}${served ? `, GET /metrics on :${served.port}` : ''})`,
  };
});
