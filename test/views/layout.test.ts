// Block Kit within Slack's limits without cutting unseen (src/views/layout.ts): lines are laid out in as many
// sections as they need and never split, code tables close every fence, and what cannot fit says so.

import { describe, expect, it } from 'vitest';
import { codeSections, fit, header, LIMITS, limitBlocks, messageText, section, sections, type Block } from '../../src/views/layout.js';

/** A section's or header's text. */
function textOf(block: Block | undefined): string {
  if (block?.type !== 'section' && block?.type !== 'header') return '';
  return block.text?.text ?? '';
}

describe('layout within Slack\'s limits', () => {
  it('lays lines out in as many sections as they need, each within the limit, no line split', () => {
    const lines = Array.from({ length: 100 }, (_, i) => `line ${String(i).padStart(3, '0')} ${'x'.repeat(90)}`);
    const blocks = sections('*Title*', lines);
    expect(blocks.length).toBeGreaterThan(3);
    const texts = blocks.map(textOf);
    for (const text of texts) expect(text.length).toBeLessThanOrEqual(LIMITS.sectionText);
    expect(texts.join('\n').split('\n')).toEqual(['*Title*', ...lines]);
  });

  it('bounds a single text longer than a section, saying how much was left out, never inside a character', () => {
    expect(textOf(section('a'.repeat(5000)))).toMatch(/… \(\d+ more characters not shown\)$/);
    expect(textOf(section('a'.repeat(5000))).length).toBeLessThanOrEqual(LIMITS.sectionText);
    const emoji = '😀'.repeat(2000);
    const cut = fit(emoji, 3000);
    expect(cut.length).toBeLessThanOrEqual(3000);
    expect(cut).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])/);
    const long = header(`Backfill of ${'p'.repeat(400)} <!channel>`);
    expect(textOf(long).length).toBeLessThanOrEqual(LIMITS.headerText);
    expect(textOf(header('a <!here> `x`'))).toBe('a ‹!here› ˋxˋ');
  });

  it('splits a table over code blocks that each close their fence and repeat the heads; the rest is counted', () => {
    const rows = Array.from({ length: 300 }, (_, i) => `row ${i} ${'9'.repeat(60)}`);
    const table = codeSections('*Per partition*', 'head', rows, 5);
    expect(table.blocks).toHaveLength(5);
    for (const text of table.blocks.map(textOf)) {
      expect(text.length).toBeLessThanOrEqual(LIMITS.sectionText);
      expect(text.endsWith('```')).toBe(true);
      expect(text).toContain('```head\n');
    }
    const shown = table.blocks.map(textOf).join('\n').split('\n').filter((line) => line.startsWith('row ')).length;
    expect(shown).toBe(table.shown);
    expect(table.shown).toBeLessThan(300);
  });

  it('keeps a message\'s top-level text within 4,000 characters, whole rows in a closed fence, saying what it left out', () => {
    const rows = Array.from({ length: 300 }, (_, i) => `row ${i} ${'9'.repeat(60)}`);
    const text = messageText('Lead', rows, (left) => `${left} more row(s) are not listed here: the CLI has them.`, { title: '*Rows*', head: 'head' });
    expect(text.length).toBeLessThanOrEqual(LIMITS.messageText);
    const listed = text.split('\n').filter((line) => line.startsWith('row ')).map((line) => line.replace(/```$/, ''));
    expect(listed).toEqual(rows.slice(0, listed.length));
    expect(text).toMatch(new RegExp(`^Lead\\n\\*Rows\\*\\n\`\`\`head\\n[^]*\`\`\`\\n${300 - listed.length} more row\\(s\\) are not listed here: the CLI has them\\.$`));
    // All of them when they fit; nothing but the lead when there are none.
    expect(messageText('Lead', rows.slice(0, 3), () => 'never', { title: '*Rows*', head: 'head' })).toBe(`Lead\n*Rows*\n\`\`\`head\n${rows.slice(0, 3).join('\n')}\`\`\``);
    expect(messageText('Lead', [], () => 'never')).toBe('Lead');
  });

  it('keeps a message within its blocks, the last saying how many were left out and where they are', () => {
    const blocks = Array.from({ length: 60 }, (_, i) => section(`block ${i}`));
    const limited = limitBlocks(blocks, LIMITS.messageBlocks, 'the CLI shows all.');
    expect(limited).toHaveLength(LIMITS.messageBlocks);
    expect(JSON.stringify(limited.at(-1))).toContain('11 more block(s) not shown here: the CLI shows all.');
    expect(limitBlocks(blocks.slice(0, 3), LIMITS.messageBlocks, 'x')).toHaveLength(3);
  });
});
