import { z } from 'zod';
import { BackfillError, ErrorCode } from './errors.js';

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

export const configSchema = z.object({
  DATABASE_URL: postgresUrl.default('postgres://postgres@127.0.0.1:5432/backfill_bot'),
  // The demo drops and recreates this database on every run, so it is never the working one.
  DEMO_DATABASE_URL: postgresUrl.default('postgres://postgres@127.0.0.1:5432/backfill_bot_demo'),
  REDIS_URL: redisUrl.default('redis://127.0.0.1:6379'),
  QUEUE_PREFIX: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, 'QUEUE_PREFIX may hold letters, digits, _ and - (at most 40), e.g. backfill').default('backfill'),
  WORKER_CONCURRENCY: positiveInt('WORKER_CONCURRENCY', 4),
  MAX_PARTITIONS: positiveInt('MAX_PARTITIONS', 48),
  JOB_ATTEMPTS: positiveInt('JOB_ATTEMPTS', 3),
  JOB_BACKOFF_MS: positiveInt('JOB_BACKOFF_MS', 2000),
  WEBHOOK_TIMEOUT_MS: positiveInt('WEBHOOK_TIMEOUT_MS', 10000),
  WEBHOOK_SIGNING_SECRET: z.string().min(16, 'WEBHOOK_SIGNING_SECRET must be at least 16 characters').default('backfill-bot-dev-webhook-secret'),
});

export type Config = z.infer<typeof configSchema>;

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // An empty variable means "not set": shells and .env files leave them behind.
  const present = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''));
  const parsed = configSchema.safeParse(present);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => `  ${issue.path.join('.') || 'config'}: ${issue.message}`);
    throw new BackfillError(ErrorCode.Config, `The configuration is not valid:\n${lines.join('\n')}`);
  }
  return parsed.data;
}
