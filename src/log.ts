import pino, { type DestinationStream, type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { Config } from './config.js';
import { redact, REDACTED } from './redaction.js';

// The services' log: one pino root logger, JSON lines (one object a line, for a log shipper) or, on a terminal,
// pino-pretty's coloured lines. Where a step runs, a child is bound to { backfillId, step, key }
// and travels in the step's context (src/core/context.ts), so every line of that step carries them.
//
// Secrets are kept out in two ways, because no single one is enough: pino's `redact` censors known keys
// wherever they sit in a logged object (a token, a signing secret, an Authorization header); every finished
// line then goes through the redaction every sink applies (src/redaction.ts): the configured secrets' values
// and credential shapes (URL passwords, credential query parameters, Bearer values, Slack tokens).

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
  /** Literal values never to print besides those loadConfig registered (src/config.ts, secretValues). */
  secrets?: readonly string[];
}

const CENSOR = REDACTED;

/** Keys censored wherever they are logged, at the top or one level down (pino's paths take one wildcard). */
const SECRET_KEYS = [
  'token', 'botToken', 'appToken', 'signingSecret', 'secret', 'password', 'authorization', 'Authorization', 'cookie',
  'SLACK_BOT_TOKEN', 'SLACK_SIGNING_SECRET', 'SLACK_APP_TOKEN', 'WEBHOOK_SIGNING_SECRET',
];
const SECRET_HEADERS = ['authorization', 'Authorization', 'cookie', 'x-slack-signature'];
const accessor = (key: string) => (/^[A-Za-z_]\w*$/.test(key) ? `.${key}` : `["${key}"]`);
const REDACT_PATHS: string[] = [
  ...SECRET_KEYS, ...SECRET_KEYS.map((key) => `*.${key}`),
  ...SECRET_HEADERS.flatMap((header) => [`headers${accessor(header)}`, `*.headers${accessor(header)}`]),
];

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
    hooks: { streamWrite: (line) => redact(line, secrets) },
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
