import type { types } from '@slack/bolt';
import { bounded } from '../redaction.js';
import { terminalText } from '../markup.js';

// Block Kit within Slack's limits, without ever cutting unseen. Slack refuses a section over 3,000 characters, a
// header over 150 and a message over 50 blocks (a modal or the Home tab: 100); text cut to fit used to end a
// message mid-row, drop the ask after a long reason and leave a code fence open. Here long text is laid out in
// as many blocks as it needs, and when even that cannot hold it, what is left out is said.

export type Block = types.KnownBlock;

export const LIMITS = {
  sectionText: 3000,
  contextText: 3000,
  headerText: 150,
  messageBlocks: 50,
  viewBlocks: 100,
  /**
   * A message's top-level text: Slack advises at most 4,000 characters, and chat.update refuses longer text
   * (`msg_too_long`); it is what notifications, screen readers and a client that cannot render a block show.
   */
  messageText: 4000,
} as const;

/** Room kept for bounded()'s "… (N more characters not shown)". */
const NOTE_ROOM = 48;

/** `text` within `max` characters; longer text bounded, saying how much was left out, never split inside a character. */
export function fit(text: string, max: number): string {
  if (text.length <= max) return text;
  let keep = max - NOTE_ROOM;
  // Never half of a UTF-16 pair: Slack refuses text that is not Unicode.
  const last = text.charCodeAt(keep - 1);
  if (last >= 0xd800 && last <= 0xdbff) keep -= 1;
  return bounded(text, keep);
}

export const mrkdwn = (text: string): types.MrkdwnElement => ({ type: 'mrkdwn', text });

/** A section; text over Slack's limit is bounded with a note rather than cut unseen (callers that can be long use sections()). */
export const section = (text: string): Block => ({ type: 'section', text: mrkdwn(fit(text, LIMITS.sectionText)) });
export const context = (text: string): Block => ({ type: 'context', elements: [mrkdwn(fit(text, LIMITS.contextText))] });
/**
 * A header is plain text, where Slack's entities would show as typed: the angle brackets a name could bring become
 * look-alikes (‹ ›), backticks too (ˋ), so nothing in a header can read as markup, and control characters go.
 */
export const header = (text: string): Block => ({
  type: 'header',
  text: { type: 'plain_text', text: fit(terminalText(text).replaceAll('<', '\u2039').replaceAll('>', '\u203a').replaceAll('`', '\u02cb'), LIMITS.headerText) },
});

/**
 * Lines in as many sections as they need, `title` leading the first: no line is ever split between two blocks,
 * and a single line longer than a section is bounded with a note.
 */
export function sections(title: string, lines: readonly string[]): Block[] {
  const texts: string[] = [];
  let current = title;
  for (const raw of lines) {
    const line = fit(raw, LIMITS.sectionText);
    const joined = current === '' ? line : `${current}\n${line}`;
    if (joined.length <= LIMITS.sectionText) {
      current = joined;
    } else {
      texts.push(current);
      current = line;
    }
  }
  if (current !== '') texts.push(current);
  return texts.map(section);
}

/** What codeSections laid out: the blocks, and how many rows are in them (the rest did not fit). */
export interface CodeTable {
  blocks: Block[];
  shown: number;
}

const FENCE = '```';

/**
 * A fixed-width table in code blocks, split across sections so that every block closes its own fence and
 * repeats the column heads, at most `maxBlocks` blocks and `maxChars` characters in all. Rows are the bot's own
 * figures and hours; anything from outside in them must come through slackText (src/markup.ts).
 */
export function codeSections(title: string, head: string, rows: readonly string[], maxBlocks: number, maxChars: number = Number.POSITIVE_INFINITY): CodeTable {
  const blocks: Block[] = [];
  let shown = 0;
  let chars = 0;
  while (shown < rows.length && blocks.length < maxBlocks) {
    const lead = blocks.length === 0 ? `${title}\n` : '';
    let text = `${lead}${FENCE}${head}`;
    let taken = 0;
    for (const row of rows.slice(shown)) {
      const line = fit(row, LIMITS.sectionText - lead.length - head.length - 2 * FENCE.length - 2);
      if (text.length + 1 + line.length + FENCE.length > LIMITS.sectionText || chars + text.length + 1 + line.length > maxChars) break;
      text += `\n${line}`;
      taken += 1;
    }
    if (taken === 0) break;
    chars += text.length;
    blocks.push(section(`${text}${FENCE}`));
    shown += taken;
  }
  return { blocks, shown };
}

/**
 * Blocks within a message's (or a view's) limit: when there are more, the last that fits is a note saying how
 * many were left out and where the whole is.
 */
export function limitBlocks<T extends types.AnyBlock>(blocks: readonly T[], max: number, whereTheRestIs: string): (T | Block)[] {
  if (blocks.length <= max) return [...blocks];
  const kept = blocks.slice(0, max - 1);
  return [...kept, context(`:page_facing_up: ${blocks.length - kept.length} more block(s) not shown here: ${whereTheRestIs}`)];
}

/**
 * A message's top-level text: `lead`, then as many whole `lines` as fit within LIMITS.messageText (in one code
 * fence under `fence.head` when given, the fence always closed); when some do not fit, a last line `rest(left)`
 * says how many were left out and where they are.
 */
export function messageText(lead: string, lines: readonly string[], rest: (left: number) => string, fence?: { title: string; head: string }): string {
  const open = fence ? [fence.title, `${FENCE}${fence.head}`] : [];
  const close = fence ? FENCE : '';
  const compose = (shown: number): string => {
    const body = [...open, ...lines.slice(0, shown)].join('\n');
    const fenced = fence ? `${body}${close}` : body;
    const note = shown < lines.length ? `\n${rest(lines.length - shown)}` : '';
    return `${lead}${lines.length ? `\n${fenced}` : ''}${note}`;
  };
  // The most lines that fit: the note's room is taken only while some are left out.
  let shown = lines.length;
  while (shown > 0 && compose(shown).length > LIMITS.messageText) shown -= 1;
  // No line fits: the lead and where they all are (and were even that too long, bounded, saying so).
  return fit(shown === 0 && lines.length > 0 ? `${lead}\n${rest(lines.length)}` : compose(shown), LIMITS.messageText);
}
