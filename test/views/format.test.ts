// The views' one set of formatters: a person reads the same way on each surface's terms, money and hours as
// the core formats them, and a missing value as a dash everywhere.

import { describe, expect, it } from 'vitest';
import { fromSlackMarkup } from '../../src/views/text.js';
import { moneyOrNone, NONE, recordPerson, signedMoneyOrNone, slackPerson, terminalPerson, timeOrNone } from '../../src/views/format.js';

const people = new Map([['U07SETTLE', 'Settlement lead']]);

describe('the views\' formatters', () => {
  it('shows a person as Slack, a terminal and a record each need', () => {
    expect(slackPerson('U07SETTLE')).toBe('<@U07SETTLE>');
    expect(terminalPerson('U07SETTLE', people)).toBe('Settlement lead');
    expect(terminalPerson('U07PAYOUTS', people)).toBe('@U07PAYOUTS');
    expect(recordPerson('U07SETTLE', people)).toBe('Settlement lead (U07SETTLE)');
    expect(recordPerson('U07PAYOUTS', people)).toBe('U07PAYOUTS');
    // The CLI's actor is no Slack user: no markup that Slack would render as a broken mention.
    for (const show of [slackPerson, (id: string) => terminalPerson(id, people), (id: string) => recordPerson(id, people)]) {
      expect(show('cli:dana@ops-1')).toBe('cli:dana@ops-1');
    }
  });

  it('formats money and time, and shows what is missing as a dash', () => {
    expect(moneyOrNone('1284310.55')).toBe('1,284,310.55');
    expect(signedMoneyOrNone('-12408.45')).toBe('−12,408.45');
    expect([moneyOrNone(null), signedMoneyOrNone(null), timeOrNone(null)]).toEqual([NONE, NONE, NONE]);
    expect(timeOrNone(new Date('2026-11-16T07:00:00Z'))).toBe('2026-11-16 07:00 UTC');
  });

  it('shows Slack markup written by the core as a terminal reads it', () => {
    const text = 'Signed by <@U07SETTLE>, asked by <@U07ONCALL|oncall> in <#C0INCIDENT|incident>; see <https://example.test/runbook|the runbook>. *Please acknowledge.*';
    expect(fromSlackMarkup(text, { people, colour: false }))
      .toBe('Signed by Settlement lead, asked by @U07ONCALL in #incident; see the runbook (https://example.test/runbook). Please acknowledge.');
    expect(fromSlackMarkup('*bold* and <#C0INCIDENT>', { people, colour: true })).toBe('\u001b[1mbold\u001b[22m and #C0INCIDENT');
  });
});
