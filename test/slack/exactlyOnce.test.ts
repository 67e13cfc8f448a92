// Exactly one Slack message per intent, against the Slack emulator over HTTP and a real database: a repeated
// call sends nothing, a lost answer is found again in the conversation's history by the intent in the
// message's metadata, a permanent Slack error becomes BackfillError `undeliverable` without a retry loop, and
// a 5xx or a 429 still ends in one message. Also: the test RecordingMessenger keeps the same promise.

import { LogLevel, webApi } from '@slack/bolt';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { intentKey, type OwnerMessage } from '../../src/core/messenger.js';
import type { Notice } from '../../src/core/notices.js';
import { BackfillError, ErrorCode, isBackfillError } from '../../src/errors.js';
import { findMessageIntent } from '../../src/db/messageIntents.js';
import { MESSAGE_EVENT_TYPE, SlackMessenger } from '../../src/slack/delivery/messenger.js';
import { createTestEngine, RecordingMessenger, type TestEngine } from '../support/engine.js';
import { startSlackEmulator, type SlackEmulator } from '../../dev/slack-emulator/index.js';

const { WebClient } = webApi;
const INCIDENT = 'C0INCIDENT';
const OWNER = 'U07SETTLE';
const DM = `D${OWNER}`;

let engine: TestEngine;
let slack: SlackEmulator;
let backfillId: number;
let messenger: SlackMessenger;

/** A backfill row to hang the intents on (cancelled: it holds no hours and no step runs for it). */
async function insertBackfill(): Promise<number> {
  const { rows } = await engine.ctx.pool.query<{ id: number }>(
    `INSERT INTO backfill.backfills (pipeline, reason, requested_by, first_hour, last_hour, partition_count,
       watermark_reset_to, total_before, announced_at, state, incident_channel)
     VALUES ('orders', 'exactly-once test', 'U07ONCALL', $1::timestamptz, $1::timestamptz, 1, $1::timestamptz, 0, now(), 'cancelled', $2::text)
     RETURNING id`, ['2026-11-15T05:00Z', INCIDENT]);
  const id = rows[0]?.id;
  if (id === undefined) throw new Error('no backfill inserted');
  return id;
}

/** A notice whose words are given as they are, for tests of delivery rather than wording. */
const recorded = (text: string): Notice => ({ kind: 'recorded', text });

const ownerMessage = (kind: string, text = 'Backfill of orders moves your signed figure.'): OwnerMessage => ({
  backfillId, consumer: 'settlement_report', owner: OWNER, notice: { kind: 'recorded', text }, intent: intentKey(backfillId, kind, 'settlement_report'),
});

const posts = () => slack.attempts.filter((a) => a.method === 'chat.postMessage');
const historyReads = () => slack.attempts.filter((a) => a.method === 'conversations.history' || a.method === 'conversations.replies');

async function caught(work: Promise<unknown>): Promise<unknown> {
  return work.then(() => new Error('expected a rejection, got a result'), (error: unknown) => error);
}

beforeAll(async () => {
  engine = await createTestEngine('month-end');
  slack = await startSlackEmulator();
  backfillId = await insertBackfill();
});

afterAll(async () => {
  await slack.close();
  await engine.close();
});

beforeEach(async () => {
  slack.reset();
  await engine.ctx.pool.query('DELETE FROM backfill.message_intents');
  // As src/app.ts builds it: the Bolt client (retrying 5xx) and the posting client derived from it.
  const client = new WebClient('xoxb-test-token', {
    slackApiUrl: slack.url,
    retryConfig: { retries: 3, factor: 1, minTimeout: 10, maxTimeout: 20 },
    logLevel: LogLevel.ERROR,
  });
  messenger = new SlackMessenger(client, engine.ctx.pool, 0);
});

describe('one message per intent', () => {
  it('sends an intent once: a repeated call posts nothing and returns where the first landed', async () => {
    const message = ownerMessage('announce');
    const first = await messenger.announce(message);
    const second = await messenger.announce(message);

    expect(second).toEqual(first);
    expect(slack.messagesIn(DM)).toHaveLength(1);
    expect(posts()).toHaveLength(1);
    // A recorded ts is trusted: the history is not even read.
    expect(historyReads()).toHaveLength(0);
    expect(slack.messagesIn(DM)[0]?.metadata).toEqual({
      event_type: MESSAGE_EVENT_TYPE,
      event_payload: { intent: message.intent, backfill_id: backfillId },
    });
    expect(await findMessageIntent(engine.ctx.pool, message.intent)).toMatchObject({
      backfillId, channel: DM, ts: first.ts, recovered: false, deliveredAt: expect.any(Date),
    });

    // Another intent to the same person is another message: the suppression is per intent, not per person.
    await messenger.notifyOwner(ownerMessage('notify', 'The run is done.'));
    expect(slack.messagesIn(DM).map((m) => m.text)).toEqual([expect.any(String), 'The run is done.']);
  });

  it('a reminder is two intents, the DM and the flag in the incident channel, each sent once', async () => {
    const reminder = ownerMessage('remind');
    await messenger.remind(reminder);
    await messenger.remind(reminder);
    expect(slack.messagesIn(DM)).toHaveLength(1);
    expect(slack.messagesIn(INCIDENT).map((m) => m.metadata?.event_payload)).toEqual([{ intent: `${reminder.intent}:flag`, backfill_id: backfillId }]);
    expect(posts()).toHaveLength(2);
  });

  it.each([
    { lost: 'a 500 after the post', answer: 500 as const },
    { lost: 'a connection closed after the post', answer: 'hangup' as const },
  ])('$lost: the retry finds the message in the history by its metadata and posts nothing new', async ({ answer }) => {
    const message = ownerMessage('announce');
    slack.dropAnswer('chat.postMessage', 1, answer);
    const failure = await caught(messenger.announce(message));
    expect(failure).toBeInstanceOf(Error);
    // Not a permanent error: the step is retried.
    expect(isBackfillError(failure)).toBe(false);
    const [landed] = slack.messagesIn(DM);
    expect(landed).toBeDefined();
    expect(await findMessageIntent(engine.ctx.pool, message.intent)).toMatchObject({ ts: null });
    // Between the attempts someone else's intent lands in the same DM: the search matches on the intent.
    await messenger.notifyOwner(ownerMessage('notify', 'unrelated'));

    const retried = await messenger.announce(message);

    expect(retried).toEqual({ channel: DM, ts: landed?.ts });
    expect(slack.messagesIn(DM).filter((m) => m.text !== 'unrelated')).toHaveLength(1);
    expect(posts()).toHaveLength(2);
    expect(historyReads().map((a) => [a.method, a.params.channel, a.params.include_all_metadata])).toEqual([['conversations.history', DM, 'true']]);
    expect(await findMessageIntent(engine.ctx.pool, message.intent)).toMatchObject({ ts: landed?.ts, recovered: true });

    // And from then on the recorded ts answers: no history read, no post.
    await messenger.announce(message);
    expect(historyReads()).toHaveLength(1);
    expect(posts()).toHaveLength(2);
  });

  it('an attempt that crashed before posting: the retry finds nothing in the history and posts once', async () => {
    const intent = intentKey(backfillId, 'notice', 'undeliverable', 'settlement_report');
    // What a crash between writing the intent and calling Slack leaves behind.
    await engine.ctx.pool.query('INSERT INTO backfill.message_intents (intent, backfill_id, channel) VALUES ($1::text, $2::bigint, $3::text)', [intent, backfillId, INCIDENT]);
    await messenger.incidentNotice(backfillId, recorded('The announcement to <@U07SETTLE> cannot be delivered.'), intent);
    expect(historyReads()).toHaveLength(1);
    expect(slack.messagesIn(INCIDENT)).toHaveLength(1);
    expect(await findMessageIntent(engine.ctx.pool, intent)).toMatchObject({ ts: slack.messagesIn(INCIDENT)[0]?.ts, recovered: false });
  });

  it('the status message: its first post is intent bf<id>:status; after a lost answer it is found, brought up to date and kept', async () => {
    slack.dropAnswer('chat.postMessage', 1);
    await messenger.changed(backfillId);
    const [posted] = slack.messagesIn(INCIDENT);
    expect(posted?.metadata?.event_payload).toEqual({ intent: `bf${backfillId}:status`, backfill_id: backfillId });
    const statusTs = async () => (await engine.ctx.pool.query<{ ts: string | null }>('SELECT status_ts AS ts FROM backfill.backfills WHERE id = $1::bigint', [backfillId])).rows[0]?.ts;
    try {
      expect(await statusTs()).toBeNull();
      await messenger.changed(backfillId);
      expect(slack.messagesIn(INCIDENT)).toHaveLength(1);
      expect(await statusTs()).toBe(posted?.ts);
      // The one found in the history may show an older status: it is updated in place.
      expect(slack.callsTo('chat.update').map((c) => c.params.ts)).toEqual([posted?.ts]);
    } finally {
      await engine.ctx.pool.query('UPDATE backfill.backfills SET status_ts = NULL WHERE id = $1::bigint', [backfillId]);
    }
  });

  it('a reply in the incident thread is looked for in the thread (conversations.replies), not in the channel', async () => {
    await messenger.incidentNotice(backfillId, recorded('the thread'), intentKey(backfillId, 'notice', 'parent'));
    const parent = slack.messagesIn(INCIDENT)[0]?.ts ?? '';
    await engine.ctx.pool.query('UPDATE backfill.backfills SET status_ts = $2::text WHERE id = $1::bigint', [backfillId, parent]);
    try {
      const intent = intentKey(backfillId, 'reconciliation', 'end');
      slack.dropAnswer('chat.postMessage', 1);
      await caught(messenger.reportReconciliation(backfillId, intent));
      await messenger.reportReconciliation(backfillId, intent);
      expect(slack.messagesIn(INCIDENT).filter((m) => m.threadTs === parent)).toHaveLength(1);
      expect(historyReads().map((a) => [a.method, a.params.ts])).toEqual([['conversations.replies', parent]]);
      expect(await findMessageIntent(engine.ctx.pool, intent)).toMatchObject({ recovered: true });
    } finally {
      await engine.ctx.pool.query('UPDATE backfill.backfills SET status_ts = NULL WHERE id = $1::bigint', [backfillId]);
    }
  });

  it('a busy incident thread (250 replies): the lost reply is found on a later page, and posted once', async () => {
    await messenger.incidentNotice(backfillId, recorded('the thread'), intentKey(backfillId, 'notice', 'busy-parent'));
    const parent = slack.messagesIn(INCIDENT)[0]?.ts ?? '';
    // People talk in the incident thread: 250 replies before the bot's, more than any one page holds.
    const people = new WebClient('xoxb-test-token', { slackApiUrl: slack.url, logLevel: LogLevel.ERROR });
    for (let i = 0; i < 250; i += 1) await people.chat.postMessage({ channel: INCIDENT, thread_ts: parent, text: `reply ${i}` });
    await engine.ctx.pool.query('UPDATE backfill.backfills SET status_ts = $2::text WHERE id = $1::bigint', [backfillId, parent]);
    try {
      const intent = intentKey(backfillId, 'reconciliation', 'busy');
      slack.dropAnswer('chat.postMessage', 1);
      await caught(messenger.reportReconciliation(backfillId, intent));
      await messenger.reportReconciliation(backfillId, intent);
      const carrying = slack.messagesIn(INCIDENT).filter((m) => m.threadTs === parent && JSON.stringify(m.metadata ?? {}).includes(intent));
      expect(carrying).toHaveLength(1);
      // The parent, the 250 replies and the one lost answer: the retry posted nothing.
      expect(posts()).toHaveLength(252);
      // It was found by following next_cursor past the first page.
      const reads = historyReads();
      expect(reads.length).toBeGreaterThanOrEqual(2);
      expect(reads.every((a) => a.method === 'conversations.replies' && a.params.ts === parent)).toBe(true);
      expect(reads[0]?.params.cursor).toBeUndefined();
      expect(reads.slice(1).every((a) => typeof a.params.cursor === 'string' && a.params.cursor !== '')).toBe(true);
      expect(await findMessageIntent(engine.ctx.pool, intent)).toMatchObject({ ts: carrying[0]?.ts, recovered: true });
    } finally {
      await engine.ctx.pool.query('UPDATE backfill.backfills SET status_ts = NULL WHERE id = $1::bigint', [backfillId]);
    }
  });

  it('a 500 before the post fails the attempt; the retry posts exactly one message', async () => {
    slack.failHttp('chat.postMessage', 1, 500);
    const message = ownerMessage('announce');
    expect(await caught(messenger.announce(message))).toBeInstanceOf(webApi.WebAPIHTTPError);
    expect(slack.messagesIn(DM)).toHaveLength(0);
    const landed = await messenger.announce(message);
    expect(slack.messagesIn(DM).map((m) => m.ts)).toEqual([landed.ts]);
    expect(posts().map((a) => a.status)).toEqual([500, 200]);
  });

  it('reads are still retried by the client: a 500 on conversations.open costs no attempt', async () => {
    slack.failHttp('conversations.open', 1, 500);
    await messenger.announce(ownerMessage('announce'));
    expect(slack.messagesIn(DM)).toHaveLength(1);
  });

  it('a 429 is waited out (Retry-After) inside the attempt, and still one message', async () => {
    slack.rateLimit('chat.postMessage', 1, 1);
    const started = Date.now();
    await messenger.directMessage(OWNER, recorded('Your numbers are real now.'), 'cu1:settlement_report:2026-11');
    expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
    expect(posts().map((a) => a.status)).toEqual([429, 200]);
    expect(slack.messagesIn(DM)).toHaveLength(1);
    expect(await findMessageIntent(engine.ctx.pool, 'cu1:settlement_report:2026-11')).toMatchObject({ backfillId: null, channel: DM });
  });
});

describe('429s are a schedule', () => {
  it('waits as often as Slack says, through the caller\'s wait, and still posts one message', async () => {
    slack.rateLimit('chat.postMessage', 25, 0);
    const waits: number[] = [];
    await messenger.announce(ownerMessage('announce'), { waitOutRateLimit: async (seconds) => { waits.push(seconds); } });
    expect(waits).toHaveLength(25);
    expect(posts().map((a) => a.status)).toEqual([...Array<number>(25).fill(429), 200]);
    expect(slack.messagesIn(DM)).toHaveLength(1);
  });

  it('delivered by another attempt while this one waited (a takeover of a frozen worker): nothing more is posted', async () => {
    const message = ownerMessage('announce');
    slack.rateLimit('chat.postMessage', 1, 0);
    const other = new SlackMessenger(new WebClient('xoxb-test-token', { slackApiUrl: slack.url, logLevel: LogLevel.ERROR }), engine.ctx.pool, 0);
    let theirs: { channel: string; ts: string } | undefined;
    const ours = await messenger.announce(message, {
      waitOutRateLimit: async () => {
        // The takeover finds the intent row without a ts, nothing in the DM's history, and posts.
        theirs = await other.announce(message);
      },
    });
    expect(ours).toEqual(theirs);
    expect(slack.messagesIn(DM)).toHaveLength(1);
    expect(posts().map((a) => a.status)).toEqual([429, 200]);
  });

  it('a wait that throws (the step is no longer this worker\'s) ends the delivery: nothing is posted', async () => {
    slack.rateLimit('chat.postMessage', 1, 0);
    const lost = new BackfillError(ErrorCode.ClaimLost, 'the step was taken over');
    const failure = await caught(messenger.announce(ownerMessage('announce'), { waitOutRateLimit: async () => { throw lost; } }));
    expect(failure).toBe(lost);
    expect(slack.messagesIn(DM)).toHaveLength(0);
    expect(posts().map((a) => a.status)).toEqual([429]);
  });

  it('the sender confirms it may still send right before every try, after each wait too; a refusal posts nothing', async () => {
    slack.rateLimit('chat.postMessage', 2, 0);
    const asked: number[] = [];
    await messenger.announce(ownerMessage('announce'), { waitOutRateLimit: async () => undefined, confirmSending: async () => { asked.push(posts().length); } });
    // Asked before the first try and before each of the two after a 429, each time with nothing more posted since.
    expect(asked).toEqual([0, 1, 2]);
    expect(posts().map((a) => a.status)).toEqual([429, 429, 200]);

    slack.rateLimit('chat.postMessage', 1, 0);
    const lost = new BackfillError(ErrorCode.ClaimLost, 'the step was taken over while this worker was stopped');
    let confirmed = 0;
    const failure = await caught(messenger.announce(ownerMessage('notify'), {
      waitOutRateLimit: async () => undefined,
      confirmSending: async () => { confirmed += 1; if (confirmed > 1) throw lost; },
    }));
    expect(failure).toBe(lost);
    expect(posts().map((a) => a.status)).toEqual([429, 429, 200, 429]);
  });
});

describe('permanent Slack errors are facts', () => {
  it.each(['conversations.open', 'chat.postMessage'])('user_not_found on %s: BackfillError undeliverable, asked once', async (method) => {
    slack.failWith(method, 1, 'user_not_found');
    const message = ownerMessage('announce');
    const error = await caught(messenger.announce(message));

    expect(isBackfillError(error, ErrorCode.Undeliverable)).toBe(true);
    expect((error as BackfillError).details).toMatchObject({ slackError: 'user_not_found', user: OWNER });
    expect((error as BackfillError).message).toMatch(/Slack cannot deliver .* to user <@U07SETTLE>: it answered user_not_found/);
    expect(slack.attempts.filter((a) => a.method === method)).toHaveLength(1);
    expect(slack.messagesIn(DM)).toHaveLength(0);
    // Slack answered, so nothing was posted: no intent row is left to send a retry into the history.
    expect(await findMessageIntent(engine.ctx.pool, message.intent)).toBeUndefined();
  });

  it('an archived incident channel is undeliverable too, and names the channel', async () => {
    slack.failWith('chat.postMessage', 1, 'is_archived');
    const error = await caught(messenger.incidentNotice(backfillId, recorded('notice'), intentKey(backfillId, 'notice', 'x')));
    expect(isBackfillError(error, ErrorCode.Undeliverable)).toBe(true);
    expect((error as BackfillError).details).toMatchObject({ slackError: 'is_archived', channel: INCIDENT });
  });

  it('a platform error that is not permanent is left as Slack gave it, for the job to retry', async () => {
    slack.failWith('chat.postMessage', 1, 'fatal_error');
    const error = await caught(messenger.announce(ownerMessage('announce')));
    expect(isBackfillError(error)).toBe(false);
    expect(error).toBeInstanceOf(webApi.WebAPIPlatformError);
    expect(await messenger.announce(ownerMessage('announce'))).toMatchObject({ channel: DM });
    expect(slack.messagesIn(DM)).toHaveLength(1);
  });
});

describe('the RecordingMessenger of the core tests keeps the same promise', () => {
  it('delivers each intent once, and failNext throws the given error the given number of times', async () => {
    const recording = new RecordingMessenger();
    const message = ownerMessage('announce');
    const refusal = new BackfillError(ErrorCode.Undeliverable, 'Slack cannot deliver it', { details: { slackError: 'user_not_found' } });
    recording.failNext('announce', refusal, 2);

    await expect(recording.announce(message)).rejects.toBe(refusal);
    await expect(recording.announce(message)).rejects.toBe(refusal);
    await recording.announce(message);
    await recording.announce(message);
    await recording.reportDiff(backfillId, intentKey(backfillId, 'diff', 'orders'));

    expect(recording.announced).toEqual([{ ...message, text: 'Backfill of orders moves your signed figure.' }]);
    expect(recording.duplicatesSuppressed).toBe(1);
    expect(recording.diffs).toEqual([backfillId]);
    expect(recording.deliveries).toEqual([
      { method: 'announce', intent: message.intent },
      { method: 'reportDiff', intent: intentKey(backfillId, 'diff', 'orders') },
    ]);
  });
});
