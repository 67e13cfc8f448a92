import type { webApi } from '@slack/bolt';
import { buildIncidentPackage } from '../../core/file/incidentPackage.js';
import { findIncidentThread } from '../../db/backfills.js';
import { recordEvent } from '../../db/events.js';
import { findMessageIntent, forgetUndeliveredIntent, insertMessageIntent, recordMessageDelivered, type MessageIntent } from '../../db/messageIntents.js';
import { findPackageVersion, takeOverStaleUpload } from '../../db/packageUploads.js';
import type { Pool } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { incidentPackageFiles } from '../../views/incidentPackage.js';
import type { PackageWhere } from '../../views/replies.js';
import { answeredWithoutPosting, rateLimitedFor } from './deliveryErrors.js';
import { findInConversation } from './conversationSearch.js';

type WebClient = webApi.WebClient;

// `/backfill log <id>` uploads the incident package to the backfill's incident thread at most once per version
// of what it says (src/db/packageUploads.ts): anyone may ask, as often as they like, and the thread gets one
// upload per change. The intent row comes first (INSERT … ON CONFLICT DO NOTHING), so of requests arriving
// together exactly one builds and uploads; the others answer where it is going. The package is built only by
// that one, and at most MAX_CONCURRENT_BUILDS at once in a process, so memory does not grow with the requests.

/** How long an upload without a file id is taken for one still under way, before a request takes it over. */
const UPLOAD_LEASE_MS = 2 * 60_000;
/** Packages built at once in this process (one per backfill and change; the rest wait their turn). */
const MAX_CONCURRENT_BUILDS = 2;

/**
 * uploaded: this request uploaded it; unchanged: nothing changed since it was uploaded (where that upload is);
 * uploading: another request is uploading this version right now; no_channel: started from the CLI.
 */
export type PackageUpload = PackageWhere;

export interface PackageClients {
  pool: Pool;
  /** Reads the thread (conversations.replies) to find an upload whose answer was lost. */
  client: WebClient;
  /** Uploads, its retries off: a retried files.completeUploadExternal could share twice. */
  poster: WebClient;
}

let building = 0;
const waiting: (() => void)[] = [];

/** Runs `work` when fewer than MAX_CONCURRENT_BUILDS others are running. */
async function oneOfFewBuilds<T>(work: () => Promise<T>): Promise<T> {
  if (building >= MAX_CONCURRENT_BUILDS) await new Promise<void>((resolve) => waiting.push(resolve));
  building += 1;
  try {
    return await work();
  } finally {
    building -= 1;
    waiting.shift()?.();
  }
}

const packageIntent = (backfillId: number, version: string): string => `bf${backfillId}:package:${version.slice(0, 16)}`;

const comment = (backfillId: number, version: string) =>
  `Incident package of backfill #${backfillId} (version ${version.slice(0, 8)}): the log row and the whole timeline, as Markdown and as JSON.`;

export async function uploadIncidentPackageOnce(clients: PackageClients, backfillId: number): Promise<PackageUpload> {
  const version = await findPackageVersion(clients.pool, backfillId);
  if (version === undefined) throw new BackfillError(ErrorCode.UnknownBackfill, `There is no backfill #${backfillId}. \`/backfill status\` lists the recent ones.`);
  const thread = await findIncidentThread(clients.pool, backfillId);
  const channel = thread?.channel;
  if (!channel) return { how: 'no_channel' };
  const threadTs = thread.ts ?? undefined;
  const intent = packageIntent(backfillId, version);
  const earlier = await findMessageIntent(clients.pool, intent);
  if (earlier?.ts) return unchanged(earlier, channel);
  if (earlier) {
    // An earlier attempt wrote the row and has not said where the file landed: under way, unless it is older than
    // the lease (its process died, or Slack's answer was lost); then one request takes it over and looks first.
    if (!(await takeOverStaleUpload(clients.pool, intent, UPLOAD_LEASE_MS))) return { how: 'uploading', channel };
    const found = await findSharedPackage(clients.client, channel, threadTs, comment(backfillId, version));
    if (found) {
      await recordMessageDelivered(clients.pool, { intent, channel, ts: found, recovered: true });
      return { how: 'unchanged', channel, fileId: found, uploadedAt: earlier.createdAt };
    }
  } else if (!(await insertMessageIntent(clients.pool, { intent, backfillId, channel }))) {
    return { how: 'uploading', channel };
  }
  const fileId = await oneOfFewBuilds(() => upload(clients, { backfillId, version, intent, channel, threadTs }));
  return { how: 'uploaded', channel, fileId };
}

function unchanged(row: MessageIntent, channel: string): PackageUpload {
  return { how: 'unchanged', channel: row.channel || channel, fileId: row.ts ?? '', uploadedAt: row.deliveredAt ?? row.createdAt };
}

async function upload(clients: PackageClients, to: { backfillId: number; version: string; intent: string; channel: string; threadTs: string | undefined }): Promise<string> {
  const pkg = await buildIncidentPackage(clients.pool, to.backfillId);
  const files = incidentPackageFiles(pkg).map((file) => ({ content: file.content, filename: file.filename, title: file.title }));
  let fileId: string | undefined;
  try {
    const result = await clients.poster.filesUploadV2({
      channel_id: to.channel,
      ...(to.threadTs ? { thread_ts: to.threadTs } : {}),
      initial_comment: comment(to.backfillId, to.version),
      file_uploads: files,
    });
    // Nested one level deeper than the method's type says (node-slack-sdk #1803): files[0].files[0].id.
    fileId = result.files[0]?.files?.[0]?.id;
  } catch (error) {
    // Slack answered, so nothing was shared: the row goes, and the next request uploads.
    if (answeredWithoutPosting(error)) {
      await forgetUndeliveredIntent(clients.pool, to.intent);
      const wait = rateLimitedFor(error);
      if (wait !== undefined) {
        throw new BackfillError(ErrorCode.Undeliverable, `Slack asked the bot to wait ${wait} s before uploading more; nothing was uploaded. Ask again in a minute.`, { cause: error });
      }
    }
    throw error;
  }
  if (!fileId) throw new Error('files.completeUploadExternal answered ok without a file id');
  await recordMessageDelivered(clients.pool, { intent: to.intent, channel: to.channel, ts: fileId, recovered: false });
  await recordEvent(clients.pool, {
    backfillId: to.backfillId, actor: 'backfill-bot', kind: 'package_uploaded',
    detail: { channel: to.channel, files: files.map((f) => f.filename), fileId, version: to.version.slice(0, 8) },
  });
  return fileId;
}

/** The id of the package's file in the thread (or channel), recognised by its comment, which names the version. */
async function findSharedPackage(client: WebClient, channel: string, threadTs: string | undefined, text: string): Promise<string | undefined> {
  // Every page of the thread: a busy incident thread puts the package well past the first hundred replies.
  return findInConversation(client, { channel, threadTs }, (message) => (message.text === text ? message.files?.[0]?.id || undefined : undefined));
}
