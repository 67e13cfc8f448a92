// The per-partition diff and the paid-against answer in Slack's table block, their figures said once in the blocks
// and in full in the message's text (what a client shows where it does not render the table), at the largest
// backfill the bot starts unasked (MAX_PARTITIONS) and beyond a table's 100 rows: no partition and no correction is
// ever left out without the message saying so.

import type { types } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { overrideGate } from '../../src/core/announce/gate.js';
import { startBackfill } from '../../src/core/announce/start.js';
import type { BackfillReport } from '../../src/core/file/status.js';
import { answerPaidAgainst, type PaidAgainstAnswer } from '../../src/core/finance/paidAgainst.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { diffMessage, paidAgainstMessage, type Message } from '../../src/views/blocks.js';
import { formatHour, formatHourRange, formatSignedMoney } from '../../src/views/format.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';

type Table = Extract<types.KnownBlock, { type: 'table' }>;

const tablesOf = (message: Message): Table[] => message.blocks.filter((b): b is Table => b.type === 'table');
const cellText = (cell: Table['rows'][number][number]): string => ('text' in cell ? cell.text : '');
/** The blocks but the table, as JSON: where a duplicate of the table's rows would show. */
const besideTheTable = (message: Message): string => JSON.stringify(message.blocks.filter((b) => b.type !== 'table'));
const allText = (message: Message): string => JSON.stringify(message.blocks);
/** A per-partition row as the fixed-width text has it: the hour, then the rows before → after. */
const PARTITION_ROW = /\d{4}-\d\d-\d\d \d\d:00 +\d+ → /;
/** The partitions the message's top-level text lists. */
const listedInText = (message: Message): string[] => message.text.split('\n').filter((line) => PARTITION_ROW.test(line)).map((line) => line.slice(0, 16));

describe('tables where Slack has them', () => {
  let engine: TestEngine;
  let report: BackfillReport;
  let answer: PaidAgainstAnswer;

  beforeAll(async () => {
    engine = await createTestEngine();
    const { ctx } = engine;
    const { backfill } = await startBackfill(ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: 'U07ONCALL' });
    await overrideGate(ctx, { backfillId: backfill.id, actor: 'U07ONCALL', reason: 'owners on leave' });
    report = await runUntilSettled(ctx, backfill.id, () => undefined);
    answer = await answerPaidAgainst(ctx.pool, { report: 'settlement_report', date: '2026-11-15' });
  }, 120_000);
  afterAll(async () => engine.close());

  /** The report with `count` partitions from 2026-11-14 00:00 on. */
  const withPartitions = (count: number): BackfillReport => {
    const first = report.targets[0]!;
    const targets = Array.from({ length: count }, (_, i) => ({ ...first, partitionHour: new Date(Date.UTC(2026, 10, 14) + i * 3_600_000), rowsAfter: 1234, totalAfter: '123456.78', totalBefore: '123450.00' }));
    return { ...report, targets, backfill: { ...report.backfill, partitionCount: count } };
  };

  it('a diff of MAX_PARTITIONS partitions has every one in one table, after the rest, and every one in the message\'s text', () => {
    const max = engine.ctx.config.MAX_PARTITIONS;
    const diff = diffMessage(withPartitions(max));
    const [table, ...others] = tablesOf(diff);
    expect(others).toHaveLength(0);
    expect(diff.blocks.at(-1)).toBe(table);
    expect(diff.blocks.length).toBeLessThanOrEqual(50);
    const hours = withPartitions(max).targets.map((t) => formatHour(t.partitionHour));
    expect(table?.rows.map((row) => cellText(row[0]!))).toEqual(['Partition', ...hours]);
    for (const row of table?.rows ?? []) {
      expect(row).toHaveLength(6);
      for (const cell of row) expect(cellText(cell).length).toBeGreaterThan(0);
    }
    expect(table?.rows[1]?.map(cellText)).toEqual(['2026-11-14 00:00', String(report.targets[0]?.rowsBefore), '1234', '123,450.00', '123,456.78', formatSignedMoney('6.78')]);
    // The text is the fallback where the table is not rendered: every partition, within Slack's 4,000 characters.
    expect(diff.text).toMatch(/^Backfill #1 diff: total /);
    expect(listedInText(diff)).toEqual(hours);
    expect(diff.text.length).toBeLessThanOrEqual(4000);
    expect(diff.text).not.toContain('not listed here');
    expect(allText(diff)).not.toContain('not shown here');
  });

  it('the blocks show the table and never the same rows again as code-fenced text beside it', () => {
    for (const count of [1, 6, engine.ctx.config.MAX_PARTITIONS, 150]) {
      const diff = diffMessage(withPartitions(count));
      expect(tablesOf(diff), `${count} partitions`).toHaveLength(1);
      expect(besideTheTable(diff), `${count} partitions`).not.toContain('```');
      expect(besideTheTable(diff), `${count} partitions`).not.toMatch(PARTITION_ROW);
    }
    // The night-15 diff as it was filed.
    expect(besideTheTable(diffMessage(report))).not.toMatch(PARTITION_ROW);
    expect(listedInText(diffMessage(report))).toHaveLength(report.targets.length);
  });

  it('beyond a table\'s room, the table says how many it holds and where the rest is, and the text says what it left out', () => {
    const diff = diffMessage(withPartitions(150));
    const [table] = tablesOf(diff);
    expect(table?.rows).toHaveLength(100);
    const all = withPartitions(150).targets;
    const held = all.slice(0, 99);
    expect(allText(diff)).toContain(`The table holds the first 99 of the 150 partitions (${formatHourRange(held[0]!.partitionHour, held[98]!.partitionHour)})`);
    expect(allText(diff)).toContain('a Slack table has room for 99; the incident package has every one (`/backfill log 1`');
    const listed = listedInText(diff);
    expect(listed).toEqual(all.slice(0, listed.length).map((t) => formatHour(t.partitionHour)));
    const left = all.slice(listed.length);
    expect(diff.text).toContain(`${left.length} more partition(s), ${formatHourRange(left[0]!.partitionHour, left.at(-1)!.partitionHour)}, are not listed here: the incident package has every one`);
    expect(diff.text.length).toBeLessThanOrEqual(4000);
    expect(diff.blocks.length).toBeLessThanOrEqual(50);
  });

  it('the paid-against answer has each correction\'s figures in a table, the people and reasons in words, and the whole in its text', () => {
    const message = paidAgainstMessage(answer);
    const [table] = tablesOf(message);
    expect(table?.rows.map((row) => row.map(cellText).slice(0, 3))).toEqual([['Backfill', 'Corrected to', 'Against signed'], ['#1', '1,271,902.10', '−12,408.45']]);
    expect(besideTheTable(message)).toContain('*Backfill #1* (currency parsed as text): against the signed 1,284,310.55, ran by <@U07ONCALL>');
    expect(besideTheTable(message)).toContain('overridden by <@U07ONCALL>');
    // The figures the table holds are not said again beside it; the message's text says the whole correction.
    expect(besideTheTable(message)).not.toContain('corrected to');
    expect(message.text).toContain('*Backfill #1* (currency parsed as text): corrected to *1,271,902.10*, −12,408.45 against the signed 1,284,310.55');
    // More corrections than a table holds: the first 99 in it, said so, the rest in words with their figures and on the CLI.
    const many = { ...answer, corrections: Array.from({ length: 120 }, (_, i) => ({ ...answer.corrections[0]!, backfillId: i + 1 })) };
    const crowded = paidAgainstMessage(many);
    expect(tablesOf(crowded)[0]?.rows).toHaveLength(100);
    expect(allText(crowded)).toContain('The table holds the first 99 of the 120 corrections');
    expect(allText(crowded)).toContain('`backfill paid-against settlement_report 2026-11-15` on the CLI lists every correction.');
    expect(allText(crowded)).not.toContain('*Backfill #99* (currency parsed as text): corrected to');
    expect(allText(crowded)).toContain('*Backfill #100* (currency parsed as text): corrected to *1,271,902.10*');
    expect(crowded.blocks.length).toBeLessThanOrEqual(50);
    expect(crowded.text.length).toBeLessThanOrEqual(4000);
    expect(crowded.text).toMatch(/\n\d+ more correction\(s\) are not listed here: `backfill paid-against settlement_report 2026-11-15` on the CLI lists every correction\.$/);
  });
});
