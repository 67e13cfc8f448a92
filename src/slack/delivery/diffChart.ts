import type { webApi } from '@slack/bolt';
import { diffChartIntent } from '../../db/diffCharts.js';
import { recordEvent } from '../../db/events.js';
import { findMessageIntent, forgetUndeliveredIntent, insertMessageIntent, recordMessageDelivered } from '../../db/messageIntents.js';
import type { Pool } from '../../db/pool.js';
import type { BackfillReport } from '../../core/file/status.js';
import type { DeliveryOptions } from '../../core/messenger.js';
import { diffChartPng } from '../../views/diffChart.js';
import { answeredWithoutPosting, rateLimitedFor, slackPlatformError } from './deliveryErrors.js';
import { findInConversation } from './conversationSearch.js';

type WebClient = webApi.WebClient;

// The diff chart goes to the incident thread with the diff message, once per intent, as the messages do
// (src/slack/delivery/messenger.ts, deliverOnce): the intent is a row before the upload; the row gets the file id when
// Slack has shared the file; a row without one sends a retry to the thread to look for the file by its name
// before uploading again. Uploading is three calls (files.getUploadURLExternal, the POST of the bytes,
// files.completeUploadExternal) and only the last one shares the file, so an attempt that died before it
// left nothing anyone can see.

export interface ChartClients {
  pool: Pool;
  /** Reads the thread (conversations.replies); its own retries are harmless for a read. */
  client: WebClient;
  /** Uploads, with the Web API client's retries off: a retried completeUploadExternal could share twice. */
  poster: WebClient;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** "backfill-1-diff.png" for intent bf1:report:diff: one name per intent, which is how a retry recognises it. */
function diffChartFilename(backfillId: number, diffIntent: string): string {
  const step = (diffIntent.split(':').at(-1) ?? 'diff').replace(/[^A-Za-z0-9_-]/g, '-');
  return `backfill-${backfillId}-${step}.png`;
}

/**
 * Uploads the report's diff chart to its incident thread unless this intent's chart is there already.
 * A Slack refusal (ok:false: uploads disabled, the scope missing, the channel gone) does not fail the step:
 * the diff message carries the figures, so the refusal is recorded in the timeline and the run goes on.
 * Anything else (a 5xx, a lost answer) fails the step, whose retry finds or finishes the upload.
 */
export async function uploadDiffChartOnce(clients: ChartClients, report: BackfillReport, diffIntent: string, options: DeliveryOptions = {}): Promise<void> {
  const { backfill } = report;
  const channel = backfill.incidentChannel;
  if (!channel) return;
  const intent = diffChartIntent(diffIntent);
  const filename = diffChartFilename(backfill.id, diffIntent);
  const threadTs = backfill.statusTs ?? undefined;
  const earlier = await findMessageIntent(clients.pool, intent);
  if (earlier?.ts) return;
  if (earlier) {
    const fileId = await findSharedFile(clients.client, channel, threadTs, filename);
    if (fileId) {
      await recordMessageDelivered(clients.pool, { intent, channel, ts: fileId, recovered: true });
      return;
    }
  } else if (!(await insertMessageIntent(clients.pool, { intent, backfillId: backfill.id, channel }))) {
    throw new Error(`another attempt is uploading ${intent} right now; this one stops and will be retried`);
  }
  const chart = await diffChartPng(report);
  const file = {
    channel_id: channel,
    file: chart.png,
    filename,
    title: `Backfill #${backfill.id} diff chart`,
    alt_text: chart.altText,
    initial_comment: `Diff chart of backfill #${backfill.id}: per partition the total before and after; each signed figure against the corrected one.`,
  };
  let fileId: string;
  try {
    fileId = await upload(clients.poster, threadTs ? { ...file, thread_ts: threadTs } : file, options);
  } catch (error) {
    if (!answeredWithoutPosting(error)) throw error;
    await forgetUndeliveredIntent(clients.pool, intent);
    const slackError = slackPlatformError(error);
    if (slackError === undefined) throw error;
    await recordEvent(clients.pool, { backfillId: backfill.id, actor: 'backfill-bot', kind: 'undeliverable', detail: { what: 'diff chart', intent, channel, slackError } });
    return;
  }
  await recordMessageDelivered(clients.pool, { intent, channel, ts: fileId, recovered: false });
}

/**
 * filesUploadV2 through the posting client, waiting out every 429 (Slack shared nothing) as long as Slack asks,
 * through the step's wait when it gives one (src/core/messenger.ts DeliveryOptions): a rate limit is a schedule,
 * never a reason to fail the report. The file id is nested one level deeper than the method's type suggests
 * (node-slack-sdk #1803): files[0].files[0].id.
 */
async function upload(poster: WebClient, args: webApi.FilesUploadV2Arguments, options: DeliveryOptions): Promise<string> {
  for (;;) {
    // Before every try, as for a message (src/slack/delivery/messenger.ts postMessage): a step that lost its claim uploads nothing.
    await options.confirmSending?.();
    try {
      const result = await poster.filesUploadV2(args);
      const fileId = result.files[0]?.files?.[0]?.id;
      if (!fileId) throw new Error('files.completeUploadExternal answered ok without a file id');
      return fileId;
    } catch (error) {
      const retryAfter = rateLimitedFor(error);
      if (retryAfter === undefined) throw error;
      await (options.waitOutRateLimit ?? ((seconds: number) => sleep(seconds * 1000)))(retryAfter);
    }
  }
}

/** The id of a file called `filename` shared in the thread (or, without one, the channel), if it is there. */
async function findSharedFile(client: WebClient, channel: string, threadTs: string | undefined, filename: string): Promise<string | undefined> {
  // Every page of a busy thread: the chart an earlier attempt shared may be its 250th reply.
  return findInConversation(client, { channel, threadTs }, (message) => message.files?.find((f) => f.name === filename)?.id || undefined);
}
