// The documentation, checked on its own text: docs/commands.md's tables are the ones the command table makes, every
// relative link and #anchor lands on something that exists, and the README stays a short front page (the rest of
// it lives in docs/). A renamed heading, a moved file or a command changed without its page fails here, not in a
// reader's browser.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BEGIN, END, withCommandTables } from '../scripts/commandsDoc.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const README_MAX_LINES = 150;

/** The pages whose links are checked, repository-relative. */
const PAGES = ['README.md', 'ARCHITECTURE.md', 'SECURITY.md', ...readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];

const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');

/** Code blanked out, its line breaks kept (so line numbers still hold): a `[x](y)` or `# …` there is not a link or a heading. */
const blank = (code: string) => code.replace(/[^\n]/g, '');
const withoutCodeBlocks = (page: string) => page.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, blank);
const prose = (page: string) => withoutCodeBlocks(page).replace(/(`+)(?:[^\n]|\n(?![ \t]*\n))*?\1/g, blank);

/** GitHub's anchor for a heading: lower-cased, punctuation but `-` and `_` dropped, spaces made `-`. */
function slugOf(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link shows its text
    .replace(/<[^>]+>/g, '');
  return text.trim().toLowerCase().replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '').replace(/\s/g, '-');
}

/** Every anchor a page's headings make; a repeated heading gets -1, -2, … as on GitHub. */
function anchorsOf(file: string): Set<string> {
  const page = withoutCodeBlocks(read(file));
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const match of page.matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const slug = slugOf(match[1] ?? '');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return anchors;
}

interface Link {
  page: string;
  line: number;
  target: string;
}

function linksOf(page: string): Link[] {
  const text = prose(read(page));
  const links: Link[] = [];
  for (const match of text.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const line = text.slice(0, match.index).split('\n').length;
    links.push({ page, line, target: match[1] ?? '' });
  }
  return links;
}

/** What is wrong with one link, or undefined: a file that does not exist, or an anchor no heading of it makes. */
function brokenBecause(link: Link): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(link.target)) return undefined; // https:, mailto:: not a file of this repository
  const [pathPart = '', anchor] = link.target.split('#', 2);
  const file = pathPart === '' ? link.page : path.posix.normalize(path.posix.join(path.posix.dirname(link.page), decodeURIComponent(pathPart)));
  if (file.startsWith('..')) return `${file} is outside the repository`;
  if (!existsSync(path.join(ROOT, file))) return `${file} does not exist`;
  if (anchor === undefined || anchor === '') return undefined;
  if (!file.endsWith('.md')) return `#${anchor} points into ${file}, which has no headings`;
  return anchorsOf(file).has(decodeURIComponent(anchor)) ? undefined : `no heading of ${file} makes #${anchor}`;
}

describe('docs/commands.md', () => {
  it('holds the tables of commands that scripts/commandsDoc.ts makes from the command table', () => {
    const page = read('docs/commands.md');
    const tables = (text: string) => text.slice(text.indexOf(BEGIN), text.indexOf(END) + END.length);
    // Compared as the tables alone, so a failure shows the rows that differ; `npm run docs:commands` makes them again.
    expect(tables(page), 'docs/commands.md differs from src/commands/table.ts: run `npm run docs:commands`').toBe(tables(withCommandTables(page)));
  });
});

describe('links between the pages', () => {
  it('makes GitHub\'s anchors of headings', () => {
    expect(slugOf('Bounds, size and retention')).toBe('bounds-size-and-retention');
    expect(slugOf('`/backfill`, in Slack')).toBe('backfill-in-slack');
    expect(slugOf('Several workers, several hosts')).toBe('several-workers-several-hosts');
    expect(slugOf('What the engine guarantees')).toBe('what-the-engine-guarantees');
    expect(slugOf('step_sql and re-triggers')).toBe('step_sql-and-re-triggers');
  });

  it.each(PAGES)('%s: every relative link points at a file that exists, and every #anchor at a heading there', (page) => {
    const broken = linksOf(page).map((link) => ({ link, why: brokenBecause(link) })).filter(({ why }) => why !== undefined)
      .map(({ link, why }) => `${link.page}:${link.line}: (${link.target}): ${why}`);
    expect(broken).toEqual([]);
  });
});

describe('README.md', () => {
  it(`is a front page of at most ${README_MAX_LINES} lines (the rest is in docs/)`, () => {
    const lines = read('README.md').split('\n').length - (read('README.md').endsWith('\n') ? 1 : 0);
    expect(lines).toBeLessThanOrEqual(README_MAX_LINES);
  });
});
