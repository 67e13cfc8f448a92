// Text is text, and nothing is cut silently. A reason, a name, a job's namespace: whatever someone typed or sent
// is shown as typed, never as Slack's markup (no broadcast, mention or link can come from it) and never as a
// terminal's control sequence; and a message never loses its signed figure, its expected total or its ask to a
// long reason, nor a partition of its diff to a long table.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBackfill } from '../../src/core/announce/start.js';
import { overrideGate } from '../../src/core/announce/gate.js';
import { planBackfill, type Plan } from '../../src/core/identify/plan.js';
import { loadBackfillReport, type BackfillReport } from '../../src/core/file/status.js';
import { answerPaidAgainst, type PaidAgainstAnswer } from '../../src/core/finance/paidAgainst.js';
import { storedAnnouncement, type Notice } from '../../src/core/notices.js';
import { runUntilSettled } from '../../src/cli/runner.js';
import { listBackfillConsumers } from '../../src/db/backfills.js';
import type { LineageProposal } from '../../src/db/lineageEvents.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { parseCommand } from '../../src/commands/arguments.js';
import { MAX_REASON_LENGTH } from '../../src/commands/schemas.js';
import { parseButtonValue } from '../../src/slack/buttons.js';
import { isBackfillError } from '../../src/errors.js';
import {
  ActionId, announcementMessage, diffMessage, encodeButtonValue, homeView, paidAgainstMessage, planMessage, reconciliationMessage, statusMessage,
  textMessage, type Message,
} from '../../src/views/blocks.js';
import { lineageProposalMessage, lineageProposalsReply } from '../../src/views/lineage.js';
import { cancelledNotice, continuedNotice, heldNotice, overriddenNotice, stoppedNotice } from '../../src/views/replies.js';
import { fromSlackMarkup, renderBackfillList, renderDiff, renderPaidAgainst, renderPlan, renderStatus, renderTimeline, terminalNoticeText, type TextStyle } from '../../src/views/text.js';
import { startedLines } from '../../src/views/cliReplies.js';
import { formatHour } from '../../src/views/format.js';
import { incidentPackageJson, incidentPackageMarkdown } from '../../src/views/incidentPackage.js';
import { buildIncidentPackage } from '../../src/core/file/incidentPackage.js';
import { listEvents } from '../../src/db/events.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';
import { parseHour, parseTargetSpec } from '../../src/core/time.js';
import { mention } from '../../src/core/messenger.js';
import { redact, registerSecrets } from '../../src/redaction.js';
import { slackText } from '../../src/markup.js';
import { createSlackHarness, INCIDENT_CHANNEL, OPERATOR, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

/** Every way outside text has tried to become something else: Slack's broadcasts, a mention, a link, a fence, a terminal's controls. */
const HOSTILE = '<!channel> <!here> <!subteam^S123> <@U0EVIL> <https://evil|Acknowledge here> ``` \u001b[2J\u001b[31m \u0007 \u009b \u202e';
const REASON = `currency parsed as text ${HOSTILE}`;
/** The catalog's names as a sender or an older catalog could write them. */
const NAMES: Record<string, string> = {
  orders: `orders${HOSTILE}`,
  settlement_report: `settlement_report${HOSTILE}`,
  payout_export: `payout_export${HOSTILE}`,
  demand_forecast: `demand_forecast${HOSTILE}`,
};
const PEOPLE: TextStyle = { people: new Map([[OWNERS.settlementLead, `Settlement lead ${HOSTILE}`], [OPERATOR, 'On-call']]), colour: false };

// eslint-disable-next-line no-control-regex -- finding control characters is the point
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

/** The same data with every catalog name replaced by a hostile one: whatever the catalog allows, the views must hold. */
function hostileNames<T>(value: T): T {
  if (typeof value === 'string') return (NAMES[value] ?? value) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => hostileNames(item)) as T;
  if (value !== null && typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, hostileNames(item)])) as T;
  }
  return value;
}

/** Every text a message (or view) carries: its notification text and every `text` of its blocks, however nested. */
function textsOf(value: unknown): string[] {
  if (typeof value !== 'object' || value === null) return [];
  if (Array.isArray(value)) return value.flatMap(textsOf);
  return Object.entries(value).flatMap(([key, item]) => (typeof item === 'string' ? (key === 'text' ? [item] : []) : textsOf(item)));
}

/** No broadcast, foreign mention or link, and no control character, in any text of a message; every code fence closed. */
function expectInert(message: unknown): void {
  const texts = textsOf(message);
  expect(texts.length).toBeGreaterThan(0);
  for (const text of texts) {
    expect(text).not.toContain('<!');
    expect(text).not.toContain('<@U0EVIL');
    expect(text).not.toContain('<https://evil');
    expect(text).not.toMatch(CONTROL);
    expect((text.match(/```/g) ?? []).length % 2).toBe(0);
  }
}

type AnyBlock = { type: string; text?: { text: string }; elements?: { text?: unknown }[] };

/** Slack's limits, every one: a section's text, a header's, the number of blocks. */
function expectWithinLimits(message: { blocks: unknown[] }, maxBlocks = 50): void {
  expect(message.blocks.length).toBeLessThanOrEqual(maxBlocks);
  for (const block of message.blocks as AnyBlock[]) {
    if (block.type === 'header') expect(block.text?.text.length).toBeLessThanOrEqual(150);
    if (block.type === 'section') expect(block.text?.text.length).toBeLessThanOrEqual(3000);
    if (block.type === 'context') for (const element of block.elements ?? []) expect(String(element.text ?? '').length).toBeLessThanOrEqual(3000);
  }
}

const allText = (message: Message) => textsOf(message.blocks).join('\n');

describe('outside text in Slack and on a terminal', () => {
  let engine: TestEngine;
  let plan: Plan;
  let report: BackfillReport;
  let answer: PaidAgainstAnswer;
  let announcement: Notice;

  beforeAll(async () => {
    engine = await createTestEngine();
    const { ctx } = engine;
    plan = await planBackfill(ctx, { pipeline: 'orders', target: '2026-11-15', reason: REASON, actor: OPERATOR });
    const { backfill } = await startBackfill(ctx, { pipeline: 'orders', target: '2026-11-15', reason: REASON, actor: OPERATOR });
    const consumers = await listBackfillConsumers(ctx.pool, backfill.id);
    announcement = storedAnnouncement(consumers.find((c) => c.consumer === 'settlement_report') ?? consumers[0]!);
    await overrideGate(ctx, { backfillId: backfill.id, actor: OPERATOR, reason: `owners on leave ${HOSTILE}` });
    report = await runUntilSettled(ctx, backfill.id, () => undefined);
    answer = await answerPaidAgainst(ctx.pool, { report: 'settlement_report', date: '2026-11-15' });
  }, 120_000);
  afterAll(async () => engine.close());

  it('the owner\'s DM, the status message, the plan, the diff, the paid-against answer and the Home tab show it as typed, the bot\'s own mentions live', () => {
    expect(report.backfill.state).toBe('done');
    const hostileReport = hostileNames({ ...report, backfill: { ...report.backfill, failure: `webhook said ${HOSTILE}`, pausedReason: HOSTILE } });
    const dm = announcementMessage({ backfillId: report.backfill.id, consumer: 'settlement_report' }, hostileNames(announcement));
    const messages: [string, Message | { blocks: unknown[] }][] = [
      ['dm', dm],
      ['status', statusMessage(hostileReport)],
      ['plan', planMessage(hostileNames(plan))],
      ['diff', diffMessage(hostileReport)],
      ['paid against', paidAgainstMessage(hostileNames(answer))],
      ['home', homeView({ inFlight: [hostileReport], recent: [hostileReport.backfill] })],
      ['reconciliation', reconciliationMessage(hostileReport.backfill, [])],
    ];
    for (const [name, message] of messages) {
      try {
        expectInert(message);
      } catch (error) {
        throw new Error(`${name}: ${textsOf(message).filter((t) => (t.match(/```/g) ?? []).length % 2 === 1).join(' || ')}`, { cause: error });
      }
    }
    // What was typed is still there, to be read: Slack shows the entities as the characters.
    expect(allText(dm)).toContain('&lt;!channel&gt; &lt;!here&gt; &lt;!subteam^S123&gt; &lt;@U0EVIL&gt; &lt;https://evil|Acknowledge here&gt;');
    // The bot's own mentions are markup still: the signer in the DM, who asked in the status message.
    expect(allText(dm)).toContain(`signed by <@${OWNERS.settlementLead}>`);
    expect(allText(statusMessage(hostileReport))).toContain(`*Asked by* <@${OPERATOR}>`);
    expect(allText(paidAgainstMessage(hostileNames(answer)))).toContain(`signed by <@${OWNERS.settlementLead}>`);
  });

  it('the notices in the incident channel escape the reason and the consumer, not the actor', () => {
    const notices = [
      stoppedNotice(OPERATOR, 1, REASON, 0), continuedNotice(OPERATOR, 1, [], REASON), overriddenNotice(OPERATOR, 1, REASON),
      cancelledNotice(OPERATOR, 1, REASON), heldNotice(OWNERS.settlementLead, 1, NAMES.settlement_report ?? ''),
    ];
    for (const notice of notices) {
      expectInert({ text: notice });
      expect(notice).toMatch(/<@U07(ONCALL|SETTLE)>/);
    }
  });

  it('a lineage proposal from an unknown job holds its name and namespace as text, inside closed code spans', () => {
    const proposal: LineageProposal = {
      id: 7, jobNamespace: `airflow ${HOSTILE}`, jobName: `\`\`\`*bold* ${HOSTILE}`, suggestedName: 'finance_daily', state: 'proposed',
      proposedAt: new Date('2026-11-16T08:00:00Z'), consumer: null, decidedBy: null, decidedAt: null,
      pending: [{ pipeline: NAMES.orders ?? '', hours: 2, first: new Date('2026-11-15T05:00:00Z'), last: new Date('2026-11-15T06:00:00Z') }],
    };
    const message = lineageProposalMessage(proposal);
    expectInert(message);
    expect(allText(message)).not.toContain('```*bold*');
    expectInert(textMessage(lineageProposalsReply([proposal])));
    // On a terminal (`lineage list`): the characters typed, no control characters.
    const terminal = fromSlackMarkup(lineageProposalsReply([proposal]), PEOPLE);
    expect(terminal).toContain('<!channel>');
    expect(terminal).not.toMatch(CONTROL);
  });

  it('a terminal shows status, diff, plan, paid-against, the list, the timeline and the announcement without control characters', async () => {
    const hostileReport = hostileNames({ ...report, backfill: { ...report.backfill, failure: `webhook said ${HOSTILE}`, pausedReason: HOSTILE, stoppedBy: OPERATOR, stopReason: HOSTILE } });
    const outputs = [
      renderStatus(hostileReport, PEOPLE), renderDiff(hostileReport, PEOPLE), renderPlan(hostileNames(plan), PEOPLE),
      renderPaidAgainst(hostileNames(answer), PEOPLE), renderBackfillList([hostileReport.backfill], PEOPLE),
      renderTimeline(await listEvents(engine.ctx.pool, report.backfill.id), PEOPLE), terminalNoticeText(hostileNames(announcement), PEOPLE),
      ...startedLines(report.backfill, hostileNames(plan).announcements, PEOPLE),
    ];
    for (const output of outputs) expect(output).not.toMatch(CONTROL);
    // A colour terminal still gets the bot's own colours, and only those.
    const coloured = renderDiff(hostileReport, { ...PEOPLE, colour: true });
    const ownColours = ['\u001b[31m', '\u001b[32m', '\u001b[39m'];
    expect(ownColours.reduce((text, code) => text.replaceAll(code, ''), coloured)).not.toMatch(CONTROL);
    expect(coloured).toContain('\u001b[31m');
    expect(renderStatus(hostileReport, PEOPLE)).toContain('<!channel>');
  });

  it('the incident package shows outside text as typed: no link, HTML or control character from it', async () => {
    const pkg = hostileNames(await buildIncidentPackage(engine.ctx.pool, report.backfill.id));
    const json = incidentPackageJson(pkg);
    expect(json).not.toMatch(CONTROL);
    // The same record: the escapes read back as the characters stored.
    expect(JSON.stringify(JSON.parse(json))).toContain(JSON.stringify(NAMES.orders).slice(1, -1));
    const markdown = incidentPackageMarkdown(pkg);
    expect(markdown).not.toMatch(CONTROL);
    expect(markdown).not.toMatch(/(?<!\\)<https:\/\/evil/);
    expect(markdown).toContain('\\<!channel>');
  });
});

describe("the bot's own sentences that repeat what was typed", () => {
  /** The refusal a call throws, as its message. */
  function refusal(call: () => unknown): string {
    try {
      call();
    } catch (error) {
      if (isBackfillError(error)) return error.message;
      throw error;
    }
    throw new Error('expected a refusal');
  }

  it('escape the typed word where Slack shows them, and a terminal shows it as typed, without control characters', () => {
    const typed = `<!channel>\`\`\`<@U0EVIL>`;
    const sentences = [
      refusal(() => parseCommand('slack', [typed])), refusal(() => parseCommand('cli', [typed])),
      refusal(() => parseCommand('slack', ['stop', typed, 'why'])), refusal(() => parseTargetSpec(typed)), refusal(() => parseHour(typed)),
      `${mention(`cli:${typed}@host`)} asked`,
    ];
    for (const sentence of sentences) {
      expectInert({ text: sentence });
      expect(fromSlackMarkup(sentence, PEOPLE)).toContain('<!channel>');
    }
    expect(mention(OPERATOR)).toBe(`<@${OPERATOR}>`);
  });

  it('a secret escaped for Slack is still found by the redaction', () => {
    registerSecrets(['s3cr&t<value>']);
    expect(redact(slackText('the hook said s3cr&t<value> back'))).not.toContain(slackText('s3cr&t<value>'));
  });
});

describe('limits: nothing is cut silently', () => {
  let engine: TestEngine;
  let report: BackfillReport;
  let announcement: Notice;
  const reason = `${'x'.repeat(MAX_REASON_LENGTH - 6)} <!ch>`;

  beforeAll(async () => {
    engine = await createTestEngine();
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason, actor: OPERATOR });
    const consumers = await listBackfillConsumers(engine.ctx.pool, backfill.id);
    announcement = storedAnnouncement(consumers.find((c) => c.consumer === 'settlement_report') ?? consumers[0]!);
    report = await loadBackfillReport(engine.ctx.pool, backfill.id);
  }, 120_000);
  afterAll(async () => engine.close());

  /** The owner's DM still says what matters: the signed figure, the expected new total, the ask; all within Slack's limits. */
  function expectWholeDm(notice: Notice): Message {
    const dm = announcementMessage({ backfillId: report.backfill.id, consumer: 'settlement_report' }, notice);
    const text = allText(dm);
    expect(text).toContain('Signed figure: settlement_report for 2026-11-15 = 1,284,310.55');
    expect(text).toContain('Expected new total for 2026-11-15: 1,271,902.10');
    expect(text).toContain('Please acknowledge or hold.');
    expect(dm.blocks.some((b) => b.type === 'actions')).toBe(true);
    expectWithinLimits(dm);
    return dm;
  }

  it('a reason at the maximum length keeps the signed figure, the expected total and the ask in the owner\'s DM', () => {
    expect(reason).toHaveLength(MAX_REASON_LENGTH);
    const dm = expectWholeDm(announcement);
    expect(allText(dm)).toContain(reason.replace('<!ch>', '&lt;!ch&gt;'));
    expectWithinLimits(statusMessage(report));
  });

  it('a reason stored longer than any section (from before the limit) is bounded in its own block, saying how much was left out', () => {
    if (announcement.kind !== 'announcement') throw new Error('expected announcement facts');
    const dm = expectWholeDm({ ...announcement, facts: { ...announcement.facts, reason: 'y'.repeat(10_000) } });
    expect(allText(dm)).toMatch(/… \(\d+ more characters not shown\)/);
    const status = statusMessage({ ...report, backfill: { ...report.backfill, reason: 'y'.repeat(10_000) } });
    expectWithinLimits(status);
    expect(allText(status)).toMatch(/more characters not shown/);
  });

  it('a reason one character longer is refused on both front ends with a sentence naming the limit and the length given', () => {
    const long = 'z'.repeat(MAX_REASON_LENGTH + 1);
    for (const surface of ['slack', 'cli'] as const) {
      for (const words of [['stop', '12', long], ['start', 'orders', '2026-11-15', long], ['start', 'plan', '3', long], ['override', '12', long], ['lineage', 'reject', '3', long]]) {
        let message = '';
        try {
          parseCommand(surface, words);
        } catch (error) {
          if (isBackfillError(error)) message = error.message;
        }
        expect(message).toContain(`The reason is ${MAX_REASON_LENGTH + 1} characters long; at most ${MAX_REASON_LENGTH} are taken.`);
      }
    }
    expect(parseCommand('slack', ['stop', '12', 'z'.repeat(MAX_REASON_LENGTH)])).toMatchObject({ kind: 'stop', reason: 'z'.repeat(MAX_REASON_LENGTH) });
  });

  it('NUL, other control characters and lone surrogates are refused with a sentence before anything reaches the database', () => {
    for (const bad of ['a\u0000b', 'a\u001bb', '\ud800x', 'x\u202e']) {
      expect(() => parseCommand('slack', ['stop', '12', bad])).toThrow(/is U\+[0-9A-F]{4}, a control character or half of a UTF-16 pair, which is not text/);
    }
    expect(() => parseButtonValue(JSON.stringify({ b: 1, c: 'settlement_report\u0000' }))).toThrow(/does not belong to a backfill announcement/);
  });

  it(`a diff of 48 partitions (MAX_PARTITIONS) lists every hour in its table and its text, the text's fence closed, within Slack's limits`, () => {
    const first = report.targets[0]!;
    const hours = Array.from({ length: 48 }, (_, i) => new Date(Date.UTC(2026, 10, 14, 0) + i * 3_600_000));
    const targets = hours.map((hour) => ({ ...first, partitionHour: hour, rowsAfter: 1234, totalAfter: '123456.78', totalBefore: '123450.00' }));
    const diff = diffMessage({ ...report, targets, backfill: { ...report.backfill, partitionCount: 48 } });
    expectWithinLimits(diff);
    expectInert(diff);
    // The blocks hold the rows once, in the table; the message's text holds them all, in one closed fence.
    expect(allText(diff)).not.toContain('```');
    const table = diff.blocks.find((b) => b.type === 'table');
    for (const hour of hours) expect(JSON.stringify(table)).toContain(formatHour(hour));
    for (const hour of hours) expect(diff.text).toContain(formatHour(hour));
    expect(diff.text.length).toBeLessThanOrEqual(4000);
    expect(diff.text.trimEnd().endsWith('```')).toBe(true);
    expect(allText(diff)).not.toContain('not shown here');

    // Raised far beyond, what does not fit says where the whole is, and nothing of it is half shown.
    const many = Array.from({ length: 720 }, (_, i) => ({ ...first, partitionHour: new Date(Date.UTC(2026, 9, 1) + i * 3_600_000) }));
    const big = diffMessage({ ...report, targets: many, backfill: { ...report.backfill, partitionCount: 720 } });
    expectWithinLimits(big);
    expectInert(big);
    expect(big.text.length).toBeLessThanOrEqual(4000);
    const listed = big.text.split('\n').filter((line) => /^2026-\d\d-\d\d \d\d:00/.test(line.replace('```', ''))).length;
    expect(big.text).toContain(`${720 - listed} more partition(s)`);
    expect(allText(big)).toContain('The table holds the first 99 of the 720 partitions');
    expect(allText(big)).toContain(`\`/backfill log ${report.backfill.id}\``);
  });
});

describe('through Bolt: a start with a reason at the maximum length holding markup, and a NUL', () => {
  let h: SlackHarness;
  // As the slash command's words arrive: single spaces, no control characters (those are refused, below).
  const markup = 'wrong step <!channel> <!here> <!subteam^S123> <@U0EVIL> <https://evil|Acknowledge here> ```';
  const reason = `${markup} ${'w'.repeat(MAX_REASON_LENGTH - markup.length - 1)}`;

  beforeAll(async () => {
    h = await createSlackHarness();
  }, 120_000);
  afterAll(async () => h.close());

  it('posts the owner\'s DM and the status message with the reason as text and the ask whole; refuses one character more', async () => {
    expect(reason).toHaveLength(MAX_REASON_LENGTH);
    const started = await h.command(`start orders 2026-11-15 ${reason}`);
    expect(started.reply).toContain('Backfill #1 created');
    const dms = () => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D') && JSON.stringify(c.params.blocks ?? '').includes('Please acknowledge or hold'));
    await waitUntil(() => dms().length > 0, 'the owners\' announcements');
    const status = () => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === INCIDENT_CHANNEL && JSON.stringify(c.params.blocks ?? '').includes('*Why:*'));
    await waitUntil(() => status().length > 0, 'the status message');
    for (const call of [...dms(), ...status()]) {
      expectInert(call.params);
      expectWithinLimits({ blocks: call.params.blocks as unknown[] });
    }
    const dm = JSON.stringify(dms()[0]?.params.blocks);
    expect(dm).toContain('Expected new total for 2026-11-15');
    expect(dm).toContain(ActionId.Acknowledge);
    const longer = await h.command(`stop 1 ${reason}x`);
    expect(longer.reply).toContain(`The reason is ${MAX_REASON_LENGTH + 1} characters long; at most ${MAX_REASON_LENGTH} are taken.`);
    const nul = await h.command('stop 1 wrong\u0000step');
    expect(nul.status).toBe(200);
    expect(nul.reply).toMatch(/U\+0000, a control character/);
    expect(nul.reply).not.toMatch(/Something went wrong/);
    const button = await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report\u0000' }), OWNERS.settlementLead);
    expect(button.reply).toMatch(/does not belong to a backfill announcement/);
  });
});
