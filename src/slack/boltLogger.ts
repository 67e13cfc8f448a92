import { format } from 'node:util';
import { LogLevel, type Logger as BoltLogger } from '@slack/bolt';
import type { Logger } from '../log.js';

/** pino's number for each of Bolt's levels. */
const SEVERITY: Record<LogLevel, number> = { [LogLevel.DEBUG]: 20, [LogLevel.INFO]: 30, [LogLevel.WARN]: 40, [LogLevel.ERROR]: 50 };

/**
 * Bolt's logger interface over a pino logger, so Bolt's and its Web API client's lines are JSON lines of the
 * same stream, redacted the same way. Bolt always sets a level (INFO when the app is given none): the
 * effective level is the stricter of Bolt's and the pino logger's, so LOG_LEVEL stays the floor.
 */
export function boltLogger(base: Logger): BoltLogger {
  let level: LogLevel = LogLevel.DEBUG;
  let log = base.child({ component: 'bolt' });
  const apply = () => {
    const severity = Math.max(base.levelVal, SEVERITY[level]);
    log.level = base.levels.labels[severity] ?? 'silent';
  };
  const write = (method: 'debug' | 'info' | 'warn' | 'error') => (...msg: unknown[]) => {
    const [first, ...rest] = msg;
    // An error as the first argument keeps its stack, as pino's err field.
    if (first instanceof Error) log[method]({ err: first }, rest.length > 0 ? format(...rest) : first.message);
    else log[method](format(...msg));
  };
  apply();
  return {
    debug: write('debug'),
    info: write('info'),
    warn: write('warn'),
    error: write('error'),
    setLevel(next: LogLevel) {
      level = next;
      apply();
    },
    getLevel: () => level,
    setName(name: string) {
      log = base.child({ component: name });
      apply();
    },
  };
}
