import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NIGHT_15, OWNERS } from '../../dev/demo/constants.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { countRows } from '../support/engine.js';
import { createSlackHarness, INCIDENT_CHANNEL, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { postEvent, type RecordedCall } from '../../dev/slack-emulator/index.js';
import { waitUntil } from '../support/wait.js';

const blocksText = (call: RecordedCall | undefined) => `${String(call?.params.text ?? '')} ${JSON.stringify(call?.params.blocks ?? [])}`;

describe('"what did we pay against?" in Slack, after the night-15 backfill', () => {
  let h: SlackHarness;
  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'announcements');
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await waitUntil(async () => (await h.engine.ctx.pool.query('SELECT state FROM backfill.backfills WHERE id = 1')).rows[0].state === 'done', 'the backfill', 30_000);
  });
  afterAll(async () => h.close());

  const expectAnswer = (text: string) => {
    expect(text).toContain('*1,284,310.55*, signed by <@U07SETTLE> at 2026-11-16 07:00 UTC');
    expect(text).toContain('*Backfill #1* (currency parsed as text): corrected to *1,271,902.10*, −12,408.45 against the signed 1,284,310.55');
    expect(text).toMatch(/announced 2026-\d\d-\d\d \d\d:\d\d UTC, ran 2026-\d\d-\d\d \d\d:\d\d UTC by <@U07ONCALL>/);
    expect(text).toContain('acknowledged by <@U07SETTLE> (settlement_report');
    expect(text).toContain('<@U07PAYOUTS> (payout_export');
    expect(text).toContain('*Current figure:* 1,271,902.10 (after backfill #1; not signed again since)');
  };

  it('answers a mention in plain words, in the thread, for anyone', async () => {
    const response = await postEvent(h.eventsUrl, SIGNING_SECRET, {
      type: 'app_mention', user: 'U07FINANCE', channel: 'C0FINANCE', ts: '1764500000.000100', text: '<@UBOT> what did we pay against on 2026-11-15?',
    });
    expect(response.status).toBe(200);
    await waitUntil(() => h.slack.callsTo('chat.postMessage').some((c) => c.params.channel === 'C0FINANCE'), 'the answer');
    const answer = h.slack.callsTo('chat.postMessage').find((c) => c.params.channel === 'C0FINANCE');
    expect(answer?.params.thread_ts).toBe('1764500000.000100');
    expectAnswer(blocksText(answer));
  });

  it('answers the same question in a DM, and explains how to ask when it cannot tell', async () => {
    await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'message', channel_type: 'im', channel: 'DU07FINANCE', user: 'U07FINANCE', ts: '1764500001.000100', text: 'What did we pay against for the settlement report on 2026-11-15?' });
    await waitUntil(() => h.slack.callsTo('chat.postMessage').some((c) => c.params.channel === 'DU07FINANCE'), 'the DM answer');
    expectAnswer(blocksText(h.slack.callsTo('chat.postMessage').find((c) => c.params.channel === 'DU07FINANCE')));
    await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'message', channel_type: 'im', channel: 'DU07FINANCE', user: 'U07FINANCE', ts: '1764500002.000100', text: 'what did we pay against on 2026-12-24?' });
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === 'DU07FINANCE').length === 2, 'the refusal');
    expect(String(h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === 'DU07FINANCE')[1]?.params.text))
      .toMatch(/Nothing was signed for 2026-12-24\. Reports with signed figures: settlement_report/);
  });

  it('answers /backfill paid-against without the operator role', async () => {
    const { reply } = await h.command('paid-against settlement_report 2026-11-15', 'U07FINANCE');
    expect(reply).toMatch(/settlement_report 2026-11-15: paid against 1,284,310\.55; current 1,271,902\.10/);
    const unknown = await h.command('paid-against settlements 2026-11-15', 'U07FINANCE');
    expect(unknown.reply).toMatch(/There is no report called "settlements"\. Reports with signed figures: settlement_report/);
  });

  it('signs the current total as the person who typed it, twice, keeping both', async () => {
    const refused = await h.command('sign settlement_report 2026-11-15', 'U07FINANCE');
    expect(refused.reply).toMatch(/<@U07FINANCE> may not sign settlement_report\. Who may: <@U07SETTLE>/);
    const first = await h.command('sign settlement_report 2026-11-15', OWNERS.settlementLead);
    expect(first.reply).toMatch(/Signed: settlement_report for 2026-11-15 = \*1,271,902\.10\* by <@U07SETTLE>.*signature 2; the earlier ones are kept/);
    await h.command('sign settlement_report 2026-11-15', OWNERS.settlementLead);
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.signoffs WHERE report = 'settlement_report' AND period = '2026-11-15'`)).toBe(3);
    const { reply } = await h.command('paid-against 2026-11-15', 'U07FINANCE');
    expect(reply).toMatch(/current 1,271,902\.10/);
  });

  it('uploads the incident package to the incident thread as Markdown and JSON saying the same thing', async () => {
    const { reply } = await h.command('log 1', 'U07FINANCE');
    expect(reply).toMatch(/incident package of backfill #1 \(Markdown and JSON\)/);
    // The diff chart was shared in the thread after the run; the package is what `log 1` uploaded.
    const complete = h.slack.callsTo('files.completeUploadExternal').filter((c) => !String(c.params.initial_comment).startsWith('Diff chart'));
    expect(complete).toHaveLength(1);
    expect(complete[0]?.params.channel_id).toBe(INCIDENT_CHANNEL);
    expect(complete[0]?.params.thread_ts).toBeTruthy();
    const uploads = [...h.slack.uploads.values()].map((b) => b.toString('utf8'));
    const json = uploads.find((u) => u.trimStart().startsWith('{'));
    const markdown = uploads.find((u) => u.trimStart().startsWith('#'));
    expect(json && markdown).toBeTruthy();
    const pkg = JSON.parse(json ?? '{}');
    expect(pkg.format).toBe('backfill-incident-package/1');
    expect(markdown).toContain('1,284,310.55');
    expect(markdown).toContain('1,271,902.10');
    expect(markdown).toContain('−12,408.45');
    expect(JSON.stringify(pkg)).toContain(NIGHT_15.signedTotal);
    expect(JSON.stringify(pkg)).toContain(NIGHT_15.diff);
  });

  it('publishes the Home tab for the user who opened it: in-flight gates and the latest log rows', async () => {
    await h.command('start orders 2026-11-27 shard 3 landed late');
    await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'app_home_opened', user: 'U07FINANCE', channel: 'DU07FINANCE', tab: 'home' });
    await waitUntil(() => h.slack.callsTo('views.publish').length === 1, 'views.publish');
    const publish = h.slack.callsTo('views.publish')[0];
    expect(publish?.params.user_id).toBe('U07FINANCE');
    const view = JSON.stringify(publish?.params.view);
    expect(view).toContain('#2 orders');
    expect(view).toContain('announced, waiting for acknowledgements');
    expect(view).toContain('settlement_report <@U07SETTLE>: waiting');
    expect(view).toContain('#1 orders 05:00–10:00 on 2026-11-15: done · before 1,284,310.55 · after 1,271,902.10 · difference −12,408.45');
  });
});
