// The diff chart through Slack: after the night-15 backfill the chart goes to the incident thread as Slack's
// files.uploadV2 does it against the Web API emulator (files.getUploadURLExternal, the bytes POSTed to the
// upload URL, files.completeUploadExternal into the thread), once per intent like every message: a repeated
// report uploads nothing, a lost answer is found in the thread by the retry, a refusal is recorded without
// failing the diff. The App Home shows the latest chart.

import { webApi } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OWNERS } from '../../dev/demo/constants.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { intentKey } from '../../src/core/messenger.js';
import { findMessageIntent } from '../../src/db/messageIntents.js';
import { postEvent } from '../../dev/slack-emulator/index.js';
import { SlackMessenger } from '../../src/slack/delivery/messenger.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { BAR_COLOURS, CHART_SCALE, CHART_WIDTH, diffChartData, diffChartLayout } from '../../src/views/diffChart.js';
import { countRows } from '../support/engine.js';
import { decodePng } from '../support/png.js';
import { createSlackHarness, INCIDENT_CHANNEL, SIGNING_SECRET, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const DIFF_INTENT = intentKey(1, 'report', 'diff');
const near = (pixel: readonly number[], colour: string) =>
  [1, 3, 5].every((at, i) => Math.abs(Number.parseInt(colour.slice(at, at + 2), 16) - (pixel[i] ?? -99)) <= 8);

describe('the diff chart in the incident thread', () => {
  let h: SlackHarness;
  /** A messenger of its own over the same emulator and database, as a retried step's worker would have. */
  let retry: SlackMessenger;

  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'announcements');
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await h.slack.waitFor('files.completeUploadExternal', 1, 30_000);
    // Slack has the file before the database has its id: the worker records it after the answer comes back.
    await waitUntil(async () => typeof (await findMessageIntent(h.engine.ctx.pool, `${DIFF_INTENT}:chart`))?.ts === 'string', 'the chart upload recorded');
    retry = new SlackMessenger(new webApi.WebClient('xoxb-test-token', { slackApiUrl: h.slack.url }), h.engine.ctx.pool, 0);
  });
  afterAll(async () => h.close());

  it('uploads it after the diff message, through the upload URL, into the thread under the status message', async () => {
    const methods = h.slack.calls.map((c) => c.method);
    const diffAt = h.slack.calls.findIndex((c) => c.method === 'chat.postMessage' && String(c.params.text).startsWith('Backfill #1 diff'));
    expect(diffAt).toBeGreaterThanOrEqual(0);
    const getUrl = methods.indexOf('files.getUploadURLExternal');
    const complete = methods.indexOf('files.completeUploadExternal');
    expect(diffAt).toBeLessThan(getUrl);
    expect(getUrl).toBeLessThan(complete);
    const statusTs = (await loadBackfillReport(h.engine.ctx.pool, 1)).backfill.statusTs;
    const call = h.slack.callsTo('files.completeUploadExternal')[0];
    expect(call?.params).toMatchObject({ channel_id: INCIDENT_CHANNEL, thread_ts: statusTs, files: [{ title: 'Backfill #1 diff chart' }] });
    expect(h.slack.callsTo('files.getUploadURLExternal')[0]?.params).toMatchObject({ filename: 'backfill-1-diff.png' });
    expect(String(h.slack.callsTo('files.getUploadURLExternal')[0]?.params.alt_text)).toContain('settlement_report 2026-11-15 signed 1,284,310.55, corrected 1,271,902.10');
    expect(h.slack.transcript()).toContain('[file: Backfill #1 diff chart (');
  });

  it('the uploaded bytes are a PNG of the chart: its size, and one after bar per partition where the layout puts it', async () => {
    const fileId = (await findMessageIntent(h.engine.ctx.pool, `${DIFF_INTENT}:chart`))?.ts;
    expect(fileId).toMatch(/^F\d+$/);
    const png = decodePng(h.slack.uploads.get(fileId ?? '') ?? Buffer.alloc(0));
    const report = await loadBackfillReport(h.engine.ctx.pool, 1);
    const layout = diffChartLayout(diffChartData(report));
    expect([png.width, png.height]).toEqual([CHART_WIDTH * CHART_SCALE, Math.round(layout.height * CHART_SCALE)]);
    const after = layout.bars.filter((b) => b.role === 'after' && b.index >= 0);
    expect(after.map((b) => b.index)).toEqual([0, 1, 2, 3, 4, 5]);
    for (const bar of after) {
      expect(near(png.pixel((bar.x + bar.width / 2) * CHART_SCALE, (bar.y + bar.height / 2) * CHART_SCALE), BAR_COLOURS.after)).toBe(true);
    }
    // The signed figure is drawn against the corrected one.
    expect(layout.bars.filter((b) => b.role === 'signed' || b.role === 'corrected').map((b) => b.role)).toEqual(['signed', 'corrected']);
  });

  it('shows the latest chart on the App Home, as the Slack file itself', async () => {
    const fileId = (await findMessageIntent(h.engine.ctx.pool, `${DIFF_INTENT}:chart`))?.ts;
    await postEvent(h.eventsUrl, SIGNING_SECRET, { type: 'app_home_opened', user: 'U07FINANCE', channel: 'DU07FINANCE', tab: 'home' });
    await waitUntil(() => h.slack.callsTo('views.publish').length === 1, 'views.publish');
    const view = h.slack.callsTo('views.publish')[0]?.params.view as { blocks: Record<string, unknown>[] };
    const image = view.blocks.find((b) => b.type === 'image');
    expect(image).toMatchObject({ slack_file: { id: fileId }, title: { text: 'Latest diff: backfill #1' } });
    expect(JSON.stringify(view.blocks)).toContain(`Shared in <#${INCIDENT_CHANNEL}>`);
  });

  it('a retried report step posts and uploads nothing more', async () => {
    const uploads = h.slack.uploads.size;
    const posts = h.slack.callsTo('chat.postMessage').length;
    await retry.reportDiff(1, DIFF_INTENT);
    expect(h.slack.uploads.size).toBe(uploads);
    expect(h.slack.callsTo('files.getUploadURLExternal')).toHaveLength(1);
    expect(h.slack.callsTo('chat.postMessage')).toHaveLength(posts);
  });

  it('an upload whose answer was lost is found in the thread by the retry, and not shared twice', async () => {
    const intent = intentKey(1, 'report', 'lost');
    h.slack.dropAnswer('files.completeUploadExternal', 1);
    await expect(retry.reportDiff(1, intent)).rejects.toThrow();
    expect((await findMessageIntent(h.engine.ctx.pool, `${intent}:chart`))?.ts).toBeNull();
    await retry.reportDiff(1, intent);
    const row = await findMessageIntent(h.engine.ctx.pool, `${intent}:chart`);
    expect(row).toMatchObject({ recovered: true, channel: INCIDENT_CHANNEL });
    // One share of backfill-1-lost.png: the lost one, found by the retry in conversations.replies.
    const shares = h.slack.attempts.filter((a) => a.method === 'files.completeUploadExternal');
    expect(shares).toHaveLength(2);
    expect(h.slack.attempts.filter((a) => a.method === 'files.getUploadURLExternal' && a.params.filename === 'backfill-1-lost.png')).toHaveLength(1);
    expect(h.slack.callsTo('conversations.replies').length).toBeGreaterThan(0);
    expect(row?.ts).toBe((shares.at(-1)?.params.files as { id: string }[])[0]?.id);
  });

  it('a long run of 429s on the upload only delays the chart: it is shared once, through the step\'s wait', async () => {
    const intent = intentKey(1, 'report', 'limited');
    // More than the ten waits an upload used to allow before failing the report step.
    h.slack.rateLimit('files.completeUploadExternal', 15, 0);
    const waits: number[] = [];
    await retry.reportDiff(1, intent, { waitOutRateLimit: async (seconds) => { waits.push(seconds); } });
    expect(waits).toHaveLength(15);
    const shared = h.slack.callsTo('files.completeUploadExternal').filter((c) => JSON.stringify(c.params.files).includes('Backfill #1 diff chart'));
    const row = await findMessageIntent(h.engine.ctx.pool, `${intent}:chart`);
    expect(row).toMatchObject({ recovered: false, channel: INCIDENT_CHANNEL });
    expect(shared.filter((c) => JSON.stringify(c.params.files).includes(String(row?.ts)))).toHaveLength(1);
  });

  it('a Slack refusal of the upload is recorded in the timeline and does not fail the diff', async () => {
    const intent = intentKey(1, 'report', 'refused');
    h.slack.failWith('files.getUploadURLExternal', 1, 'file_uploads_disabled');
    await retry.reportDiff(1, intent);
    expect(await findMessageIntent(h.engine.ctx.pool, intent)).toMatchObject({ channel: INCIDENT_CHANNEL });
    expect(await findMessageIntent(h.engine.ctx.pool, `${intent}:chart`)).toBeUndefined();
    expect(await countRows(h.engine.ctx, `SELECT 1 FROM backfill.events WHERE kind = 'undeliverable' AND detail->>'what' = 'diff chart' AND detail->>'slackError' = 'file_uploads_disabled'`)).toBe(1);
  });
});
