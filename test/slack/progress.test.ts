// Progress: the status message in the incident channel carries a bar over the run's steps (partitions staged
// and published k of n, replays, compare) that moves as the night-15 backfill runs, updated in place, and the
// time left once a few partitions are done; updates keep STATUS_THROTTLE_MS apart. The CLI's --wait draws
// the same progress as a bar on a terminal and as plain lines elsewhere.

import { webApi } from '@slack/bolt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TerminalProgress } from '../../src/cli/runner.js';
import { OWNERS } from '../../dev/demo/constants.js';
import { loadBackfillReport, type BackfillReport } from '../../src/core/file/status.js';
import type { RecordedCall } from '../../dev/slack-emulator/index.js';
import { SlackMessenger } from '../../src/slack/delivery/messenger.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { backfillProgress, ETA_AFTER_PARTITION_STEPS, formatTimeLeft, progressBar } from '../../src/views/progress.js';
import { createSlackHarness, INCIDENT_CHANNEL, type SlackHarness } from '../support/slackApp.js';
import { waitUntil } from '../support/wait.js';

const MINUTE = 60_000;
const T0 = new Date('2026-11-16T09:00:00Z');
const at = (minutes: number) => new Date(T0.getTime() + minutes * MINUTE);

/** The progress of a status message as the emulator received it: its bar line and its counts line. */
function progressOf(call: RecordedCall): string {
  const blocks = Array.isArray(call.params.blocks) ? (call.params.blocks as { text?: { text?: string } }[]) : [];
  const text = blocks.map((b) => b.text?.text ?? '').find((t) => t.startsWith('*Progress:*'));
  if (text === undefined) return '';
  const [first = '', second = ''] = text.split('\n');
  return second.startsWith('staged') ? `${first}\n${second}` : first;
}
const percentOf = (progress: string) => Number(/(\d+)%/.exec(progress)?.[1] ?? -1);
/** staged + published, from "staged 3 of 6 · published 1 of 6". */
const partitionStepsOf = (progress: string) =>
  Number(/staged (\d+) of/.exec(progress)?.[1] ?? 0) + Number(/published (\d+) of/.exec(progress)?.[1] ?? 0);

/**
 * The finished run's report, wound back: the first `finished` run steps (stage, publish, replay, compare, in
 * the order they ran) done, one minute each from T0, the rest pending; the backfill running.
 */
function woundBack(report: BackfillReport, finished: number): BackfillReport {
  const runSteps = new Set(['stage', 'publish', 'replay', 'compare']);
  let n = 0;
  const steps = report.steps.map((step) => {
    if (!runSteps.has(step.kind)) return step;
    n += 1;
    return n <= finished
      ? { ...step, status: 'done' as const, startedAt: at(n - 1), finishedAt: at(n) }
      : { ...step, status: 'pending' as const, startedAt: null, finishedAt: null };
  });
  return { ...report, backfill: { ...report.backfill, state: 'running' }, steps };
}

describe('progress of the night-15 backfill', () => {
  let h: SlackHarness;
  let final: BackfillReport;
  const statusUpdates = () => h.slack.callsTo('chat.update').filter((c) => c.params.channel === INCIDENT_CHANNEL && progressOf(c) !== '');

  beforeAll(async () => {
    h = await createSlackHarness();
    await h.command('start orders 2026-11-15 currency parsed as text');
    await waitUntil(() => h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'announcements');
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'settlement_report' }), OWNERS.settlementLead);
    await h.press(ActionId.Acknowledge, encodeButtonValue({ backfillId: 1, consumer: 'payout_export' }), OWNERS.payouts);
    await waitUntil(() => statusUpdates().some((c) => progressOf(c).includes('compare done') && JSON.stringify(c.params.blocks).includes(': done')), 'the final status', 30_000);
    final = await loadBackfillReport(h.engine.ctx.pool, 1);
  });
  afterAll(async () => h.close());

  it('the status message shows a bar that moves with the run, in place, up to all done', () => {
    const status = h.slack.callsTo('chat.postMessage').filter((c) => c.params.channel === INCIDENT_CHANNEL && progressOf(c) !== '');
    expect(status).toHaveLength(1);
    expect(progressOf(status[0] as RecordedCall)).toContain('not started');
    const updates = statusUpdates();
    expect(new Set(updates.map((c) => c.params.ts))).toEqual(new Set([status[0]?.response.ts]));
    const percents = updates.map((c) => percentOf(progressOf(c))).filter((p) => p >= 0);
    expect(new Set(percents).size).toBeGreaterThanOrEqual(3);
    expect(percents).toEqual([...percents].sort((a, b) => a - b));
    const last = progressOf(updates.at(-1) as RecordedCall);
    const replays = final.steps.filter((s) => s.kind === 'replay').length;
    expect(last).toContain(`\`${progressBar(1)}\` 100%`);
    expect(last).toContain(`staged 6 of 6 · published 6 of 6 · replays ${replays} of ${replays} · compare done`);
    expect(last).not.toContain(' left');
  });

  it('the time left appears once a few partition steps are done, and never before', () => {
    const withTimeLeft = statusUpdates().map(progressOf).filter((p) => / left$/.test(p));
    expect(withTimeLeft.length).toBeGreaterThan(0);
    for (const progress of withTimeLeft) expect(partitionStepsOf(progress)).toBeGreaterThanOrEqual(ETA_AFTER_PARTITION_STEPS);
    for (const progress of withTimeLeft) expect(progress).toMatch(/ · (under a minute|about \d+ min|about \d+ h( \d+ min)?) left$/);
  });

  it('estimates the time left from the time the finished steps took, and only while steps run', () => {
    const total = final.steps.filter((s) => ['stage', 'publish', 'replay', 'compare'].includes(s.kind)).length;
    expect(backfillProgress(woundBack(final, ETA_AFTER_PARTITION_STEPS - 1), at(2)).msLeft).toBeUndefined();
    const three = backfillProgress(woundBack(final, 3), at(3));
    expect(three.msLeft).toBe((total - 3) * MINUTE);
    expect(three.fraction).toBeCloseTo(3 / total);
    // Waiting longer with nothing finished makes the estimate longer, not shorter.
    expect(backfillProgress(woundBack(final, 3), at(6)).msLeft).toBe((total - 3) * 2 * MINUTE);
    const paused = woundBack(final, 3);
    expect(backfillProgress({ ...paused, backfill: { ...paused.backfill, state: 'paused' } }, at(3)).msLeft).toBeUndefined();
    expect([formatTimeLeft(40_000), formatTimeLeft(7 * MINUTE), formatTimeLeft(95 * MINUTE), formatTimeLeft(120 * MINUTE)])
      .toEqual(['under a minute left', 'about 7 min left', 'about 1 h 35 min left', 'about 2 h left']);
  });

  it('updates the status message no more often than the throttle allows', async () => {
    const throttleMs = 250;
    const messenger = new SlackMessenger(new webApi.WebClient('xoxb-test-token', { slackApiUrl: h.slack.url }), h.engine.ctx.pool, throttleMs);
    // A backfill of its own (cancelled: no worker touches it), so that every refresh counted here is this messenger's.
    const { rows } = await h.engine.ctx.pool.query<{ id: number }>(
      `INSERT INTO backfill.backfills (pipeline, reason, requested_by, first_hour, last_hour, partition_count,
         watermark_reset_to, total_before, announced_at, state, incident_channel)
       VALUES ('orders', 'throttle test', 'U07ONCALL', $1::timestamptz, $1::timestamptz, 1, $1::timestamptz, 0, now(), 'cancelled', $2::text)
       RETURNING id`, ['2026-11-20T05:00Z', INCIDENT_CHANNEL]);
    const id = rows[0]?.id ?? 0;
    // One after the other, each waiting for the last, then two at once: the second and third refresh wait out
    // the rest of the interval, and the two at once make one refresh.
    await messenger.changed(id);
    await messenger.changed(id);
    await Promise.all([messenger.changed(id), messenger.changed(id)]);
    const posted = h.slack.callsTo('chat.postMessage').filter((c) => String(c.params.text).startsWith(`Backfill #${id} `));
    expect(posted).toHaveLength(1);
    const updates = h.slack.callsTo('chat.update').filter((c) => c.params.ts === posted[0]?.response.ts);
    const times = [...posted, ...updates].map((c) => c.at);
    expect(times).toHaveLength(3);
    for (let i = 1; i < times.length; i += 1) expect((times[i] ?? 0) - (times[i - 1] ?? 0)).toBeGreaterThanOrEqual(throttleMs - 5);
  });

  it('the CLI draws a bar in place on a terminal, and prints plain lines when the counts change elsewhere', () => {
    const written: string[] = [];
    const tty = new TerminalProgress({ isTTY: true, columns: 200, write: (text) => written.push(text) }, 1, () => at(3));
    tty.update(woundBack(final, 3));
    tty.update(woundBack(final, 3));
    tty.print('--- to Forecast owner ---');
    tty.update(woundBack(final, 4));
    tty.end();
    const counts = (finished: number) => {
      const { staged, published } = backfillProgress(woundBack(final, finished), at(3));
      return `staged ${staged.done} of 6 · published ${published.done} of 6`;
    };
    expect(written).toHaveLength(4);
    const clearLine = '\r\x1b[2K';
    expect(written[0]?.startsWith(clearLine)).toBe(true);
    expect(written[0]?.slice(clearLine.length)).toMatch(/^#1 \[█+░+\] +\d+% {2}staged \d of 6 · published \d of 6 · replays 0 of \d+ · compare pending · about \d+ min left$/);
    expect(written[0]).toContain(counts(3));
    // A printed line takes the bar's place and the bar is drawn again under it.
    expect(written[1]).toBe(`${clearLine}--- to Forecast owner ---\n${(written[0] ?? '').slice(clearLine.length)}`);
    expect(written[2]).toContain(counts(4));
    expect(written[3]).toBe('\n');

    const lines: string[] = [];
    const pipe = new TerminalProgress({ write: (text) => lines.push(text) }, 1, () => at(3));
    pipe.update(woundBack(final, 3));
    pipe.update(woundBack(final, 3));
    pipe.update(woundBack(final, 4));
    pipe.end();
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^backfill #1: \d+% done: staged \d of 6, published \d of 6, replays 0 of \d+, compare pending\n$/);
    expect(lines[0]).toContain(counts(3).replace(' ·', ','));
    expect(lines[1]).toContain(counts(4).replace(' ·', ','));
    for (const redraw of ['\r', '\x1b', '█']) expect(lines.join('')).not.toContain(redraw);
  });
});
