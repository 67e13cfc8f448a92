import type { Config } from './config.js';
import { readRolePowers, type RolePowers } from './db/databaseRole.js';
import { openEmbeddedPostgres, type EmbeddedPostgres } from './db/embeddedPostgres.js';
import { createDatabase } from './db/pool.js';
import { redactUrl, requireDatabase, requireRedis } from './db/reachable.js';
import { logger, type Logger } from './log.js';

// The one place that decides which PostgreSQL and which queue backend a process uses. Every entry point (npm
// start, npm run worker, the CLI, the demo, the bench, the tests) opens its backends here:
//   DATABASE_URL set    -> that PostgreSQL, which must answer and hold the database (nothing created by accident)
//   DATABASE_URL unset  -> the project's embedded PostgreSQL (src/db/embeddedPostgres.ts), its database created
//   REDIS_URL set       -> BullMQ on that Redis, which must answer
//   REDIS_URL unset     -> BullMQ's PostgreSQL backend, in a schema of the bot's own database
// Either way the role the bot connects as is checked here, once per start: a superuser, or one that may read or
// write the server's files or run programs there, is warned about in one sentence
// (docs/operating.md, "The database role").

/** The configuration once the database is known: what the engine, the queue and the workers run on. */
export type RunConfig = Config & { DATABASE_URL: string };

export type QueueBackend =
  | { kind: 'redis'; url: string; prefix: string }
  | { kind: 'postgres'; databaseUrl: string; schema: string };

export interface Backends {
  config: RunConfig;
  database: 'configured' | 'embedded';
  queue: QueueBackend;
  /** One line for the start-up log: which PostgreSQL, which queue backend. */
  summary: string;
  /** Its first half: which PostgreSQL alone (the bench names its queue backends itself). */
  databaseSummary: string;
  /** Leaves the embedded server (the last process out stops it). Call after every pool and queue is closed. */
  close(): Promise<void>;
}

/** Which database of the server a process works in: the bot's own, or the demo's (dropped and made anew on every run). */
type DatabaseRole = 'bot' | 'demo';

const DATABASE_NAMES: Record<DatabaseRole, string> = { bot: 'backfill_bot', demo: 'backfill_bot_demo' };

export interface OpenOptions {
  role?: DatabaseRole;
  /** Create a configured database that does not exist (the demo; `backfill migrate --create`). The embedded one is always created. */
  create?: boolean;
  /**
   * Check that the queue backend answers (default). The CLI skips it: most of its commands never touch the
   * queues, and `stop` must still stop a backfill while Redis is away (it checks for itself, with checkQueue).
   */
  checkQueue?: boolean;
  /** Settings for the embedded server (the tests' turns fsync off). */
  embeddedSettings?: Record<string, string>;
  log?: (line: string) => void;
  /** Where the warning about an over-powered database role goes; unset: the process's logger. */
  logger?: Pick<Logger, 'warn'>;
}

/** BullMQ's PostgreSQL backend ignores `prefix`: its namespace is a schema, whose name may not hold "-". */
function queueSchema(prefix: string): string {
  return `bullmq_${prefix.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`;
}

/** The queue backend for a configuration whose database is known: Redis when REDIS_URL is set, else PostgreSQL. */
export function queueBackendOf(config: RunConfig): QueueBackend {
  return config.REDIS_URL
    ? { kind: 'redis', url: config.REDIS_URL, prefix: config.QUEUE_PREFIX }
    : { kind: 'postgres', databaseUrl: config.DATABASE_URL, schema: queueSchema(config.QUEUE_PREFIX) };
}

/** Refuses, in one sentence, when the queue backend does not answer (Redis; PostgreSQL's is the database itself). */
export async function checkQueue(queue: QueueBackend): Promise<void> {
  if (queue.kind === 'redis') await requireRedis(queue.url);
}

function describeQueue(queue: QueueBackend): string {
  return queue.kind === 'redis'
    ? `queues: BullMQ on Redis ${redactUrl(queue.url)} (prefix ${queue.prefix})`
    : `queues: BullMQ on PostgreSQL (schema ${queue.schema}; set REDIS_URL to use Redis)`;
}

/** The configured URL for the role: DATABASE_URL, or for the demo DEMO_DATABASE_URL or its database on DATABASE_URL's server. */
function configuredUrl(config: Config, role: DatabaseRole): { url: string; variable: string } | undefined {
  if (role === 'demo' && config.DEMO_DATABASE_URL) return { url: config.DEMO_DATABASE_URL, variable: 'DEMO_DATABASE_URL' };
  if (!config.DATABASE_URL) return undefined;
  if (role === 'bot') return { url: config.DATABASE_URL, variable: 'DATABASE_URL' };
  const url = new URL(config.DATABASE_URL);
  url.pathname = `/${DATABASE_NAMES.demo}`;
  return { url: url.toString(), variable: 'DATABASE_URL' };
}

/** The sentence that warns about a role with more than the bot needs, or undefined when it has nothing more. */
function rolePowersWarning(powers: RolePowers, where: string): string | undefined {
  const what = powers.superuser ? 'is a superuser' : powers.serverAccess.length > 0 ? `holds ${powers.serverAccess.join(', ')}` : undefined;
  if (!what) return undefined;
  return `The database role "${powers.role}" (${where}) ${what}, so any SQL the bot runs (a catalog's re-trigger statement, a pipeline's step) ` +
    'could read the server\'s files or run programs as its OS user: give the bot a role that owns its database and nothing more (docs/operating.md, "The database role").';
}

export async function openBackends(config: Config, options: OpenOptions = {}): Promise<Backends> {
  const role = options.role ?? 'bot';
  const configured = configuredUrl(config, role);
  let embedded: EmbeddedPostgres | undefined;
  let databaseUrl: string;
  if (configured) {
    await requireDatabase(configured.url, { create: options.create ?? false, variable: configured.variable });
    databaseUrl = configured.url;
  } else {
    embedded = await openEmbeddedPostgres({ dataDir: config.EMBEDDED_PG_DIR, settings: options.embeddedSettings, log: options.log });
    databaseUrl = embedded.url(DATABASE_NAMES[role]);
  }
  // Whatever fails from here leaves the embedded server again (the last process out stops it).
  try {
    if (embedded) await createDatabase(databaseUrl);
    const runConfig: RunConfig = { ...config, DATABASE_URL: databaseUrl };
    const queue = queueBackendOf(runConfig);
    if (options.checkQueue ?? true) await checkQueue(queue);
    // Once everything answers: a start that fails on an absent Redis says that one sentence only.
    const warning = rolePowersWarning(await readRolePowers(databaseUrl), configured?.variable ?? 'the embedded PostgreSQL');
    if (warning) (options.logger ?? logger()).warn(warning);
    const database = embedded
      ? `PostgreSQL: embedded, ${embedded.dataDir} on 127.0.0.1:${embedded.port}${embedded.started ? '' : ' (started by another process)'}`
      : `PostgreSQL: ${redactUrl(databaseUrl)}`;
    return {
      config: runConfig,
      database: embedded ? 'embedded' : 'configured',
      queue,
      summary: `${database}; ${describeQueue(queue)}`,
      databaseSummary: database,
      close: async () => {
        await embedded?.release();
      },
    };
  } catch (error) {
    await embedded?.release();
    throw error;
  }
}
