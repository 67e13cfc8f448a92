import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countRows, createTestEngine, type TestEngine } from './support/engine.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../src/cli/main.ts', import.meta.url));

describe('the backfill CLI', () => {
  let engine: TestEngine;
  const cli = async (...args: string[]) => {
    try {
      const { stdout } = await run(process.execPath, ['--import', 'tsx', CLI, ...args], {
        env: { ...process.env, DATABASE_URL: engine.ctx.config.DATABASE_URL, QUEUE_PREFIX: engine.ctx.config.QUEUE_PREFIX },
      });
      return { code: 0, out: stdout };
    } catch (error) {
      const failed = error as { code: number; stdout: string; stderr: string };
      return { code: failed.code, out: failed.stdout + failed.stderr };
    }
  };

  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('plans night 15 as a dry run', async () => {
    const { code, out } = await cli('plan', 'orders', '2026-11-15', 'currency parsed as text', '--as', 'U07ONCALL');
    expect(code).toBe(0);
    expect(out).toContain('Watermark: 2026-11-30 23:00 → 2026-11-15 04:00');
    expect(out).toContain('settlement_report 2026-11-15: 1,284,310.55 signed by <@U07SETTLE>');
    expect(await countRows(engine.ctx, 'SELECT 1 FROM backfill.backfills')).toBe(0);
  });

  it('exits 1 with the reason on bad input', async () => {
    const { code, out } = await cli('start', 'orders', '2026-11-04', 'late', '--as', 'U07ONCALL');
    expect(code).toBe(1);
    expect(out).toMatch(/No backfill needed for the night of 2026-11-04/);
  });

  it('starts, is acknowledged by the owners and runs to the diff with --wait', async () => {
    const started = await cli('start', 'orders', '2026-11-15', 'currency', 'parsed', 'as', 'text', '--as', 'U07ONCALL');
    expect(started.out).toContain('Backfill #1 created (announced).');
    expect((await cli('ack', '1', '--as', 'U07SETTLE')).out).toContain('Still waiting for: payout_export <@U07PAYOUTS>');
    const finished = await cli('ack', '1', '--as', 'U07PAYOUTS', '--wait');
    expect(finished.code).toBe(0);
    expect(finished.out).toContain('difference −12,408.45');
    const log = await cli('log', '1');
    // jsonb orders keys by length, so "to" comes before "from".
    expect(log.out).toMatch(/watermark_moved\s+\{"to":"2026-11-15 04:00","from":"2026-11-30 23:00"\}/);
  });
});
