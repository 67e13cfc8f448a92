import pino, { type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { Config } from './config.js';

// The services' log: one pino root logger, JSON lines (one object a line, for a log shipper) or, on a terminal,
// pino-pretty's coloured lines. Where a step runs, a child is bound to { backfillId, step, key, generation }
// and travels in the step's context (src/core/context.ts), so every line of that step carries them.
//
// Secrets are kept out in three ways, because no single one is enough: pino's `redact` censors known keys
// wherever they sit in a logged object (a token, a signing secret, an Authorization header); every finished
// line is then scrubbed of URL passwords, Slack tokens and Bearer credentials whatever key or message holds
// them; and of the configured secrets' literal values (a signing secret has no recognisable shape).

export type { Logger };

export type LogLevelName = Config['LOG_LEVEL'];

export interface LogOptions {
  level?: LogLevelName;
  /** The `name` field of every line: which process wrote it (backfill-bot, backfill-worker). */
  name?: string;
  /** Where the lines go; unset: stdout (a service's log is its standard output). */
  destination?: DestinationStream;
  /** Human lines instead of JSON; unset: when the output is a terminal. */
  pretty?: boolean;
  /** Literal values never to print (the configured tokens and passwords: see secretsIn). */
  secrets?: readonly string[];
}

const CENSOR = '[redacted]';

/** Keys censored wherever they are logged, at the top or one level down (pino's paths take one wildcard). */
const SECRET_KEYS = [
  'token', 'botToken', 'appToken', 'signingSecret', 'secret', 'password', 'authorization', 'Authorization', 'cookie',
  'SLACK_BOT_TOKEN', 'SLACK_SIGNING_SECRET', 'SLACK_APP_TOKEN', 'WEBHOOK_SIGNING_SECRET',
];
const SECRET_HEADERS = ['authorization', 'Authorization', 'cookie', 'x-slack-signature'];
const accessor = (key: string) => (/^[A-Za-z_]\w*$/.test(key) ? `.${key}` : `["${key}"]`);
export const REDACT_PATHS: string[] = [
  ...SECRET_KEYS, ...SECRET_KEYS.map((key) => `*.${key}`),
  ...SECRET_HEADERS.flatMap((header) => [`headers${accessor(header)}`, `*.headers${accessor(header)}`]),
];

/** Shapes of credentials, whatever field or message carries them. */
const SCRUBS: [RegExp, string][] = [
  // scheme://user:password@host: the password goes, the rest stays useful.
  [/\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@"'\\]*):[^\s@/"'\\]+@/gi, `$1:${CENSOR}@`],
  [/\bxox[a-z]-[A-Za-z0-9-]+/g, CENSOR],
  [/\bxapp-[A-Za-z0-9-]+/g, CENSOR],
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi, `$1 ${CENSOR}`],
];

/** `line` without credentials: the configured secrets' values and anything shaped like a credential. */
export function scrub(line: string, secrets: readonly string[] = []): string {
  let out = line;
  for (const secret of secrets) {
    // As the value appears in the line: JSON escapes quotes and backslashes.
    for (const form of new Set([secret, JSON.stringify(secret).slice(1, -1)])) out = out.split(form).join(CENSOR);
  }
  for (const [pattern, replacement] of SCRUBS) out = out.replace(pattern, replacement);
  return out;
}

/** The configured values that must never be printed: tokens, secrets and the passwords in the URLs. */
export function secretsIn(config: Partial<Config>): string[] {
  // As written in the URL (percent-encoded) and as the server receives it.
  const passwords = [config.DATABASE_URL, config.DEMO_DATABASE_URL, config.REDIS_URL].flatMap((url) => {
    try {
      const password = url ? new URL(url).password : '';
      return [password, decodeURIComponent(password)];
    } catch {
      return [];
    }
  });
  const values = [config.SLACK_BOT_TOKEN, config.SLACK_SIGNING_SECRET, config.SLACK_APP_TOKEN, config.WEBHOOK_SIGNING_SECRET, ...passwords];
  // A very short value would blank out ordinary words; such a secret is weak anyway, and the patterns still apply.
  return values.filter((value): value is string => typeof value === 'string' && value.length >= 4);
}

function destinationFor(options: LogOptions, fd: 1 | 2): DestinationStream {
  const tty = fd === 1 ? process.stdout.isTTY : process.stderr.isTTY;
  const human = options.pretty ?? Boolean(tty);
  if (human) {
    // In-process and synchronous: a line is on the terminal before the process can exit.
    return pretty({ colorize: Boolean(tty), sync: true, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', destination: options.destination ?? fd });
  }
  return options.destination ?? pino.destination({ dest: fd, sync: true });
}

/** A root logger. Services use the one configureLogging made; tests make their own to read the lines. */
export function createLogger(options: LogOptions = {}, fd: 1 | 2 = 1): Logger {
  const secrets = [...(options.secrets ?? [])];
  return pino({
    level: options.level ?? 'info',
    ...(options.name ? { name: options.name } : {}),
    redact: { paths: REDACT_PATHS, censor: CENSOR },
    // The finished line, whatever put the secret in it: a message, a binding, an error's stack.
    hooks: { streamWrite: (line) => scrub(line, secrets) },
  }, destinationFor(options, fd));
}

let root: Logger | undefined;

/**
 * The process's root logger. Until an entry point configures it (the services do, from LOG_LEVEL), it prints
 * only warnings and errors, and on stderr: the CLI's and the demo's standard output is their own.
 */
export function logger(): Logger {
  root ??= createLogger({ level: 'warn' }, 2);
  return root;
}

/** Makes the root logger the services' one (LOG_LEVEL, the process's name, its secrets); returns it. */
export function configureLogging(options: LogOptions): Logger {
  root = createLogger(options);
  return root;
}
