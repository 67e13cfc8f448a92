// prepared() names only texts fixed in code: each name stays prepared on its connection for the connection's life,
// so a text that varies would grow every connection without bound. Its bound stops that in one process.

import { describe, expect, it } from 'vitest';
import { MAX_PREPARED, prepared, preparedTexts } from '../../src/db/prepared.js';

describe('prepared statements of fixed text', () => {
  it('names a text after itself: the same text is the same statement, another text another name', () => {
    const first = prepared('SELECT 1::int AS one');
    expect(prepared('SELECT 1::int AS one')).toBe(first);
    expect(first.name).toMatch(/^backfill_s_[0-9a-f]{24}$/);
    expect(prepared('SELECT 2::int AS two').name).not.toBe(first.name);
  });

  it('refuses to name one text more past its bound, which only a text that varies reaches, and keeps serving the texts it named', () => {
    for (let n = preparedTexts().length; n < MAX_PREPARED; n += 1) prepared(`SELECT ${n}::int AS n`);
    expect(preparedTexts()).toHaveLength(MAX_PREPARED);
    expect(() => prepared('SELECT 1000000::int AS n')).toThrow(/more than 256 statement texts named in one process; one of them varies and must be sent unnamed/);
    expect(prepared('SELECT 1::int AS one').text).toBe('SELECT 1::int AS one');
    expect(preparedTexts()).toHaveLength(MAX_PREPARED);
  });
});
