import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { ALLOWED_HOST_ENTRY_RULE, canonicalHostEntry } from './core/retrigger/urlPolicy.js';
import { BackfillError, ErrorCode } from './errors.js';
import { registerSecrets } from './redaction.js';
import { isSlackUserId } from './slackUser.js';

// The only module that reads process.env. Parsed once at start; a bad value stops the start with a message
// that names the variable and says what a good value looks like.

const positiveInt = (name: string, fallback: number) =>
  z.coerce.number({ error: `${name} must be a whole number, e.g. ${fallback}` })
    .int(`${name} must be a whole number, e.g. ${fallback}`)
    .positive(`${name} must be at least 1`)
    .default(fallback);

const postgresUrl = z.string().refine((value) => {
  try {
    const url = new URL(value);
    return (url.protocol === 'postgres:' || url.protocol === 'postgresql:') && url.pathname.length > 1;
  } catch {
    return false;
  }
}, 'DATABASE_URL must look like postgres://user@host:5432/database');

const redisUrl = z.string().refine((value) => {
  try {
    const url = new URL(value);
    return url.protocol === 'redis:' || url.protocol === 'rediss:';
  } catch {
    return false;
  }
}, 'REDIS_URL must look like redis://127.0.0.1:6379');

function userIdList(name: string) {
  return z.string().default('').transform((value, issue) => {
    const ids = value.split(',').map((id) => id.trim()).filter(Boolean);
    for (const id of ids) if (!isSlackUserId(id)) issue.addIssue({ code: 'custom', message: `${name}: "${id}" is not a Slack user id (U… or W…)` });
    return ids;
  });
}

/** One lineage sender: its name (in logs, proposals and limits), the job namespaces it may post, its token. */
export interface LineageSender {
  name: string;
  /** null: every namespace (LINEAGE_TOKEN). */
  namespaces: string[] | null;
  token: string;
}

// `name:ns1,ns2:token;name2:ns3:token2`. The token is the last field (a bearer token has no ':'), the name the
// first, and the namespaces between may themselves hold ':' (OpenLineage namespaces are often URIs).
const LINEAGE_TOKENS_EXAMPLE = 'airflow:airflow-prod,airflow-dev:<openssl rand -hex 24>;dbt:dbt-prod:<another>';
const lineageTokenList = z.string().default('').transform((value, issue): LineageSender[] => {
  const senders: LineageSender[] = [];
  for (const entry of value.split(';').map((part) => part.trim()).filter(Boolean)) {
    const first = entry.indexOf(':');
    const last = entry.lastIndexOf(':');
    const name = entry.slice(0, first).trim();
    const namespaces = entry.slice(first + 1, last).split(',').map((ns) => ns.trim()).filter(Boolean);
    const token = entry.slice(last + 1).trim();
    // The entry is not echoed: it holds a token.
    const where = /^[a-z][a-z0-9_-]{0,39}$/.test(name) ? `the entry of ${name}` : `entry ${senders.length + 1}`;
    if (first < 0 || first === last || !/^[a-z][a-z0-9_-]{0,39}$/.test(name) || namespaces.length === 0) {
      issue.addIssue({ code: 'custom', message: `LINEAGE_TOKENS: ${where} must be name:namespace[,namespace…]:token (the name in lower case), e.g. ${LINEAGE_TOKENS_EXAMPLE}` });
    } else if (!/^[A-Za-z0-9._~+/-]{24,}=*$/.test(token)) {
      issue.addIssue({ code: 'custom', message: `LINEAGE_TOKENS: the token of ${name} must be at least 24 characters of letters, digits and ._~+/-, e.g. from \`openssl rand -hex 24\`` });
    } else if (senders.some((sender) => sender.name === name)) {
      issue.addIssue({ code: 'custom', message: `LINEAGE_TOKENS: ${name} is named twice; give each sender one entry` });
    } else {
      senders.push({ name, namespaces, token });
    }
  }
  return senders;
});

/**
 * The project's own folder: the embedded PostgreSQL keeps its data under it by default. This module runs as
 * src/config.ts from source and as dist/src/config.js once built (npm run build), one folder deeper.
 */
const PROJECT_ROOT = fileURLToPath(new URL(import.meta.url.endsWith('.js') ? '../..' : '..', import.meta.url));

const configSchema = z.object({
  // Unset: an embedded PostgreSQL of the project's own (src/backends.ts decides, src/db/embeddedPostgres.ts runs it).
  DATABASE_URL: postgresUrl.optional(),
  // The demo drops and recreates this database on every run, so it is never the working one. Unset: the database
  // backfill_bot_demo on DATABASE_URL's server, or on the embedded one.
  DEMO_DATABASE_URL: postgresUrl.optional(),
  // Unset: BullMQ keeps its queues in PostgreSQL (its PostgreSQL backend, in the bot's own database).
  REDIS_URL: redisUrl.optional(),
  EMBEDDED_PG_DIR: z.string().min(1).default(`${PROJECT_ROOT}.backfill-bot/pg`),
  QUEUE_PREFIX: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, 'QUEUE_PREFIX may hold letters, digits, _ and - (at most 40), e.g. backfill').default('backfill'),
  WORKER_CONCURRENCY: positiveInt('WORKER_CONCURRENCY', 4),
  MAX_PARTITIONS: positiveInt('MAX_PARTITIONS', 48),
  // More partitions than this need a second operator's approval.
  CAPACITY_LIMIT: positiveInt('CAPACITY_LIMIT', 24),
  // More rows than this (written or replaced, from the preview) also need a second operator's approval.
  CAPACITY_ROWS_LIMIT: positiveInt('CAPACITY_ROWS_LIMIT', 2_000_000),
  // Every statement the bot runs is cancelled by PostgreSQL after this long (set on each pool connection), and
  // every wait for a lock after LOCK_TIMEOUT_MS: nothing the bot starts can run or wait unbounded.
  STATEMENT_TIMEOUT_MS: positiveInt('STATEMENT_TIMEOUT_MS', 15 * 60_000),
  LOCK_TIMEOUT_MS: positiveInt('LOCK_TIMEOUT_MS', 5 * 60_000),
  // Staged and saved rows of finished backfills older than this many days are dropped (see docs/operating.md,
  // "Bounds, size and retention"), by a job that runs every RETENTION_INTERVAL_MS.
  RETENTION_DAYS: positiveInt('RETENTION_DAYS', 30),
  RETENTION_INTERVAL_MS: positiveInt('RETENTION_INTERVAL_MS', 60 * 60_000),
  // After the one-partition canary, partitions are published in waves of this size, each reconciled first.
  WAVE_SIZE: positiveInt('WAVE_SIZE', 4),
  // A partition of exactly its hour (a target partitioned by hour) is published by swap from this many rows, live
  // or previewed, whichever is more; a smaller one by rewrite, as on a plain target. A swap's catalog changes and
  // the target's ACCESS EXCLUSIVE cost as much as rewriting 10,000 rows (docs/benchmark.md). 0: always swap.
  SWAP_MIN_ROWS: z.coerce.number({ error: 'SWAP_MIN_ROWS must be a whole number of rows, e.g. 10000' })
    .int('SWAP_MIN_ROWS must be a whole number of rows, e.g. 10000').min(0, 'SWAP_MIN_ROWS must be 0 (always swap) or more').default(10_000),
  // A stage of a small hour (under SWAP_MIN_ROWS) runs up to this many small hours in its transaction: one claim,
  // one fence and one dispatch for them all (src/core/recompute/recomputeSteps.ts). 1: each hour alone.
  SMALL_HOUR_BATCH: positiveInt('SMALL_HOUR_BATCH', 8),
  JOB_ATTEMPTS: positiveInt('JOB_ATTEMPTS', 3),
  // How long a worker's claim on a step holds without renewal; it is renewed every third of this while the
  // step runs, so only a worker that died loses it, and another may then take the step over.
  STEP_LEASE_MS: positiveInt('STEP_LEASE_MS', 60_000),
  // A session idle inside a transaction this long is ended by PostgreSQL (its transaction rolls back, its locks go):
  // a frozen or vanished worker's. Unset: STEP_LEASE_MS, since a step idle longer than its lease has lost its claim.
  IDLE_IN_TRANSACTION_TIMEOUT_MS: z.coerce.number({ error: 'IDLE_IN_TRANSACTION_TIMEOUT_MS must be a whole number of milliseconds, e.g. 60000' })
    .int('IDLE_IN_TRANSACTION_TIMEOUT_MS must be a whole number of milliseconds, e.g. 60000').positive('IDLE_IN_TRANSACTION_TIMEOUT_MS must be at least 1').optional(),
  // off: the bot's sessions run with jit = off (src/db/pool.ts says why); server: with the server's own setting.
  DATABASE_JIT: z.enum(['off', 'server'], { error: 'DATABASE_JIT must be off (the default) or server (the server\'s own jit setting)' }).default('off'),
  JOB_BACKOFF_MS: positiveInt('JOB_BACKOFF_MS', 2000),
  WEBHOOK_TIMEOUT_MS: positiveInt('WEBHOOK_TIMEOUT_MS', 10000),
  // Signs every webhook re-trigger (X-Backfill-Signature). No default: a default is public, and a receiver that
  // trusts it trusts anyone. `npm start` and `npm run worker` refuse to start without it (requireWebhookSecret,
  // src/core/retrigger/call.ts);
  // the demo and the tests set their own.
  WEBHOOK_SIGNING_SECRET: z.string().min(16, 'WEBHOOK_SIGNING_SECRET must be at least 16 characters, e.g. from `openssl rand -hex 32`').optional(),
  // Lineage in (POST /lineage, src/http/lineage.ts): the bearer token senders must present. Unset (and no
  // LINEAGE_TOKENS): the route does not exist (404), so a bot without a token can never take read log rows from
  // anyone. LINEAGE_TOKEN may post events of any job namespace; LINEAGE_TOKENS binds each token to namespaces.
  LINEAGE_TOKEN: z.string().min(24, 'LINEAGE_TOKEN must be at least 24 characters, e.g. from `openssl rand -hex 24`').optional(),
  LINEAGE_TOKENS: lineageTokenList,
  // Per lineage sender (token): at most this many of its proposals open at once (429 beyond, until an operator
  // decides some), and at most this many read rows written per hour (a bucket this deep, refilled continuously).
  LINEAGE_MAX_OPEN_PROPOSALS: positiveInt('LINEAGE_MAX_OPEN_PROPOSALS', 20),
  LINEAGE_READS_PER_HOUR: positiveInt('LINEAGE_READS_PER_HOUR', 5000),
  // Lineage out (src/core/lineage/emit.ts): the OpenLineage endpoint the backfills' run events go to (Marquez:
  // http://host:5000/api/v1/lineage), and the bearer key it wants, if any. Unset: nothing is emitted.
  OPENLINEAGE_URL: z.url('OPENLINEAGE_URL must be a URL such as http://marquez:5000/api/v1/lineage').optional(),
  OPENLINEAGE_API_KEY: z.string().min(1).optional(),
  // The hosts webhook and REST re-triggers may call (src/core/retrigger/urlPolicy.ts): names, *.wildcards, IP
  // addresses. Unset: none, so a catalog with a remote re-trigger is refused until an operator names its hosts.
  // Loopback, link-local and metadata addresses are reached only when named exactly, never through a wildcard.
  RETRIGGER_ALLOWED_HOSTS: z.string().default('').transform((value, issue) => {
    const entries = value.split(',').map((entry) => entry.trim()).filter(Boolean);
    return entries.flatMap((entry) => {
      const canonical = canonicalHostEntry(entry);
      if (canonical === undefined) issue.addIssue({ code: 'custom', message: `RETRIGGER_ALLOWED_HOSTS: "${entry}" is not ${ALLOWED_HOST_ENTRY_RULE}` });
      return canonical === undefined ? [] : [canonical];
    });
  }),

  // Slack. Optional here so the CLI runs without them; `npm start` requires them (see requireSlack).
  SLACK_BOT_TOKEN: z.string().regex(/^xoxb-/, 'SLACK_BOT_TOKEN must be a bot token starting with xoxb-').optional(),
  SLACK_SIGNING_SECRET: z.string().min(8, 'SLACK_SIGNING_SECRET is the app\'s signing secret (Basic Information page)').optional(),
  SLACK_APP_TOKEN: z.string().regex(/^xapp-/, 'SLACK_APP_TOKEN must be an app-level token starting with xapp- (it turns on Socket Mode)').optional(),
  SLACK_API_URL: z.url('SLACK_API_URL must be a URL such as https://slack.com/api/').optional(),
  PORT: z.coerce.number({ error: 'PORT must be a port number, e.g. 3000' }).int().min(0).max(65535, 'PORT must be at most 65535').default(3000),
  BACKFILL_OPERATORS: userIdList('BACKFILL_OPERATORS'),
  // The OS users who are operators on the CLI. Empty: every CLI user is, since the CLI runs with the database's
  // credentials, which grant everything anyway; set it on a host that several people share. An entry
  // dana=U07DANA says the OS user dana is the Slack user U07DANA, one person on both front ends (the
  // two-operator rule counts them once); a plain dana is still accepted, and acts as cli:dana@<host>.
  BACKFILL_CLI_OPERATORS: z.string().default('').transform((value, issue) => {
    const entries = value.split(',').map((entry) => entry.trim()).filter(Boolean);
    const operators: { user: string; slackId?: string }[] = [];
    for (const entry of entries) {
      const [user = '', slackId, ...rest] = entry.split('=').map((part) => part.trim());
      if (!/^[a-z_][a-z0-9_.-]*\$?$/i.test(user) || rest.length > 0 || (slackId !== undefined && !isSlackUserId(slackId))) {
        issue.addIssue({ code: 'custom', message: `BACKFILL_CLI_OPERATORS: "${entry}" is neither an OS user name (dana) nor an OS user and their Slack user id (dana=U07DANA)` });
      } else if (operators.some((known) => known.user === user && known.slackId !== slackId)) {
        issue.addIssue({ code: 'custom', message: `BACKFILL_CLI_OPERATORS: "${user}" is listed twice as different people; give each OS user one entry, such as ${user}=U07DANA` });
      } else {
        operators.push(slackId === undefined ? { user } : { user, slackId });
      }
    }
    return operators;
  }),
  BACKFILL_OPERATOR_GROUP: z.string().regex(/^S[A-Z0-9]+$/, 'BACKFILL_OPERATOR_GROUP must be a user group id such as S0123ABCD').optional(),
  BACKFILL_CHANNELS: z.string().default('').transform((value, issue) => {
    const ids = value.split(',').map((id) => id.trim()).filter(Boolean);
    for (const id of ids) if (!/^[CG][A-Z0-9]+$/.test(id)) issue.addIssue({ code: 'custom', message: `BACKFILL_CHANNELS: "${id}" is not a channel id (C… or G…)` });
    return ids;
  }),
  ANNOUNCE_REMINDER_MS: positiveInt('ANNOUNCE_REMINDER_MS', 30 * 60_000),
  STATUS_THROTTLE_MS: z.coerce.number().int().min(0).default(1000),
  // Set (to anything): the CLI prints no colour even on a terminal (https://no-color.org).
  NO_COLOR: z.string().optional(),
  // The services' log (src/log.ts): JSON lines, or pino-pretty's lines when stdout is a terminal.
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], { error: 'LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent' }).default('info'),
  // Set: `npm run worker` serves GET /metrics on this port, and so does `npm start` over Socket Mode (over HTTP it
  // serves it beside /slack/events on PORT).
  METRICS_PORT: z.coerce.number({ error: 'METRICS_PORT must be a port number, e.g. 9464' }).int().min(1).max(65535, 'METRICS_PORT must be at most 65535').optional(),
});

export type Config = z.infer<typeof configSchema> & {
  /**
   * The variables named RETRIGGER_SECRET_…: the secrets a re-trigger names in the catalog ({env: …}, a REST
   * header's token, a queue's URL with its password), read when the replay runs so the catalog never holds them.
   */
  RETRIGGER_SECRETS?: Readonly<Record<string, string>>;
};

const RETRIGGER_SECRET = /^RETRIGGER_SECRET_[A-Z0-9_]+$/;

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // An empty variable means "not set": shells and .env files leave them behind.
  const present = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''));
  const parsed = configSchema.safeParse(present);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join('.') || 'config'}: ${issue.message}`);
    throw new BackfillError(ErrorCode.Config, `The configuration is not valid:\n${lines.join('\n')}`);
  }
  const secrets = Object.fromEntries(Object.entries(present).filter((entry): entry is [string, string] => RETRIGGER_SECRET.test(entry[0])));
  const config: Config = { ...parsed.data, RETRIGGER_SECRETS: secrets };
  // Every sink that stores or shows outside text redacts these values (src/redaction.ts): registered here, once,
  // so that no sink has to be handed the list and a new one cannot forget it.
  registerSecrets(secretValues(config));
  return config;
}

/** The password of a URL, as written (percent-encoded) and as the server receives it. */
function passwordOf(url: string | undefined): string[] {
  try {
    const password = url ? new URL(url).password : '';
    return password ? [password, decodeURIComponent(password)] : [];
  } catch {
    return [];
  }
}

/**
 * Every configured value that must never be shown: the Slack tokens and signing secret, the webhook signing
 * secret, the lineage tokens and key, every RETRIGGER_SECRET_…, and the passwords in the database, Redis and
 * OpenLineage URLs.
 */
export function secretValues(config: Partial<Config>): string[] {
  const values = [
    config.SLACK_BOT_TOKEN, config.SLACK_SIGNING_SECRET, config.SLACK_APP_TOKEN, config.WEBHOOK_SIGNING_SECRET,
    config.LINEAGE_TOKEN, ...(config.LINEAGE_TOKENS ?? []).map((sender) => sender.token), config.OPENLINEAGE_API_KEY,
    ...Object.values(config.RETRIGGER_SECRETS ?? {}),
    ...[config.DATABASE_URL, config.DEMO_DATABASE_URL, config.REDIS_URL, config.OPENLINEAGE_URL].flatMap(passwordOf),
  ];
  // A very short value would blank out ordinary words; such a secret is weak anyway, and the shapes still apply.
  return values.filter((value): value is string => typeof value === 'string' && value.length >= 4);
}

/** Who may post run events: the LINEAGE_TOKENS senders, then LINEAGE_TOKEN (every namespace), if set. */
export function lineageSenders(config: Pick<Config, 'LINEAGE_TOKEN' | 'LINEAGE_TOKENS'>): LineageSender[] {
  return [...config.LINEAGE_TOKENS, ...(config.LINEAGE_TOKEN ? [{ name: 'LINEAGE_TOKEN', namespaces: null, token: config.LINEAGE_TOKEN }] : [])];
}

export interface SlackConfig {
  botToken: string;
  signingSecret: string;
  appToken?: string | undefined;
  apiUrl?: string | undefined;
}

/** The Slack settings `npm start` cannot run without, or a message that says which are missing. */
export function requireSlack(config: Config): SlackConfig {
  const missing = [
    config.SLACK_BOT_TOKEN ? undefined : 'SLACK_BOT_TOKEN (xoxb-…, OAuth & Permissions page)',
    config.SLACK_SIGNING_SECRET ? undefined : 'SLACK_SIGNING_SECRET (Basic Information page)',
  ].filter((item): item is string => item !== undefined);
  if (missing.length > 0 || !config.SLACK_BOT_TOKEN || !config.SLACK_SIGNING_SECRET) {
    throw new BackfillError(ErrorCode.Config, `The Slack app needs ${missing.join(' and ')}. The CLI (npx backfill …) works without them.`);
  }
  return { botToken: config.SLACK_BOT_TOKEN, signingSecret: config.SLACK_SIGNING_SECRET, appToken: config.SLACK_APP_TOKEN, apiUrl: config.SLACK_API_URL };
}
