import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { ErrorCode, isBackfillError } from '../src/errors.js';

describe('configuration', () => {
  it('leaves DATABASE_URL and REDIS_URL unset when they are, so the embedded defaults can be chosen', () => {
    const config = loadConfig({ DATABASE_URL: '', REDIS_URL: '' });
    expect(config.DATABASE_URL).toBeUndefined();
    expect(config.REDIS_URL).toBeUndefined();
    expect(config.EMBEDDED_PG_DIR).toMatch(/\/\.backfill-bot\/pg$/);
    expect(config.MAX_PARTITIONS).toBe(48);
  });

  it('stops on a bad value with a message that names it and says what would be right', () => {
    const attempt = () => loadConfig({ DATABASE_URL: 'mysql://x', WORKER_CONCURRENCY: 'lots', QUEUE_PREFIX: 'a:b' });
    expect(attempt).toThrowError(/DATABASE_URL must look like postgres:\/\/user@host:5432\/database/);
    try {
      attempt();
    } catch (error) {
      expect(isBackfillError(error, ErrorCode.Config)).toBe(true);
      expect((error as Error).message).toMatch(/WORKER_CONCURRENCY must be a whole number, e\.g\. 4/);
      expect((error as Error).message).toMatch(/QUEUE_PREFIX may hold letters/);
    }
  });

  it('reads BACKFILL_CLI_OPERATORS as OS users, each mapped to a Slack id or not, and refuses anything else with an example', () => {
    expect(loadConfig({ BACKFILL_CLI_OPERATORS: 'dana=U07DANA, sam' }).BACKFILL_CLI_OPERATORS).toEqual([{ user: 'dana', slackId: 'U07DANA' }, { user: 'sam' }]);
    for (const bad of ['dana=dana', 'dana=U07DANA=U07LEAD', '=U07DANA', 'da na']) {
      expect(() => loadConfig({ BACKFILL_CLI_OPERATORS: bad }))
        .toThrowError(`BACKFILL_CLI_OPERATORS: "${bad}" is neither an OS user name (dana) nor an OS user and their Slack user id (dana=U07DANA)`);
    }
    expect(() => loadConfig({ BACKFILL_CLI_OPERATORS: 'dana=U07DANA,dana=U07LEAD' })).toThrowError(/"dana" is listed twice as different people/);
  });

  it('treats an empty variable as unset', () => {
    expect(loadConfig({ REDIS_URL: '', WORKER_CONCURRENCY: '' }).WORKER_CONCURRENCY).toBe(4);
  });
});
