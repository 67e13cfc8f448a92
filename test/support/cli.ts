import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { TestEngine } from './engine.js';

const run = promisify(execFile);

/** The CLI's entry point, run through tsx as `npx backfill` runs it. */
export const CLI = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));

/**
 * Runs the real CLI on the engine's database and queue prefix, as the OS user running the tests, with `env` over
 * the test process's environment; its exit code and what it printed (stderr after stdout), whether it failed or not.
 */
export async function runCli(engine: TestEngine, env: Record<string, string>, ...args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', CLI, ...args], {
      env: { ...process.env, DATABASE_URL: engine.ctx.config.DATABASE_URL, QUEUE_PREFIX: engine.ctx.config.QUEUE_PREFIX, ...env },
    });
    return { code: 0, out: stdout };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, out: failed.stdout + failed.stderr };
  }
}
