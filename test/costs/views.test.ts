import { describe, expect, it } from 'vitest';
import { parseCommand } from '../../src/commands/arguments.js';
import { cliUsage } from '../../src/commands/table.js';
import { quartersSince, type CostSum, type CostSummary } from '../../src/core/file/costs.js';
import { costsBlocks, formatDuration, renderCosts } from '../../src/views/costs.js';

const ROW: CostSum = {
  pipeline: 'orders', quarter: '2026-Q4', backfills: 3, done: 2, partitions: 16, rowsRewritten: 48_210, replays: 9, peopleTold: 7,
  ackWaitMs: 7_380_000, medianAckWaitMs: 1_500_000, computeMs: 65_400, signedFiguresMoved: 2,
};
const OTHER: CostSum = { ...ROW, pipeline: 'returns', backfills: 1, done: 1, partitions: 1, rowsRewritten: 12, replays: 1, peopleTold: 1, ackWaitMs: 900, medianAckWaitMs: 900, computeMs: 4200, signedFiguresMoved: 0 };

describe('what backfills cost, rendered', () => {
  it('says a duration the way a person reads it', () => {
    expect([0, 850, 4200, 65_400, 7_380_000, 2 * 86_400_000 + 3 * 3_600_000].map(formatDuration))
      .toEqual(['0 ms', '850 ms', '4.2 s', '1 min 05 s', '2 h 03 min', '2 d 03 h']);
  });

  it('prints one table for the terminal: a row per quarter and pipeline, names left and figures right', () => {
    const text = renderCosts({ since: '2026-10-01', rows: [ROW, OTHER] });
    const lines = text.split('\n');
    expect(lines[0]).toBe('What backfills cost since 2026-10-01');
    expect(lines[2]).toMatch(/^Quarter\s+Pipeline\s+Backfills\s+Partitions\s+Rows rewritten\s+Replays\s+People told\s+Ack wait\s+Median ack wait\s+Compute\s+Signed figures moved$/);
    expect(lines[3]).toMatch(/^2026-Q4\s+orders\s+3 \(2 done\)\s+16\s+48,210\s+9\s+7\s+2 h 03 min\s+25 min 00 s\s+1 min 05 s\s+2$/);
    expect(lines[4]).toMatch(/^2026-Q4\s+returns\s+1\s+1\s+12\s+1\s+1\s+900 ms\s+900 ms\s+4.2 s\s+0$/);
    // Right-aligned: every row ends where the header does.
    expect(new Set(lines.slice(2, 5).map((line) => line.length)).size).toBe(1);
    expect(text).toContain('cancelled, stopped, failed or rolled back');
  });

  it('says so when nothing finished since the date', () => {
    expect(renderCosts({ since: '2027-01-01', rows: [] })).toBe('What backfills cost since 2027-01-01: no backfill announced since then has finished.');
  });

  it('gives the Home tab a section with a sentence per quarter and pipeline', () => {
    const summary: CostSummary = { since: '2026-01-01', rows: [ROW, OTHER] };
    const blocks = costsBlocks(summary);
    expect(blocks[0]).toEqual({ type: 'header', text: { type: 'plain_text', text: 'What backfills cost' } });
    const text = JSON.stringify(blocks);
    expect(text).toContain('*2026-Q4 · orders*: 3 backfills (2 done) · 16 partitions, 48,210 rows rewritten · 9 replays · 7 people told, ' +
      '2 h 03 min waiting for acknowledgements (median 25 min 00 s) · compute 1 min 05 s · 2 signed figures moved');
    expect(text).toContain('*2026-Q4 · returns*: 1 backfill · 1 partition, 12 rows rewritten · 1 replay · 1 person told');
    expect(text).toContain('0 signed figures moved');
    expect(text).toContain('Since 2026-01-01.');
    expect(JSON.stringify(costsBlocks({ since: '2026-01-01', rows: [] }))).toContain('No backfill announced since 2026-01-01 has finished yet.');
  });

  it('sums on the Home tab from the first day of the quarter three quarters back', () => {
    expect(quartersSince(new Date('2026-12-01T18:00:00Z'))).toBe('2026-01-01');
    expect(quartersSince(new Date('2026-02-15T00:00:00Z'))).toBe('2025-04-01');
    expect(quartersSince(new Date('2026-07-01T00:00:00Z'), 1)).toBe('2026-07-01');
  });
});

describe('the costs command', () => {
  it('takes a day of the calendar as --since', () => {
    expect(parseCommand('cli', ['costs', '2026-10-01'])).toEqual({ kind: 'costs', since: '2026-10-01' });
    expect(cliUsage()).toContain('costs --since <YYYY-MM-DD>');
  });

  it('refuses a date with the right shape that is not a day, naming the shape that is right', () => {
    for (const bad of ['2026-13-01', '2026-02-30', '2026-00-10']) {
      expect(() => parseCommand('cli', ['costs', bad])).toThrow(new RegExp(`\`${bad}\` is not a day of the calendar; write it as YYYY-MM-DD.*Usage: backfill costs --since <YYYY-MM-DD>`));
    }
    expect(() => parseCommand('cli', ['costs', 'last-quarter'])).toThrow(/`last-quarter` is not a date; write it as YYYY-MM-DD/);
    expect(() => parseCommand('cli', ['costs'])).toThrow(/Usage: backfill costs --since <YYYY-MM-DD>/);
  });
});
