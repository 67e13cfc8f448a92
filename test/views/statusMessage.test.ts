// The status message, rendered from a report alone (no database, no Slack): a backfill over the capacity limits
// offers Approve only while nobody has given the second operator's approval; once someone has, the message names
// who and when where the button stood, escaped like every other person it shows.

import type { types } from '@slack/bolt';
import { describe, expect, it } from 'vitest';
import type { BackfillReport } from '../../src/core/file/status.js';
import type { BackfillConsumerRow, BackfillRow } from '../../src/db/backfills.js';
import { statusMessage } from '../../src/views/blocks.js';
import { possibleActions } from '../../src/views/statusActions.js';
import { renderStatus } from '../../src/views/text.js';

const NOW = new Date('2026-11-16T09:30:00Z');
const APPROVED_AT = new Date('2026-11-16T09:05:00Z');

const backfill: BackfillRow = {
  id: 7, pipeline: 'orders', reason: 'currency parsed as text', requestedBy: 'U07ONCALL',
  firstHour: new Date('2026-11-15T05:00:00Z'), lastHour: new Date('2026-11-15T10:00:00Z'), partitionCount: 6,
  watermarkBefore: new Date('2026-11-15T23:00:00Z'), watermarkResetTo: new Date('2026-11-15T04:00:00Z'),
  totalBefore: '1284310.55', totalAfter: null, diff: null, announcedAt: new Date('2026-11-16T09:00:00Z'),
  ranAt: null, ranBy: null, finishedAt: null, state: 'announced', failure: null, limitOverride: null,
  incidentChannel: 'C0INCIDENT', statusTs: '1.2', stoppedBy: null, stopReason: null, pausedReason: null, pausedFor: null,
  rolledBackBy: null, rolledBackAt: null, needsSecondApproval: true, publishedAny: false, previewedBy: 'step', catalogHash: null, catalogFieldHashes: null,
};

const settlement: BackfillConsumerRow = {
  consumer: 'settlement_report', kind: 'report', owner: 'U07SETTLE', notifyRule: 'before', dependencyRank: 1, dependsOn: [],
  readDirectly: true, partitionsRead: 6, announcement: null, announcementFacts: null, messageChannel: 'D0SETTLE', messageTs: '3.4',
  ackedAt: null, overriddenBy: null, overrideReason: null, undeliverable: null, announceRetryAt: null,
};

function reportOf(change: { backfill?: Partial<BackfillRow>; secondApproval?: BackfillReport['secondApproval'] } = {}): BackfillReport {
  return {
    backfill: { ...backfill, ...change.backfill }, consumers: [settlement], targets: [], signed: [], steps: [], escalations: [],
    secondApproval: change.secondApproval ?? null,
  };
}

const buttonLabels = (blocks: types.KnownBlock[]): string[] =>
  blocks.flatMap((b) => (b.type === 'actions' ? b.elements.flatMap((e) => (e.type === 'button' ? [e.text.text] : [])) : []));
const allText = (blocks: types.KnownBlock[]): string => JSON.stringify(blocks);

describe('the status message and a second operator\'s approval', () => {
  it('offers Approve while the approval is still needed and not given, and says it is waited on', () => {
    const message = statusMessage(reportOf(), NOW);
    expect(buttonLabels(message.blocks)).toEqual(['Approve size…', 'Override…', 'Stop…']);
    expect(allText(message.blocks)).toContain(':hourglass: second operator\'s approval (size over the capacity limits): waiting');
    expect(allText(message.blocks)).toContain('a second operator\'s approval of its size');
    expect(allText(message.blocks)).not.toContain('approved by');
  });

  it('once given, shows who approved and when instead of Approve, and no longer waits on it', () => {
    const report = reportOf({ secondApproval: { operator: 'U07LEAD', at: APPROVED_AT } });
    const message = statusMessage(report, NOW);
    expect(possibleActions(report)).toEqual(['override', 'stop']);
    expect(buttonLabels(message.blocks)).toEqual(['Override…', 'Stop…']);
    expect(allText(message.blocks)).toContain(':white_check_mark: second operator\'s approval (size over the capacity limits): approved by <@U07LEAD> at 2026-11-16 09:05 UTC');
    expect(allText(message.blocks)).not.toContain('approval of its size');
    // Held by an owner, approved: only Stop is left to press.
    expect(buttonLabels(statusMessage(reportOf({ backfill: { state: 'held' }, secondApproval: { operator: 'U07LEAD', at: APPROVED_AT } }), NOW).blocks)).toEqual(['Stop…']);
    // The terminal says the same.
    expect(renderStatus(report)).toContain('second operator\'s approval (size): approved by @U07LEAD at 2026-11-16 09:05 UTC');
  });

  it('escapes an approver who is not a Slack user, as every person shown', () => {
    const message = statusMessage(reportOf({ secondApproval: { operator: 'cli:<!channel>@ops-host', at: APPROVED_AT } }), NOW);
    expect(allText(message.blocks)).toContain('approved by cli:&lt;!channel&gt;@ops-host at');
    expect(allText(message.blocks)).not.toContain('<!channel>');
  });

  it('shows no approval and no Approve for a backfill within the capacity limits', () => {
    const message = statusMessage(reportOf({ backfill: { needsSecondApproval: false } }), NOW);
    expect(buttonLabels(message.blocks)).toEqual(['Override…', 'Stop…']);
    expect(allText(message.blocks)).not.toContain('second operator');
  });
});
