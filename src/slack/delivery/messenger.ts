import { webApi } from '@slack/bolt';
import { logger } from '../../log.js';
import { findIncidentChannel, keepStatusTs, listBackfillConsumers } from '../../db/backfills.js';
import type { Pool } from '../../db/pool.js';
import { recordEvent } from '../../db/events.js';
import { findMessageIntent, forgetUndeliveredIntent, insertMessageIntent, recordMessageDelivered } from '../../db/messageIntents.js';
import { loadReconciliation } from '../../db/reconciliations.js';
import type { DeliveryOptions, EscalationMessage, EscalationReach, Landed, Messenger, OwnerMessage } from '../../core/messenger.js';
import { storedAnnouncement, type Notice } from '../../core/notices.js';
import { backticks, slackNoticeText } from '../../views/notices.js';
import { escalationText } from '../../views/waiting.js';
import { slackPerson } from '../../views/format.js';
import { slackText } from '../../markup.js';
import { BackfillError, ErrorCode, isBackfillError } from '../../errors.js';
import { loadBackfillReport } from '../../core/file/status.js';
import { announcementMessage, answeredAnnouncementMessage, diffMessage, escalationMessage, reconciliationMessage, statusMessage, textMessage, type Message } from '../../views/blocks.js';
import { answeredLine } from '../../views/replies.js';
import { answeredWithoutPosting, asUndeliverable, rateLimitedFor, type Recipient } from './deliveryErrors.js';
import { uploadDiffChartOnce } from './diffChart.js';
import { uploadIncidentPackageOnce, type PackageUpload } from './incidentPackageUpload.js';
import { redactingFetch } from './outgoing.js';
import { findInConversation } from './conversationSearch.js';

type WebClient = webApi.WebClient;

interface Refresh {
  running: Promise<void>;
  dirty: boolean;
}

/** A message a step sends: plain text, or text with blocks; a reply when thread_ts is set. */
interface Outgoing {
  text: string;
  blocks?: Message['blocks'];
  thread_ts?: string;
}

/** Where a delivery landed, and whether this call sent it or found it sent by an earlier attempt. */
interface Delivery extends Landed {
  how: 'sent' | 'recorded' | 'recovered';
}

/** The metadata event type on every message a step sends; its payload carries the intent. */
export const MESSAGE_EVENT_TYPE = 'backfill_bot_message';
const POST_TIMEOUT_MS = 15_000;

/** The intent of a backfill's status message in the incident channel (posted once, then updated). */
const statusIntent = (backfillId: number): string => `bf${backfillId}:status`;

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The client that posts step messages. Its own retries are off: the Web API client retries a 5xx or a lost
 * connection by posting again, and when Slack had posted the message before the answer was lost that is a
 * second message. Here a failed post fails the step; its retry searches the history before posting again.
 * A 429 (Slack posted nothing) is waited out in postMessage instead, Retry-After as Slack asked.
 */
export function postingClientFor(client: WebClient, shared: Pick<webApi.WebClientOptions, 'fetch' | 'logger'> = {}): WebClient {
  return new webApi.WebClient(client.token, {
    slackApiUrl: client.slackApiUrl,
    // The app's fetch (it counts failures for GET /metrics) and logger, when given; redacting either way, so a
    // posting client made without the app's fetch cannot send a secret (src/slack/delivery/outgoing.ts).
    ...shared,
    fetch: redactingFetch(shared.fetch ?? globalThis.fetch),
    retryConfig: { retries: 0 },
    rejectRateLimitedCalls: true,
    timeout: POST_TIMEOUT_MS,
  });
}

/**
 * Delivers the core's messages through the Slack Web API: announcements as DMs with buttons, the status
 * message in the incident channel (posted once, then updated in place), the diff, reminders, notices.
 *
 * Every message a step sends goes through deliverOnce and is sent at most once per intent, even when the step
 * is retried after a crash between Slack's answer and the commit: the intent is a row before the message goes
 * out, and a row without a ts sends the retry to the conversation's history first. A permanent Slack error
 * (user_not_found, is_archived, …) becomes a BackfillError `undeliverable`; anything else fails the step,
 * which BullMQ retries.
 */
export class SlackMessenger implements Messenger {
  private readonly refreshing = new Map<number, Refresh>();
  /** When each backfill's last status refresh ended (Date.now()): one number per backfill seen. */
  private readonly lastRefreshAt = new Map<number, number>();
  private readonly dmChannels = new Map<string, string>();

  constructor(
    private readonly client: WebClient,
    private readonly pool: Pool,
    private readonly throttleMs: number,
    private readonly poster: WebClient = postingClientFor(client),
  ) {}

  async openDm(user: string): Promise<string> {
    const known = this.dmChannels.get(user);
    if (known) return known;
    let opened: webApi.ConversationsOpenResponse;
    try {
      opened = await this.client.conversations.open({ users: user });
    } catch (error) {
      throw asUndeliverable(error, { user });
    }
    const channel = opened.channel?.id;
    if (!channel) throw new Error(`conversations.open gave no channel for ${user}`);
    this.dmChannels.set(user, channel);
    return channel;
  }

  async announce(message: OwnerMessage, options: DeliveryOptions = {}): Promise<Landed> {
    const { channel, ts } = await this.toOwner(message, announcementMessage(message, message.notice), options);
    return { channel, ts };
  }

  /** The announcement again, and a flag in the incident channel: two intents, `<intent>` and `<intent>:flag`. */
  async remind(message: OwnerMessage): Promise<void> {
    await this.toOwner(message, announcementMessage(message, message.notice, { reminder: true }));
    const channel = await this.incidentChannelOf(message.backfillId);
    if (!channel) return;
    await this.deliverOnce(`${message.intent}:flag`, message.backfillId, { channel }, {
      text: `:bell: <@${message.owner}> has not acknowledged backfill #${message.backfillId} (${message.consumer}) yet; the announcement was sent again.`,
    });
  }

  async notifyOwner(message: OwnerMessage, options: DeliveryOptions = {}): Promise<void> {
    await this.toOwner(message, { text: slackNoticeText(message.notice) }, options);
  }

  /**
   * One escalation step: a post in the channel, or a DM to each person (the delegates get the announcement with
   * its buttons). A person Slack refuses does not keep the others from being told; a step that reaches nobody is
   * undeliverable. A retry after a partial delivery re-sends nobody: each DM is its own intent.
   */
  async escalate(message: EscalationMessage): Promise<EscalationReach> {
    const words = escalationText(message, slackPerson, backticks, slackText);
    const { to } = message;
    if (to.kind === 'channel') {
      const landed = await this.deliverOnce(message.intent, message.backfillId, { channel: to.channel }, textMessage(words));
      return { users: [], channel: landed.channel, unreachable: [] };
    }
    const group = to.kind === 'oncall' && 'usergroup' in to ? to.usergroup : undefined;
    const users = to.kind === 'delegates' ? to.users : 'user' in to ? [to.user] : await this.membersOf(group ?? '');
    const outgoing = to.kind === 'delegates' ? escalationMessage(message, message.notice, words) : textMessage(words);
    const reach: EscalationReach = { users: [], unreachable: [] };
    for (const user of users) {
      try {
        await this.deliverOnce(`${message.intent}:${user}`, message.backfillId, { user }, outgoing);
        reach.users.push(user);
      } catch (error) {
        if (!isBackfillError(error) || error.code !== ErrorCode.Undeliverable) throw error;
        reach.unreachable.push({ user, slackError: typeof error.details.slackError === 'string' ? error.details.slackError : 'undeliverable' });
      }
    }
    if (reach.users.length > 0) return reach;
    if (users.length === 0) {
      throw new BackfillError(ErrorCode.Undeliverable, `The user group ${group ?? ''} has no members: nobody was told.`, { details: { slackError: 'no_members', intent: message.intent } });
    }
    const slackError = reach.unreachable[0]?.slackError ?? 'undeliverable';
    throw new BackfillError(ErrorCode.Undeliverable, `Slack cannot deliver the escalation ${message.intent} to anyone it names (${slackError}).`, { details: { slackError, intent: message.intent } });
  }

  /** Who is in the user group now (usergroups.users.list, the usergroups:read scope). */
  private async membersOf(usergroup: string): Promise<string[]> {
    return (await this.client.usergroups.users.list({ usergroup })).users ?? [];
  }

  async directMessage(user: string, notice: Notice, intent: string): Promise<void> {
    await this.deliverOnce(intent, null, { user }, { text: slackNoticeText(notice) });
  }

  /** The reconciliation report, as a reply in the incident thread (under the status message). */
  async reportReconciliation(backfillId: number, intent: string, options: DeliveryOptions = {}): Promise<void> {
    const report = await loadBackfillReport(this.pool, backfillId);
    const { incidentChannel, statusTs } = report.backfill;
    if (!incidentChannel) return;
    const rows = await loadReconciliation(this.pool, backfillId);
    const message: Outgoing = { ...reconciliationMessage(report.backfill, rows), ...(statusTs ? { thread_ts: statusTs } : {}) };
    await this.deliverOnce(intent, backfillId, { channel: incidentChannel }, message, options);
  }

  /** The diff message in the incident channel, then its chart (a PNG) in the incident thread; each once. */
  async reportDiff(backfillId: number, intent: string, options: DeliveryOptions = {}): Promise<void> {
    const report = await loadBackfillReport(this.pool, backfillId);
    if (!report.backfill.incidentChannel) return;
    await this.deliverOnce(intent, backfillId, { channel: report.backfill.incidentChannel }, diffMessage(report), options);
    await uploadDiffChartOnce({ pool: this.pool, client: this.client, poster: this.poster }, report, intent, options);
  }

  /** A notice in the incident channel; a backfill without one has nowhere to show it (its status still does). */
  async incidentNotice(backfillId: number, notice: Notice, intent: string): Promise<void> {
    const channel = await this.incidentChannelOf(backfillId);
    if (channel) await this.deliverOnce(intent, backfillId, { channel }, { text: slackNoticeText(notice) });
  }

  async updateMessage(channel: string, ts: string, message: Message): Promise<void> {
    await this.client.chat.update({ channel, ts, ...message });
  }

  /** An owner answered: their announcement keeps its facts and shows the answer where its buttons were. */
  async markAnswered(answer: { backfillId: number; consumer: string; action: 'acknowledge' | 'hold'; actor: string; at: Date }): Promise<void> {
    const row = (await listBackfillConsumers(this.pool, answer.backfillId)).find((c) => c.consumer === answer.consumer);
    if (!row?.messageChannel || !row.messageTs) return;
    const reference = { backfillId: answer.backfillId, consumer: answer.consumer };
    await this.updateMessage(row.messageChannel, row.messageTs, answeredAnnouncementMessage(reference, storedAnnouncement(row), answeredLine(answer)));
  }

  /**
   * Uploads the incident package (Markdown and JSON, the same facts) to the backfill's incident thread, once per
   * change of what it says (src/slack/delivery/incidentPackageUpload.ts); a repeat says where the last upload is.
   */
  async uploadIncidentPackage(backfillId: number): Promise<PackageUpload> {
    return uploadIncidentPackageOnce({ pool: this.pool, client: this.client, poster: this.poster }, backfillId);
  }

  /**
   * A plain message in the backfill's incident channel, answering a person's action (a hold, a cancel). Not a
   * step's message: the person sees the action happen once, so there is no intent to deliver once.
   */
  async postToIncident(backfillId: number, text: string): Promise<void> {
    const channel = await this.incidentChannelOf(backfillId);
    if (channel) await this.client.chat.postMessage({ channel, text });
  }

  /**
   * Re-renders the status message. Calls coalesce: one refresh at a time per backfill, at most one per
   * throttle interval, and a change that arrives during a refresh triggers exactly one more. The interval runs
   * from the end of the last refresh, also when it ended before this change came: a step finishing just after
   * it waits out the rest, so Slack never sees the message updated more often than STATUS_THROTTLE_MS allows.
   */
  async changed(backfillId: number): Promise<void> {
    const current = this.refreshing.get(backfillId);
    if (current) {
      current.dirty = true;
      return current.running;
    }
    const entry: Refresh = { running: Promise.resolve(), dirty: true };
    entry.running = (async () => {
      while (entry.dirty) {
        const wait = (this.lastRefreshAt.get(backfillId) ?? -Infinity) + this.throttleMs - Date.now();
        if (wait > 0) await sleep(wait);
        entry.dirty = false;
        await this.refreshStatus(backfillId).catch((error: unknown) => {
          logger().warn({ err: error, backfillId }, 'the status message could not be refreshed');
        });
        this.lastRefreshAt.set(backfillId, Date.now());
      }
      this.refreshing.delete(backfillId);
    })();
    this.refreshing.set(backfillId, entry);
    return entry.running;
  }

  private async refreshStatus(backfillId: number): Promise<void> {
    const report = await loadBackfillReport(this.pool, backfillId);
    const { incidentChannel, statusTs } = report.backfill;
    if (!incidentChannel) return;
    const message = statusMessage(report, new Date());
    if (statusTs) {
      await this.client.chat.update({ channel: incidentChannel, ts: statusTs, ...message });
      return;
    }
    const posted = await this.deliverOnce(statusIntent(backfillId), backfillId, { channel: incidentChannel }, message);
    // An earlier attempt posted it (and crashed before keeping the ts): it shows an older status.
    if (posted.how !== 'sent') await this.client.chat.update({ channel: posted.channel, ts: posted.ts, ...message });
    if (await keepStatusTs(this.pool, backfillId, posted.ts)) {
      await recordEvent(this.pool, { backfillId, actor: 'backfill-bot', kind: 'status_posted', detail: { channel: posted.channel, ts: posted.ts } });
    }
  }

  private async toOwner(message: OwnerMessage, outgoing: Outgoing, options: DeliveryOptions = {}): Promise<Delivery> {
    return this.deliverOnce(message.intent, message.backfillId, { user: message.owner }, outgoing, options);
  }

  private async incidentChannelOf(backfillId: number): Promise<string | undefined> {
    return findIncidentChannel(this.pool, backfillId);
  }

  /**
   * Sends `message` to `to` at most once for `intent`:
   * 1. a row with a ts: delivered before; nothing is sent.
   * 2. a row without one: an earlier attempt may have been posted before its answer was lost (a crash, a
   *    timeout, a 5xx after the post); if the conversation's history has a message carrying this intent in its
   *    metadata, that one is kept (recovered) and nothing is sent.
   * 3. otherwise the row is written and committed first, then the message is posted with the intent in its
   *    metadata, then the row gets the ts.
   * The rows go through the pool, not the step's transaction: they must outlive a step that rolls back.
   */
  private async deliverOnce(intent: string, backfillId: number | null, to: Recipient, message: Outgoing, options: DeliveryOptions = {}): Promise<Delivery> {
    const channel = 'user' in to ? await this.openDm(to.user) : to.channel;
    const earlier = await findMessageIntent(this.pool, intent);
    if (earlier?.ts) return { channel: earlier.channel, ts: earlier.ts, how: 'recorded' };
    if (earlier) {
      const ts = await this.findSent(earlier.channel, intent, message.thread_ts, to);
      if (ts) {
        await recordMessageDelivered(this.pool, { intent, channel: earlier.channel, ts, recovered: true });
        return { channel: earlier.channel, ts, how: 'recovered' };
      }
    } else if (!(await insertMessageIntent(this.pool, { intent, backfillId, channel }))) {
      // Written between our read and our insert: another attempt is posting it right now. Standing back and
      // failing this attempt lets its retry see that one's outcome.
      throw new Error(`another attempt is delivering ${intent} right now; this one stops and will be retried`);
    }
    const metadata = { event_type: MESSAGE_EVENT_TYPE, event_payload: { intent, ...(backfillId === null ? {} : { backfill_id: backfillId }) } };
    let posted: webApi.ChatPostMessageResponse;
    try {
      const answer = await this.postMessage({ channel, metadata, ...message }, intent, options);
      if ('recorded' in answer) return { channel: answer.recorded.channel, ts: answer.recorded.ts, how: 'recorded' };
      posted = answer.posted;
    } catch (error) {
      if (answeredWithoutPosting(error)) await forgetUndeliveredIntent(this.pool, intent);
      throw asUndeliverable(error, to, intent);
    }
    if (!posted.ts) throw new Error(`chat.postMessage answered ok without a ts for ${intent}`);
    const landed = posted.channel ?? channel;
    await recordMessageDelivered(this.pool, { intent, channel: landed, ts: posted.ts, recovered: false });
    return { channel: landed, ts: posted.ts, how: 'sent' };
  }

  /** The ts of a message carrying `intent` in the conversation (or the thread), however long it is. */
  private async findSent(channel: string, intent: string, threadTs: string | undefined, to: Recipient): Promise<string | undefined> {
    const carries = (payload: unknown) => isRecord(payload) && payload.intent === intent;
    try {
      // Replies are not in conversations.history: a message sent into a thread is looked for in that thread.
      return await findInConversation(this.client, { channel, threadTs, includeMetadata: true }, (m) =>
        (m.metadata?.event_type === MESSAGE_EVENT_TYPE && carries(m.metadata.event_payload) ? m.ts : undefined));
    } catch (error) {
      throw asUndeliverable(error, to, intent);
    }
  }

  /**
   * chat.postMessage through the posting client, waiting out every 429 as long as Slack asks, however many
   * there are: a 429 means Slack posted nothing and said when to come back, so trying again then cannot double
   * the message, and giving up would fail a backfill over a schedule. The wait is the caller's
   * (`waitOutRateLimit`: the step keeps its claim and says in the status who is still being told) or a plain
   * sleep.
   *
   * Right before every try the caller confirms it may still send (`confirmSending`: a step's claim, read in the
   * database), and after a wait the intent row is read again, last thing before the post: a worker that was
   * frozen in the wait and taken over sends nothing, whether the taker has delivered already (its delivery
   * stands) or not yet (the taker delivers). The checks and the post are not one atomic act, and what is left
   * between them is covered elsewhere: the intent row was committed before the first try (one row per intent,
   * ON CONFLICT DO NOTHING), so a taker never posts blind; it looks the conversation up by the intent
   * (findInConversation) and keeps a message this worker got out before it stopped. Only a process stopped
   * in the few statements between the last check and the request leaving, for longer than its lease, could
   * still post after the taker's lookup; its step then commits nothing (the commit's claim check, claim_lost).
   */
  private async postMessage(args: webApi.ChatPostMessageArguments, intent: string, options: DeliveryOptions):
  Promise<{ posted: webApi.ChatPostMessageResponse } | { recorded: { channel: string; ts: string } }> {
    for (let waited = false; ; waited = true) {
      await options.confirmSending?.();
      if (waited) {
        const meanwhile = await findMessageIntent(this.pool, intent);
        if (meanwhile?.ts) return { recorded: { channel: meanwhile.channel, ts: meanwhile.ts } };
      }
      try {
        return { posted: await this.poster.chat.postMessage(args) };
      } catch (error) {
        const retryAfter = rateLimitedFor(error);
        if (retryAfter === undefined) throw error;
        await (options.waitOutRateLimit ?? ((seconds: number) => sleep(seconds * 1000)))(retryAfter);
      }
    }
  }
}
