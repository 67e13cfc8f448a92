// The demo's commands refuse arguments they do not know, with the usage, before they touch a database.

import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const DEMO = fileURLToPath(new URL('../../dev/demo/run.ts', import.meta.url));
const SEED = fileURLToPath(new URL('../../dev/demo/seedCli.ts', import.meta.url));

async function refused(script: string, args: string[]): Promise<{ code: number; out: string }> {
  try {
    await run(process.execPath, ['--import', 'tsx', script, ...args], {
      // Nothing answers here: a command that got as far as its database would say so instead.
      env: { ...process.env, DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere', DEMO_DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere', REDIS_URL: 'redis://127.0.0.1:1' },
    });
    return { code: 0, out: '' };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, out: (failed.stdout + failed.stderr).trim() };
  }
}

describe('the demo commands refuse what they do not know', () => {
  it('npm run demo: an unknown target shape, and an unknown option, each with the usage', async () => {
    expect(await refused(DEMO, ['--target', 'sharded'])).toEqual({
      code: 1, out: 'Unknown target shape "sharded". Choose one of: plain, partitioned (partitioned: one partition per hour, published by swap).',
    });
    const unknown = await refused(DEMO, ['--partitioned']);
    expect(unknown.code).toBe(1);
    expect(unknown.out).toMatch(/^Unknown option '--partitioned'.*Usage: npm run demo \[-- --target plain\|partitioned\]$/s);
  });

  it('npm run demo:seed: an unknown scenario, and a stray word, each said before anything is touched', async () => {
    expect(await refused(SEED, ['--scenario=night-99'])).toEqual({ code: 1, out: 'Unknown scenario "night-99". Choose one of: month-end, night-9-outage.' });
    const stray = await refused(SEED, ['partitioned']);
    expect(stray.code).toBe(1);
    expect(stray.out).toMatch(/Usage: npm run demo:seed -- \[--scenario month-end\|night-9-outage\] \[--target plain\|partitioned\]$/);
    expect(stray.out).not.toMatch(/did not answer/);
  });
});
