import { openBackends, type Backends, type RunConfig } from './backends.js';
import { loadConfig, requireSlack, secretValues, type SlackConfig } from './config.js';
import { requireWebhookSecret } from './core/retrigger/call.js';
import { migrate } from './db/migrate.js';
import { createPool, sessionSettings, type Pool } from './db/pool.js';
import { BackfillError, ErrorCode, isBackfillError } from './errors.js';
import { configureLogging, logger } from './log.js';

/**
 * Runs a long-lived entry point: a refusal at start (bad configuration, say) prints its message and exits 1;
 * SIGINT / SIGTERM run `stop` once, then exit 0.
 *
 * The handlers go on before anything starts. The line that says the service is ready is printed inside `start`,
 * and a signal sent on it (a supervisor, a test) would otherwise meet the default action, which ends the process
 * without its stop: under load the few statements between that line and the handlers took long enough for it. A
 * signal during the start stops the service as soon as it has started; a second one ends the process at once.
 */
function runService(start: () => Promise<() => Promise<void>>): void {
  let stop: (() => Promise<void>) | undefined;
  let requested: NodeJS.Signals | undefined;
  const shutdown = (signal: NodeJS.Signals) => {
    if (requested) return;
    requested = signal;
    if (stop) stopNow(signal, stop);
    else logger().info({ signal }, `${signal}: stopping as soon as the start is done (send it again to end now)`);
  };
  // Once each: a second Ctrl-C while `stop` (or the start) runs ends the process at once, for whoever will not wait for it.
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
  start().then((started) => {
    stop = started;
    if (requested) stopNow(requested, started);
  }, (error: unknown) => {
    // A refusal at start (bad configuration, a backend that does not answer) is one sentence for the person
    // starting the service, often before the log is set up: printed plainly, as the CLI prints its refusals.
    // Anything else is a fault, logged with its stack.
    if (isBackfillError(error)) console.error(error.message);
    else logger().fatal({ err: error }, 'the service could not start');
    process.exit(1);
  });
}

function stopNow(signal: NodeJS.Signals, stop: () => Promise<void>): void {
  logger().info({ signal }, `${signal}: stopping (running steps finish, then the queues, the pool and the backends close)`);
  stop().then(() => {
    logger().info('stopped');
    process.exit(0);
  }, (error: unknown) => {
    logger().fatal({ err: error }, 'the service did not stop cleanly');
    process.exit(1);
  });
}

/**
 * Runs `listen` on `port` (the value of `variable`). A port another process holds is a refusal in one sentence,
 * not a stack: most often it is an earlier bot still running (a `kill -9` of npm leaves its child behind).
 */
export async function listenOn<T>(variable: 'PORT' | 'METRICS_PORT', port: number, listen: () => Promise<T>): Promise<T> {
  try {
    return await listen();
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'EADDRINUSE') throw error;
    throw new BackfillError(ErrorCode.PortInUse,
      `Port ${port} (${variable}) is already in use by another process, most likely an earlier backfill-bot left running: ` +
      `find it with \`ss -ltnp 'sport = :${port}'\` or \`lsof -i :${port}\` and stop it, or set ${variable} to a free port (e.g. ${variable}=${port < 65535 ? port + 1 : 3000}).`,
      { cause: error, details: { variable, port } });
  }
}

/**
 * Starts a service on its backends and gives back its stop, which closes the service's own parts first (its
 * workers, then its queues, then its pool: that is the order `start`'s stop must keep) and the backends last,
 * so the embedded PostgreSQL never goes away under a live connection. A start that fails closes them too.
 */
async function startOn(backends: Backends, start: (config: RunConfig) => Promise<() => Promise<void>>): Promise<() => Promise<void>> {
  let stop: () => Promise<void>;
  try {
    stop = await start(backends.config);
  } catch (error) {
    await backends.close();
    throw error;
  }
  return async () => {
    try {
      await stop();
    } finally {
      await backends.close();
    }
  };
}

/** Runs a command on its backends and closes them after it, whether it succeeded or failed. */
export async function runOn<T>(backends: Backends, work: (config: RunConfig) => Promise<T>): Promise<T> {
  try {
    return await work(backends.config);
  } finally {
    await backends.close();
  }
}

/**
 * The Slack-facing services' shared start (`npm start`, `npm run worker`): configuration, the Slack settings
 * they cannot run without, the backends, a migrated pool; `start` builds the rest and returns its own stop
 * (the pool and then the backends are closed after it) and the line that says it is ready.
 */
export function runSlackService(applicationName: string, start: (pool: Pool, config: RunConfig, slack: SlackConfig) => Promise<{ stop: () => Promise<void>; ready: string }>): void {
  runService(async () => {
    const loaded = loadConfig();
    const log = configureLogging({ level: loaded.LOG_LEVEL, name: applicationName, secrets: secretValues(loaded) });
    const slack = requireSlack(loaded);
    // Both services run the workers that send webhooks: neither signs them with a secret that is not one.
    requireWebhookSecret(loaded);
    const backends = await openBackends(loaded, { log: (line) => log.info(line) });
    return startOn(backends, async (config) => {
      const pool = createPool(config.DATABASE_URL, applicationName, sessionSettings(config));
      try {
        await migrate(pool);
        const service = await start(pool, config, slack);
        log.info(backends.summary);
        log.info(service.ready);
        return async () => {
          await service.stop();
          await pool.end();
        };
      } catch (error) {
        await pool.end();
        throw error;
      }
    });
  });
}
