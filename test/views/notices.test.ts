// What the core tells people is facts (src/core/notices.ts); each view words them on its own terms. The same
// facts read the same way in Slack and on a terminal except for how people and commands are shown, and a
// stored record reads back into the facts it was written from.

import { describe, expect, it } from 'vitest';
import { storedAnnouncement, type AnnouncementFacts, type Notice } from '../../src/core/notices.js';
import { noticeText, slackNoticeText } from '../../src/views/notices.js';
import { terminalNoticeText, type TextStyle } from '../../src/views/text.js';

const terminal: TextStyle = { people: new Map([['U07SETTLE', 'Settlement lead'], ['U07ONCALL', 'On-call']]), colour: false };

const facts: AnnouncementFacts = {
  backfillId: 12, pipeline: 'orders', reason: 'currency parsed as text', requestedBy: 'U07ONCALL',
  firstHour: new Date('2026-11-15T05:00:00Z'), lastHour: new Date('2026-11-15T10:00:00Z'), partitionCount: 6,
  direction: 'down', totalBefore: '1284310.55', expectedTotalAfter: '1271902.10', previewedBy: 'step', days: ['2026-11-15'],
  reader: { consumer: 'settlement_report', kind: 'report', readDirectly: true, partitionsRead: 6, dependsOn: [], notifyRule: 'before' },
  signed: [{ report: 'settlement_report', period: '2026-11-15', total: '1284310.55', signedBy: 'U07SETTLE', signedAt: new Date('2026-11-16T07:00:00Z') }],
  gateOwners: ['U07SETTLE'],
};

const notices: Notice[] = [
  { kind: 'announcement', facts },
  { kind: 'after_run', backfillId: 12, pipeline: 'orders', reason: 'currency parsed as text', consumer: 'payout_export', totalBefore: '1284310.55', totalAfter: '1271902.10', diff: '-12408.45' },
  { kind: 'rolled_back', backfillId: 12, pipeline: 'orders', consumer: 'settlement_report', rolledBackBy: 'U07ONCALL', totalBefore: '1284310.55' },
  { kind: 'undeliverable', backfillId: 12, step: 'announce', owner: 'U07SETTLE', consumer: 'settlement_report', slackError: 'user_not_found' },
  {
    kind: 'stale_reader', notice: {
      catchUpId: 3, pipeline: 'orders', consumer: 'settlement_report', owner: 'U07SETTLE', period: '2026-11-09', hoursRead: 4,
      firstReadAt: new Date('2026-11-09T06:10:00Z'), reportBefore: '1000.00', totalAfter: '1250.00',
      firstHour: new Date('2026-11-09T02:00:00Z'), lastHour: new Date('2026-11-09T05:00:00Z'),
    },
  },
];

describe('what the core tells people, worded by the views', () => {
  it('words the announcement from its facts: Slack mentions people, a terminal names them', () => {
    const slack = slackNoticeText({ kind: 'announcement', facts });
    expect(slack).toContain('Backfill #12 of orders: 6 partitions, 05:00–10:00 on 2026-11-15, will be replaced.');
    expect(slack).toContain('Signed figure: settlement_report for 2026-11-15 = 1,284,310.55, signed by <@U07SETTLE> at 2026-11-16 07:00 UTC.');
    expect(slack).toContain('Expected new total for 2026-11-15: 1,271,902.10 (−12,408.45 from 1,284,310.55 now)');
    expect(slack).toContain('When: it runs once <@U07SETTLE> acknowledges; nothing is deleted before.');
    const text = terminalNoticeText({ kind: 'announcement', facts }, terminal);
    expect(text).toContain('signed by Settlement lead at 2026-11-16 07:00 UTC.');
    expect(text).toContain('Asked by On-call.');
    // The same sentences otherwise: only the people differ.
    expect(text.replace(/Settlement lead/g, '<@U07SETTLE>').replace(/On-call/g, '<@U07ONCALL>')).toBe(slack);
  });

  it('words every kind of notice with no Slack markup on a terminal, and code in backticks only in Slack', () => {
    for (const notice of notices) {
      const text = terminalNoticeText(notice, terminal);
      expect(text, notice.kind).not.toMatch(/<@|<#|`|:warning:/);
      expect(text.length, notice.kind).toBeGreaterThan(40);
    }
    const undeliverable = notices[3]!;
    // Inside the code span too, < and > are Slack's entities, which Slack shows as the characters.
    expect(slackNoticeText(undeliverable)).toBe(':warning: Backfill #12: the announcement to <@U07SETTLE> (settlement_report) cannot be delivered ' +
      '(Slack answered `user_not_found`). It still needs their acknowledgement: ask a delegate they named to acknowledge, or an operator can `/backfill override 12 &lt;reason&gt;`.');
    expect(terminalNoticeText(notices[1]!, terminal)).toContain('Total over the affected days 1,284,310.55 → 1,271,902.10 (difference −12,408.45).');
    expect(terminalNoticeText(notices[2]!, terminal)).toContain('was rolled back by On-call');
    expect(terminalNoticeText(notices[4]!, terminal)).toContain('For 2026-11-09: 1,000.00 when you read it; 1,250.00 now (+250.00).');
  });

  it('reads stored facts back with their dates, shows text stored before facts as it was, and refuses a damaged record', () => {
    const stored = JSON.parse(JSON.stringify(facts)) as unknown;
    const back = storedAnnouncement({ announcement: null, announcementFacts: stored });
    expect(back).toEqual({ kind: 'announcement', facts });
    const legacy = storedAnnouncement({ announcement: 'Backfill #3: signed by <@U07SETTLE>.', announcementFacts: null });
    expect(legacy).toEqual({ kind: 'recorded', text: 'Backfill #3: signed by <@U07SETTLE>.' });
    expect(slackNoticeText(legacy)).toBe('Backfill #3: signed by <@U07SETTLE>.');
    expect(terminalNoticeText(legacy, terminal)).toBe('Backfill #3: signed by Settlement lead.');
    expect(() => storedAnnouncement({ announcement: null, announcementFacts: { ...facts, totalBefore: 'lots' } })).toThrow(/totalBefore/);
  });

  it('names people however the view asks', () => {
    expect(noticeText(notices[2]!, (id) => `[${id}]`)).toContain('rolled back by [U07ONCALL]');
  });
});
