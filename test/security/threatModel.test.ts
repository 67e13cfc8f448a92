import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// SECURITY.md names, for every line of its threat model, the tests that hold it. A renamed or deleted test would
// leave a line standing on nothing: this keeps every name it cites the name of a test that exists.

const root = fileURLToPath(new URL('../../', import.meta.url));
const securityPage = readFileSync(`${root}SECURITY.md`, 'utf8');

/** Every (file, test name) SECURITY.md cites: `test/x.test.ts` "name…", "other name…". */
function citedTests(page: string): { file: string; name: string }[] {
  const cited: { file: string; name: string }[] = [];
  for (const match of page.matchAll(/`(test\/[\w/.-]+\.test\.ts)`((?:\s*"[^"]+",?)+)/g)) {
    const [, file = '', names = ''] = match;
    for (const quoted of names.matchAll(/"([^"]+)"/g)) cited.push({ file, name: (quoted[1] ?? '').replace(/…$/, '') });
  }
  return cited;
}

/**
 * The titles of a test file's tests and groups, with their escapes undone: every string that opens a call of
 * `it`, `describe` or their forms (`it.each([…])(…)`, `it.skipIf(…)(…)`), that is, a string a `(` opens and a
 * `,` closes.
 */
function testTitles(file: string): string[] {
  const source = readFileSync(`${root}${file}`, 'utf8');
  return [...source.matchAll(/\(\s*(['"`])((?:\\.|(?!\1).)*)\1\s*,/g)].map((match) => (match[2] ?? '').replace(/\\(.)/g, '$1'));
}

describe('SECURITY.md', () => {
  const cited = citedTests(securityPage);

  it('names a test for every line of its threat model', () => {
    const rows = securityPage.split('\n').filter((line) => line.startsWith('| **'));
    expect(rows.length).toBeGreaterThanOrEqual(8);
    for (const row of rows) expect(row, row.slice(0, 60)).toMatch(/`test\/[\w/.-]+\.test\.ts` "/);
  });

  it('cites only tests and groups of tests that exist, by the start of their title', () => {
    expect(cited.length).toBeGreaterThan(20);
    const missing = cited.filter(({ file, name }) => !testTitles(file).some((title) => title.startsWith(name)));
    expect(missing).toEqual([]);
  });
});
