import type { webApi } from '@slack/bolt';
import type { Pool } from '../db/pool.js';
import { recordEvent } from '../db/events.js';
import type { Messenger, OwnerMessage } from '../core/steps.js';
import { loadBackfillReport } from '../core/status.js';
import { buildIncidentPackage, incidentPackageFiles } from '../core/incidentPackage.js';
import { announcementMessage, diffMessage, reconciliationMessage, statusMessage, type Message } from '../views/blocks.js';
import { loadReconciliation } from '../core/reconciliationReport.js';

type WebClient = webApi.WebClient;

interface Refresh {
  running: Promise<void>;
  dirty: boolean;
}

/**
 * Delivers the core's messages through the Slack Web API: announcements as DMs with buttons, the status
 * message in the incident channel (posted once, then updated in place), the diff, reminders.
 * 429s are absorbed by the Web API client (it waits Retry-After and retries); anything else fails the step,
 * which BullMQ retries, and a step once done is never sent again.
 */
export class SlackMessenger implements Messenger {
  private readonly refreshing = new Map<number, Refresh>();
  private readonly dmChannels = new Map<string, string>();

  constructor(private readonly client: WebClient, private readonly pool: Pool, private readonly throttleMs: number) {}

  async openDm(user: string): Promise<string> {
    const known = this.dmChannels.get(user);
    if (known) return known;
    const opened = await this.client.conversations.open({ users: user });
    const channel = opened.channel?.id;
    if (!channel) throw new Error(`conversations.open gave no channel for ${user}`);
    this.dmChannels.set(user, channel);
    return channel;
  }

  async announce(message: OwnerMessage): Promise<{ channel: string; ts: string }> {
    const channel = await this.openDm(message.owner);
    const posted = await this.client.chat.postMessage({ channel, ...announcementMessage(message, message.text) });
    return { channel: posted.channel ?? channel, ts: posted.ts ?? '' };
  }

  async remind(message: OwnerMessage): Promise<void> {
    const channel = await this.openDm(message.owner);
    await this.client.chat.postMessage({ channel, ...announcementMessage(message, message.text, { reminder: true }) });
    await this.postToIncident(message.backfillId,
      `:bell: <@${message.owner}> has not acknowledged backfill #${message.backfillId} (${message.consumer}) yet; the announcement was sent again.`);
  }

  async notifyOwner(message: OwnerMessage): Promise<void> {
    const channel = await this.openDm(message.owner);
    await this.client.chat.postMessage({ channel, text: message.text });
  }

  async directMessage(user: string, text: string): Promise<void> {
    await this.client.chat.postMessage({ channel: await this.openDm(user), text });
  }

  /** The reconciliation report, as a reply in the incident thread (under the status message). */
  async reportReconciliation(backfillId: number): Promise<void> {
    const report = await loadBackfillReport(this.pool, backfillId);
    const { incidentChannel, statusTs } = report.backfill;
    if (!incidentChannel) return;
    const rows = await loadReconciliation(this.pool, backfillId);
    await this.client.chat.postMessage({ channel: incidentChannel, ...(statusTs ? { thread_ts: statusTs } : {}), ...reconciliationMessage(report.backfill, rows) });
  }

  async reportDiff(backfillId: number): Promise<void> {
    const report = await loadBackfillReport(this.pool, backfillId);
    if (!report.backfill.incidentChannel) return;
    await this.client.chat.postMessage({ channel: report.backfill.incidentChannel, ...diffMessage(report) });
  }

  async updateMessage(channel: string, ts: string, message: Message): Promise<void> {
    await this.client.chat.update({ channel, ts, ...message });
  }

  /**
   * Uploads the incident package (Markdown and JSON, the same facts) to the backfill's incident thread.
   * Returns the channel, or undefined when the backfill has no incident channel.
   */
  async uploadIncidentPackage(backfillId: number): Promise<string | undefined> {
    const pkg = await buildIncidentPackage(this.pool, backfillId);
    const { rows } = await this.pool.query<{ channel: string | null; ts: string | null }>(
      'SELECT incident_channel AS channel, status_ts AS ts FROM backfill.backfills WHERE id = $1::bigint', [backfillId]);
    const channel = rows[0]?.channel;
    if (!channel) return undefined;
    const files = incidentPackageFiles(pkg).map((file) => ({ content: file.content, filename: file.filename, title: file.title }));
    await this.client.filesUploadV2({
      channel_id: channel,
      ...(rows[0]?.ts ? { thread_ts: rows[0].ts } : {}),
      initial_comment: `Incident package of backfill #${backfillId}: the log row and the whole timeline, as Markdown and as JSON.`,
      file_uploads: files,
    });
    await recordEvent(this.pool, { backfillId, actor: 'backfill-bot', kind: 'package_uploaded', detail: { channel, files: files.map((f) => f.filename) } });
    return channel;
  }

  /** A plain message in the backfill's incident channel (a hold, a cancel, a reminder flag). */
  async postToIncident(backfillId: number, text: string): Promise<void> {
    const { rows } = await this.pool.query<{ channel: string | null }>('SELECT incident_channel AS channel FROM backfill.backfills WHERE id = $1::bigint', [backfillId]);
    const channel = rows[0]?.channel;
    if (channel) await this.client.chat.postMessage({ channel, text });
  }

  /**
   * Re-renders the status message. Calls coalesce: one refresh at a time per backfill, at most one per
   * throttle interval, and a change that arrives during a refresh triggers exactly one more.
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
        entry.dirty = false;
        await this.refreshStatus(backfillId).catch((error: unknown) => {
          console.error(`status message of backfill #${backfillId}: ${(error as Error).message}`);
        });
        if (entry.dirty && this.throttleMs > 0) await new Promise((resolve) => setTimeout(resolve, this.throttleMs));
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
    const message = statusMessage(report);
    if (statusTs) {
      await this.client.chat.update({ channel: incidentChannel, ts: statusTs, ...message });
      return;
    }
    const posted = await this.client.chat.postMessage({ channel: incidentChannel, ...message });
    await this.pool.query('UPDATE backfill.backfills SET status_ts = $2::text WHERE id = $1::bigint AND status_ts IS NULL', [backfillId, posted.ts]);
    await recordEvent(this.pool, { backfillId, actor: 'backfill-bot', kind: 'status_posted', detail: { channel: incidentChannel, ts: posted.ts } });
  }
}
