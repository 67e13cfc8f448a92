import { App, LogLevel, type CustomRoute, type webApi } from '@slack/bolt';
import type { Server } from 'node:http';
import { Redis } from 'ioredis';
import { queueBackendOf } from './backends.js';
import { registerHandlers } from '../handlers/index.js';
import type { SlackConfig } from './config.js';
import type { EngineContext } from './core/context.js';
import { pingDatabase } from './db/pool.js';
import { startWorkers, type Workers } from './worker.js';
import { postingClientFor, SlackMessenger } from './slack/delivery/messenger.js';
import { OperatorPolicy } from './slack/permissions.js';
import { logger } from './log.js';
import { Metrics } from './metrics.js';
import { metricsRoute } from './http/metrics.js';
import { boltLogger } from './slack/boltLogger.js';
import { redactingFetch } from './slack/delivery/outgoing.js';
import { lineageRoutes } from './http/lineage.js';
import { postLineageProposal } from './slack/delivery/lineageProposals.js';

// The composition root of `npm start`: the Slack app (the Bolt receiver with the listeners of handlers/, the
// HTTP routes, the messenger) with the step workers in the same process. The CLI's is src/commandSession.ts,
// apart so that a terminal command loads no Bolt, BullMQ or chart renderer. Nothing below src/ builds these
// parts for itself: the front ends and the core take them as given.

export interface SlackAppOptions {
  ctx: EngineContext;
  slack: SlackConfig;
  /** Web API client settings on top of ours (tests shorten the retry policy). */
  clientOptions?: webApi.WebClientOptions;
  logLevel?: LogLevel;
  /** Run the step workers in this process (the default for `npm start`). */
  workers?: boolean;
}

export interface SlackApp {
  app: App;
  messenger: SlackMessenger;
  workers: Workers | undefined;
  /** What GET /metrics serves: this app's registry. */
  metrics: Metrics;
  start(port: number): Promise<Server | undefined>;
  stop(): Promise<void>;
}

/**
 * The Bolt app: the HTTP receiver on /slack/events with signature verification (or Socket Mode when an
 * app token is set), /healthz, /metrics, the listeners, and the step workers in the same process.
 */
export async function createSlackApp(options: SlackAppOptions): Promise<SlackApp> {
  const { slack } = options;
  // Every part of the app logs to one logger and counts into one registry of its own.
  const log = options.ctx.log ?? logger();
  const metrics = new Metrics(options.ctx.pool, log);
  const ctx: EngineContext = { ...options.ctx, log, metrics };
  // With the queues in PostgreSQL, the database check covers them too.
  const queue = queueBackendOf(ctx.config);
  const redis = queue.kind === 'redis' ? new Redis(queue.url, { lazyConnect: true, maxRetriesPerRequest: 1 }) : undefined;
  const clientOptions: webApi.WebClientOptions = {
    ...(slack.apiUrl ? { slackApiUrl: slack.apiUrl } : {}),
    // 429s wait Retry-After inside the client; other failures retry a few times, then the step is retried.
    retryConfig: { retries: 5, factor: 2, minTimeout: 1000, maxTimeout: 30_000 },
    timeout: 15_000,
    ...options.clientOptions,
    // Every call leaves redacted, whichever fetch counts it (src/slack/delivery/outgoing.ts).
    fetch: redactingFetch(options.clientOptions?.fetch ?? metrics.slackFetch(slack.apiUrl)),
  };
  const app = new App({
    token: slack.botToken,
    logger: boltLogger(log),
    logLevel: options.logLevel ?? LogLevel.INFO,
    clientOptions,
    ...(slack.appToken
      ? { socketMode: true, appToken: slack.appToken }
      : {
        signingSecret: slack.signingSecret,
        customRoutes: [healthRoute(ctx, redis), metricsRoute(metrics, log), ...lineageRoutes({ ctx, log: (message) => log.warn(message), onProposal: (id): Promise<void> => postLineageProposal(app.client, ctx.pool, ctx.config, id) })],
      }),
  });
  // The posting client counts its failures and logs as the app's client does.
  const poster = postingClientFor(app.client, { fetch: clientOptions.fetch, logger: clientOptions.logger });
  const messenger = new SlackMessenger(app.client, ctx.pool, ctx.config.STATUS_THROTTLE_MS, poster);
  const policy = new OperatorPolicy(ctx.config, app.client);
  const workers = options.workers === false ? undefined : await startWorkers({ ...ctx, messenger });
  metrics.watchQueue(workers?.queue);
  const kick = async (backfillId: number) => {
    if (workers) await workers.kick(backfillId);
  };
  const dequeue = async (backfillId: number) => (workers ? workers.dequeue(backfillId) : 0);
  registerHandlers(app, { ctx, messenger, policy, kick, dequeue });
  return {
    app,
    messenger,
    workers,
    metrics,
    async start(port: number) {
      const server = await app.start(port);
      return slack.appToken ? undefined : (server as Server);
    },
    async stop() {
      await app.stop().catch(() => undefined);
      await workers?.close();
      redis?.disconnect();
    },
  };
}

/** GET /healthz: 200 once the database (and Redis, when configured) answer. */
function healthRoute(ctx: EngineContext, redis: Redis | undefined): CustomRoute {
  return {
    path: '/healthz',
    method: ['GET'],
    handler: (_req, res) => {
      healthy(ctx, redis).then((ok) => {
        res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' });
        res.end(ok ? 'ok' : 'database or redis unreachable');
      }, () => {
        res.writeHead(503);
        res.end('unhealthy');
      });
    },
  };
}

async function healthy(ctx: EngineContext, redis: Redis | undefined): Promise<boolean> {
  try {
    await pingDatabase(ctx.pool);
    if (!redis) return true;
    if (redis.status === 'wait') await redis.connect();
    return (await redis.ping()) === 'PONG';
  } catch {
    return false;
  }
}
