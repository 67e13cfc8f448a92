// A local stand-in for the Slack Web API (and for response_url and file-upload targets), served by node:http on
// 127.0.0.1 with an ephemeral port. Tests and `npm run demo` point `clientOptions.slackApiUrl` at `emulator.url`.
// It records every call, can be told to answer 429 / 5xx / ok:false or to lose its answer after doing the work,
// serves the conversations' history (with message metadata and shared files), keeps the bytes uploaded to its
// upload URLs, and renders what a person would have seen.
// No vitest imports here: the demo runs this file under tsx.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedCall {
  method: string;
  /** Form (or JSON / multipart) fields; the JSON-stringified ones (blocks, view, files, attachments, …) parsed. */
  params: Record<string, unknown>;
  /** Date.now() when the request arrived. */
  at: number;
  /** HTTP status the emulator answered with (0: it closed the connection without an answer, see dropAnswer). */
  status: number;
  /** The JSON body the emulator answered with. */
  response: Record<string, unknown>;
}

export interface SlackEmulator {
  /** Base for `clientOptions.slackApiUrl`, ending in '/api/'. */
  url: string;
  /** http://127.0.0.1:PORT (for response_url endpoints). */
  origin: string;
  botUserId: string;
  teamId: string;
  /** Every call that got an HTTP 200 answer, ok:true or ok:false (not the 429/5xx ones). */
  calls: RecordedCall[];
  /** Every attempt, including the ones answered 429 / 5xx and the unauthenticated ones. */
  attempts: RecordedCall[];
  /** POSTs to `${origin}/response/<id>` (response_url targets); `body` is the parsed JSON. */
  responses: { path: string; body: unknown }[];
  /** Bytes POSTed to the upload URLs handed out by files.getUploadURLExternal, by file id. */
  uploads: Map<string, Buffer>;
  /** A fresh response_url pointing at the emulator. */
  responseUrl(id?: string): string;
  callsTo(method: string): RecordedCall[];
  /**
   * Next `times` calls of `method` answer HTTP 429 with Retry-After: retryAfterSeconds; with `channel`, only
   * the calls to that conversation (chat.postMessage is limited per channel on Slack, about one a second).
   */
  rateLimit(method: string, times: number, retryAfterSeconds: number, channel?: string): void;
  /** Next `times` calls answer HTTP `status` (e.g. 500). */
  failHttp(method: string, times: number, status: number): void;
  /** Next `times` calls answer 200 { ok:false, error }. */
  failWith(method: string, times: number, error: string): void;
  /**
   * Next `times` calls do their work (a chat.postMessage posts its message) and then lose the answer: HTTP
   * `answer` (default 500), or with 'hangup' the connection is closed without one. The client sees a failure
   * although the message exists, as after a crash or a timeout between Slack's answer and the caller's commit.
   * Such calls are in `attempts` (status 500 or 0 for a hangup), not in `calls`.
   */
  dropAnswer(method: string, times: number, answer?: number | 'hangup'): void;
  /** The messages of a conversation that are there now (not deleted), oldest first, replies included. */
  messagesIn(channel: string): PostedMessage[];
  /** Members returned by usergroups.users.list for `usergroup` (default: none). */
  setUsergroup(id: string, users: string[]): void;
  /**
   * Resolves with all recorded calls of `method` once there are at least `count` (default 1) of them in `calls`
   * (HTTP 200, ok:true or ok:false). Polls; rejects after timeoutMs (default 10000) listing the methods seen.
   */
  waitFor(method: string, count?: number, timeoutMs?: number): Promise<RecordedCall[]>;
  /**
   * Messages as a person would see them: per channel, each chat.postMessage with its chat.update replacements
   * applied in place, rendered from blocks to plain text; ephemeral messages, shared files, response_url replies
   * and the App Home views too.
   */
  transcript(): string;
  /** Forgets calls, messages, responses, uploads, usergroups and pending failures (timestamps keep increasing). */
  reset(): void;
  close(): Promise<void>;
}

export interface PostedMessage {
  channel: string;
  ts: string;
  threadTs?: string;
  text?: string;
  /** The `metadata` it was posted with ({ event_type, event_payload }), as Slack keeps it. */
  metadata?: Record<string, unknown>;
}

type Rec = Record<string, unknown>;

type Fault =
  | { kind: 'rate'; retryAfterSeconds: number; channel?: string }
  | { kind: 'http'; status: number }
  | { kind: 'error'; error: string }
  | { kind: 'drop'; answer: number | 'hangup' };

/** A file as a shared-file message lists it. */
interface SharedFile {
  id: string;
  title: string;
  name: string;
}

interface Content {
  text?: string;
  blocks?: unknown;
  attachments?: unknown;
}

type Entry =
  | ({ kind: 'message'; channel: string; ts: string; threadTs?: string; edits: number; deleted: boolean; metadata?: Rec } & Content)
  | ({ kind: 'ephemeral'; channel: string; user: string; ts: string; threadTs?: string } & Content)
  | { kind: 'file'; channel: string; ts: string; threadTs?: string; comment?: string; files: SharedFile[] }
  | { kind: 'response'; id: string; body: unknown }
  | { kind: 'home'; user: string; view: unknown; publishes: number };

/** Form fields web-api sends JSON-stringified that tests want as objects. */
const JSON_FIELDS = new Set([
  'blocks',
  'attachments',
  'view',
  'files',
  'metadata',
  'unfurls',
  'user_auth_blocks',
  'file_uploads',
]);

const BASE_SECONDS = 1764480000;
const BOT_ID = 'BBOT';
const TEAM_NAME = 'Harborlight';

const isRec = (value: unknown): value is Rec => typeof value === 'object' && value !== null && !Array.isArray(value);

function str(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return undefined;
}

const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

/** A boolean argument as web-api sends it: true in JSON, 'true' (or '1') in a form. */
const flag = (value: unknown): boolean => value === true || value === 'true' || value === '1';

function parseJsonFields(params: Rec): Rec {
  for (const [key, value] of Object.entries(params)) {
    if (JSON_FIELDS.has(key) && typeof value === 'string') {
      try {
        params[key] = JSON.parse(value) as unknown;
      } catch {
        // left as sent: Slack would answer invalid_blocks_format or similar, the test can see the raw string
      }
    }
  }
  return params;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)));
  return Buffer.concat(chunks);
}

interface ParsedBody {
  fields: Rec;
  files: Buffer[];
  invalid: boolean;
}

async function parseBody(contentType: string, raw: Buffer): Promise<ParsedBody> {
  const type = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  const fields: Rec = {};
  const files: Buffer[] = [];
  if (raw.length === 0) return { fields, files, invalid: false };
  if (type === 'application/json') {
    try {
      const parsed: unknown = JSON.parse(raw.toString('utf8'));
      if (!isRec(parsed)) return { fields, files, invalid: true };
      return { fields: { ...parsed }, files, invalid: false };
    } catch {
      return { fields, files, invalid: true };
    }
  }
  if (type === 'multipart/form-data') {
    try {
      const form = await new Response(new Uint8Array(raw), { headers: { 'content-type': contentType } }).formData();
      for (const [key, value] of form.entries()) {
        if (typeof value === 'string') {
          fields[key] = value;
        } else {
          const bytes = Buffer.from(await value.arrayBuffer());
          fields[key] = bytes;
          files.push(bytes);
        }
      }
      return { fields, files, invalid: false };
    } catch {
      return { fields, files, invalid: true };
    }
  }
  // application/x-www-form-urlencoded, or anything else web-api might send: treat as a form.
  for (const [key, value] of new URLSearchParams(raw.toString('utf8'))) fields[key] = value;
  return { fields, files, invalid: false };
}

// ---------------------------------------------------------------------------------------------------------------
// Rendering Block Kit to plain text

function textOf(value: unknown): string {
  if (typeof value === 'string') return value;
  if (isRec(value)) return str(value.text) ?? '';
  return '';
}

function renderElement(element: unknown): string {
  if (!isRec(element)) return '';
  switch (element.type) {
    case 'button':
      return `[${textOf(element.text)}]`;
    case 'image':
      return `[image: ${str(element.alt_text) ?? ''}]`;
    case 'plain_text':
    case 'mrkdwn':
      return textOf(element);
    case 'overflow':
      return '[…]';
    case 'datepicker':
      return `[${str(element.initial_date) ?? textOf(element.placeholder)} ▾]`;
    case 'checkboxes':
    case 'radio_buttons':
      return list(element.options)
        .map((option) => `( ) ${isRec(option) ? textOf(option.text) : ''}`)
        .join(' ');
    default: {
      const selected = isRec(element.initial_option) ? textOf(element.initial_option.text) : '';
      const label = selected || textOf(element.placeholder) || str(element.type) || 'element';
      return `[${label} ▾]`;
    }
  }
}

function renderRichText(value: unknown): string {
  if (!isRec(value)) return '';
  switch (value.type) {
    case 'text':
      return str(value.text) ?? '';
    case 'link':
      return str(value.text) ?? str(value.url) ?? '';
    case 'user':
      return `<@${str(value.user_id) ?? ''}>`;
    case 'channel':
      return `<#${str(value.channel_id) ?? ''}>`;
    case 'usergroup':
      return `<!subteam^${str(value.usergroup_id) ?? ''}>`;
    case 'emoji':
      return `:${str(value.name) ?? ''}:`;
    case 'broadcast':
      return `<!${str(value.range) ?? ''}>`;
    case 'date':
      return str(value.fallback) ?? '';
    case 'rich_text_list':
      return list(value.elements)
        .map((item) => `• ${renderRichText(item)}`)
        .join('\n');
    default:
      return list(value.elements).map(renderRichText).join('');
  }
}

function renderTableCell(cell: unknown): string {
  if (!isRec(cell)) return '';
  if (cell.type === 'rich_text') return renderRichText(cell);
  return str(cell.text) ?? str(cell.value) ?? '';
}

function renderBlock(block: unknown): string[] {
  if (!isRec(block)) return [];
  switch (block.type) {
    case 'header':
      return [textOf(block.text)];
    case 'section': {
      const lines: string[] = [];
      const text = textOf(block.text);
      const accessory = block.accessory === undefined ? '' : renderElement(block.accessory);
      if (text) lines.push(...text.split('\n'));
      for (const field of list(block.fields)) lines.push(...textOf(field).split('\n'));
      if (accessory) {
        if (lines.length === 0) lines.push(accessory);
        else lines[lines.length - 1] = `${lines[lines.length - 1] ?? ''} ${accessory}`;
      }
      return lines;
    }
    case 'context':
      return [list(block.elements).map(renderElement).join(' ')];
    case 'actions':
      return [list(block.elements).map(renderElement).join(' ')];
    case 'divider':
      return ['----------'];
    case 'image':
      return [`[image: ${str(block.alt_text) ?? ''}]`];
    case 'markdown':
      return (str(block.text) ?? '').split('\n');
    case 'rich_text':
      return renderRichText(block).split('\n');
    case 'input':
      return [`${textOf(block.label)}: ${renderElement(block.element)}`];
    case 'table':
      return list(block.rows).map((row) => list(row).map(renderTableCell).join(' | '));
    default:
      return [`[${str(block.type) ?? 'unknown'} block]`];
  }
}

function renderContent(content: Content): string[] {
  const lines: string[] = [];
  const blocks = list(content.blocks);
  if (blocks.length > 0) {
    for (const block of blocks) lines.push(...renderBlock(block));
  } else if (content.text) {
    lines.push(...content.text.split('\n'));
  }
  for (const attachment of list(content.attachments)) {
    if (!isRec(attachment)) continue;
    const inner: string[] = [];
    const pretext = str(attachment.pretext);
    if (pretext) inner.push(pretext);
    const attachmentBlocks = list(attachment.blocks);
    if (attachmentBlocks.length > 0) {
      for (const block of attachmentBlocks) inner.push(...renderBlock(block));
    } else {
      const title = str(attachment.title);
      if (title) inner.push(title);
      const text = str(attachment.text) ?? str(attachment.fallback);
      if (text) inner.push(...text.split('\n'));
      for (const field of list(attachment.fields)) {
        if (isRec(field)) inner.push(`${str(field.title) ?? ''}: ${str(field.value) ?? ''}`);
      }
    }
    lines.push(...inner.map((line) => `| ${line}`));
  }
  return lines;
}

const indent = (lines: string[]): string[] => lines.map((line) => (line ? `  ${line}` : ''));

/** What a call's params put on screen: its text, blocks and attachments. */
function content(params: Rec): Content {
  const result: Content = {};
  const text = str(params.text);
  if (text !== undefined) result.text = text;
  if (params.blocks !== undefined) result.blocks = params.blocks;
  if (params.attachments !== undefined) result.attachments = params.attachments;
  return result;
}

// ---------------------------------------------------------------------------------------------------------------
// The emulator's state

type MessageEntry = Extract<Entry, { kind: 'message' }>;
type FileEntry = Extract<Entry, { kind: 'file' }>;
type HomeEntry = Extract<Entry, { kind: 'home' }>;

const messageKey = (channel: string, ts: string): string => `${channel}\u0000${ts}`;
/** Posting to a user ID lands in the bot's DM with that user, as on Slack; the answer carries the D… id. */
const conversationFor = (channel: string): string => (/^[UW][A-Z0-9]+$/.test(channel) ? `D${channel}` : channel);

/** `limit` as Slack reads it: default 100, at most 999. */
function pageLimit(value: unknown): number {
  const limit = Number(str(value) ?? '100');
  return Number.isInteger(limit) && limit > 0 ? Math.min(limit, 999) : 100;
}

const CURSOR_PREFIX = 'next_offset:';

/**
 * One page of `items` as Slack's cursor-based pagination gives it: `limit` items from where `cursor` points,
 * `has_more`, and `response_metadata.next_cursor` (an opaque string; empty on the last page). A cursor this
 * emulator did not hand out is `invalid_cursor`, as on Slack.
 */
function cursorPage<T>(items: readonly T[], params: Rec): { ok: true; page: T[]; has_more: boolean; next_cursor: string } | { ok: false; error: string } {
  const cursor = str(params.cursor);
  let offset = 0;
  if (cursor !== undefined && cursor !== '') {
    const decoded = Buffer.from(cursor, 'base64').toString('utf8');
    const parsed = decoded.startsWith(CURSOR_PREFIX) ? Number(decoded.slice(CURSOR_PREFIX.length)) : Number.NaN;
    if (!Number.isInteger(parsed) || parsed < 0) return { ok: false, error: 'invalid_cursor' };
    offset = parsed;
  }
  const limit = pageLimit(params.limit);
  const end = offset + limit;
  const hasMore = items.length > end;
  return {
    ok: true,
    page: items.slice(offset, end),
    has_more: hasMore,
    next_cursor: hasMore ? Buffer.from(`${CURSOR_PREFIX}${end}`).toString('base64') : '',
  };
}

/** Everything one emulator holds: what it recorded, what was posted, the failures it was told to fake. */
class EmulatorState {
  readonly botUserId: string;
  readonly teamId: string;
  /** http://127.0.0.1:PORT, set once the server listens (before any request can arrive). */
  origin = '';
  readonly calls: RecordedCall[] = [];
  readonly attempts: RecordedCall[] = [];
  readonly responses: { path: string; body: unknown }[] = [];
  readonly uploads = new Map<string, Buffer>();
  readonly faults = new Map<string, { fault: Fault; remaining: number }[]>();
  readonly usergroups = new Map<string, string[]>();
  readonly pendingFiles = new Map<string, { filename: string; length: number }>();
  entries: Entry[] = [];
  messages = new Map<string, MessageEntry>();

  // Counters survive reset(), so a ts or file id is never handed out twice by one emulator.
  private tsCounter = 0;
  private fileCounter = 0;
  private viewCounter = 0;
  private responseCounter = 0;

  constructor(botUserId: string, teamId: string) {
    this.botUserId = botUserId;
    this.teamId = teamId;
  }

  nextTs(): string {
    this.tsCounter += 1;
    const micros = this.tsCounter * 100;
    const seconds = BASE_SECONDS + Math.floor(micros / 1_000_000);
    return `${seconds}.${String(micros % 1_000_000).padStart(6, '0')}`;
  }

  nextFileId(): string {
    this.fileCounter += 1;
    return `F${String(this.fileCounter).padStart(10, '0')}`;
  }

  nextViewNumber(): number {
    this.viewCounter += 1;
    return this.viewCounter;
  }

  nextResponseId(): string {
    this.responseCounter += 1;
    return `r${this.responseCounter}`;
  }

  addFault(method: string, times: number, fault: Fault): void {
    if (!Number.isInteger(times) || times < 0) throw new Error(`times must be a non-negative integer, got ${times}`);
    if (times === 0) return;
    const queue = this.faults.get(method) ?? [];
    queue.push({ fault, remaining: times });
    this.faults.set(method, queue);
  }

  /** The first pending fault of `method` that applies to this call (a rate limit may name one conversation). */
  takeFault(method: string, params: Rec): Fault | undefined {
    const queue = this.faults.get(method);
    if (!queue) return undefined;
    const requested = str(params.channel);
    const index = queue.findIndex(({ fault }) =>
      fault.kind !== 'rate' || fault.channel === undefined || (requested !== undefined && conversationFor(requested) === fault.channel));
    const found = queue[index];
    if (!found) return undefined;
    found.remaining -= 1;
    if (found.remaining <= 0) queue.splice(index, 1);
    return found.fault;
  }

  /** The messages of a conversation that are still there, oldest first. */
  postedIn(channel: string): MessageEntry[] {
    return this.entries.filter(
      (entry): entry is MessageEntry => entry.kind === 'message' && entry.channel === channel && !entry.deleted,
    );
  }

  /** A message as conversations.history shows it; its metadata only when include_all_metadata was asked. */
  historyMessage(entry: MessageEntry, withMetadata: boolean): Rec {
    return {
      type: 'message',
      user: this.botUserId,
      bot_id: BOT_ID,
      ts: entry.ts,
      ...(entry.threadTs ? { thread_ts: entry.threadTs } : {}),
      ...(entry.text !== undefined ? { text: entry.text } : {}),
      ...(entry.blocks !== undefined ? { blocks: entry.blocks } : {}),
      ...(entry.attachments !== undefined ? { attachments: entry.attachments } : {}),
      ...(withMetadata && entry.metadata ? { metadata: entry.metadata } : {}),
    };
  }

  /** Files shared in a conversation (files.completeUploadExternal with a channel), oldest first. */
  filesSharedIn(channel: string): FileEntry[] {
    return this.entries.filter((entry): entry is FileEntry => entry.kind === 'file' && entry.channel === channel);
  }

  /**
   * A file share as conversations.history and conversations.replies show it on Slack: a message by the bot
   * with the comment as its text and the files listed, `upload: true`.
   */
  fileShareMessage(entry: FileEntry): Rec {
    return {
      type: 'message',
      user: this.botUserId,
      bot_id: BOT_ID,
      ts: entry.ts,
      ...(entry.threadTs ? { thread_ts: entry.threadTs } : {}),
      text: entry.comment ?? '',
      upload: true,
      files: entry.files.map((file) => ({ id: file.id, name: file.name, title: file.title })),
    };
  }

  reset(): void {
    this.calls.length = 0;
    this.attempts.length = 0;
    this.responses.length = 0;
    this.uploads.clear();
    this.faults.clear();
    this.usergroups.clear();
    this.pendingFiles.clear();
    this.entries = [];
    this.messages = new Map();
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The Web API methods: one handler per method, grouped by family, dispatched by name from METHODS

type MethodHandler = (state: EmulatorState, params: Rec) => Rec;

function authTest(state: EmulatorState): Rec {
  return {
    ok: true,
    url: 'https://harborlight.slack.com/',
    team: TEAM_NAME,
    user: 'backfill-bot',
    team_id: state.teamId,
    user_id: state.botUserId,
    bot_id: BOT_ID,
    is_enterprise_install: false,
  };
}

function conversationsOpen(_state: EmulatorState, params: Rec): Rec {
  const users = (str(params.users) ?? '')
    .split(',')
    .map((user) => user.trim())
    .filter(Boolean);
  const existing = str(params.channel);
  if (existing) return { ok: true, channel: { id: existing } };
  if (users.length === 0) return { ok: false, error: 'users_list_not_supplied' };
  const id = users.length === 1 ? `D${users[0] ?? ''}` : `G${[...users].sort().join('')}`;
  return { ok: true, no_op: false, already_open: false, channel: { id } };
}

function conversationsHistory(state: EmulatorState, params: Rec): Rec {
  const requested = str(params.channel);
  if (!requested) return { ok: false, error: 'channel_not_found' };
  const channel = conversationFor(requested);
  const latest = str(params.latest);
  const oldest = str(params.oldest);
  const inclusive = flag(params.inclusive);
  const inWindow = (ts: string): boolean =>
    (latest === undefined || (inclusive ? Number(ts) <= Number(latest) : Number(ts) < Number(latest))) &&
    (oldest === undefined || (inclusive ? Number(ts) >= Number(oldest) : Number(ts) > Number(oldest)));
  // The channel's own messages and file shares, newest first; replies stay in their threads (conversations.replies).
  const withMetadata = flag(params.include_all_metadata);
  const found = [
    ...state.postedIn(channel).map((entry) => ({ entry, show: () => state.historyMessage(entry, withMetadata) })),
    ...state.filesSharedIn(channel).map((entry) => ({ entry, show: () => state.fileShareMessage(entry) })),
  ]
    .filter(({ entry }) => entry.threadTs === undefined && inWindow(entry.ts))
    .sort((a, b) => Number(b.entry.ts) - Number(a.entry.ts));
  const paged = cursorPage(found, params);
  if (!paged.ok) return paged;
  return {
    ok: true,
    messages: paged.page.map(({ show }) => show()),
    has_more: paged.has_more,
    pin_count: 0,
    response_metadata: { next_cursor: paged.next_cursor },
  };
}

function conversationsReplies(state: EmulatorState, params: Rec): Rec {
  const requested = str(params.channel);
  const parentTs = str(params.ts);
  if (!requested) return { ok: false, error: 'channel_not_found' };
  const channel = conversationFor(requested);
  const parent = parentTs === undefined ? undefined : state.messages.get(messageKey(channel, parentTs));
  if (!parent || parent.deleted) return { ok: false, error: 'thread_not_found' };
  // The parent first, then its replies (messages and file shares), oldest first.
  const withMetadata = flag(params.include_all_metadata);
  const replies = [
    ...state.postedIn(channel).filter((entry) => entry.threadTs === parentTs).map((entry) => ({ ts: entry.ts, message: state.historyMessage(entry, withMetadata) })),
    ...state.filesSharedIn(channel).filter((entry) => entry.threadTs === parentTs).map((entry) => ({ ts: entry.ts, message: state.fileShareMessage(entry) })),
  ].sort((a, b) => Number(a.ts) - Number(b.ts));
  // The thread is one collection, the parent first: the first page starts with it, the pages after go on with
  // the replies (a lookup that reads only the first page misses the replies of a busy thread).
  const thread = [state.historyMessage(parent, withMetadata), ...replies.map((reply) => reply.message)];
  const paged = cursorPage(thread, params);
  if (!paged.ok) return paged;
  return {
    ok: true,
    messages: paged.page,
    has_more: paged.has_more,
    response_metadata: { next_cursor: paged.next_cursor },
  };
}

const CONVERSATIONS_METHODS: Record<string, MethodHandler> = {
  'conversations.open': conversationsOpen,
  'conversations.history': conversationsHistory,
  'conversations.replies': conversationsReplies,
};

function chatPostMessage(state: EmulatorState, params: Rec): Rec {
  const requested = str(params.channel);
  if (!requested) return { ok: false, error: 'channel_not_found' };
  const body = content(params);
  if (body.text === undefined && body.blocks === undefined && body.attachments === undefined) {
    return { ok: false, error: 'no_text' };
  }
  const channel = conversationFor(requested);
  const ts = state.nextTs();
  const threadTs = str(params.thread_ts);
  const metadata = isRec(params.metadata) ? params.metadata : undefined;
  const entry: MessageEntry = {
    kind: 'message',
    channel,
    ts,
    edits: 0,
    deleted: false,
    ...body,
    ...(threadTs ? { threadTs } : {}),
    ...(metadata ? { metadata } : {}),
  };
  state.entries.push(entry);
  state.messages.set(messageKey(channel, ts), entry);
  return { ok: true, channel, ts, message: state.historyMessage(entry, true) };
}

function chatUpdate(state: EmulatorState, params: Rec): Rec {
  const channel = str(params.channel);
  const ts = str(params.ts);
  if (!channel) return { ok: false, error: 'channel_not_found' };
  const entry = ts === undefined ? undefined : state.messages.get(messageKey(channel, ts));
  if (!entry || entry.deleted || ts === undefined) return { ok: false, error: 'message_not_found' };
  const next = content(params);
  // As on Slack: new blocks replace the old; text sent without blocks removes them.
  if (next.blocks !== undefined) entry.blocks = next.blocks;
  else if (next.text !== undefined) delete entry.blocks;
  if (next.text !== undefined) entry.text = next.text;
  if (next.attachments !== undefined) entry.attachments = next.attachments;
  entry.edits += 1;
  return {
    ok: true,
    channel,
    ts,
    text: entry.text ?? '',
    message: { type: 'message', user: state.botUserId, bot_id: BOT_ID, text: entry.text, blocks: entry.blocks },
  };
}

function chatDelete(state: EmulatorState, params: Rec): Rec {
  const channel = str(params.channel) ?? '';
  const ts = str(params.ts) ?? '';
  const entry = state.messages.get(messageKey(channel, ts));
  if (!entry || entry.deleted) return { ok: false, error: 'message_not_found' };
  entry.deleted = true;
  return { ok: true, channel, ts };
}

function chatPostEphemeral(state: EmulatorState, params: Rec): Rec {
  const channel = str(params.channel);
  const user = str(params.user);
  if (!channel) return { ok: false, error: 'channel_not_found' };
  if (!user) return { ok: false, error: 'user_not_found' };
  const ts = state.nextTs();
  const threadTs = str(params.thread_ts);
  state.entries.push({ kind: 'ephemeral', channel, user, ts, ...content(params), ...(threadTs ? { threadTs } : {}) });
  return { ok: true, message_ts: ts };
}

const CHAT_METHODS: Record<string, MethodHandler> = {
  'chat.postMessage': chatPostMessage,
  'chat.update': chatUpdate,
  'chat.delete': chatDelete,
  'chat.postEphemeral': chatPostEphemeral,
};

function viewsPublish(state: EmulatorState, params: Rec): Rec {
  const user = str(params.user_id);
  if (!user) return { ok: false, error: 'invalid_arguments' };
  if (!isRec(params.view)) return { ok: false, error: 'invalid_arguments' };
  const existing = state.entries.find((entry): entry is HomeEntry => entry.kind === 'home' && entry.user === user);
  if (existing) {
    existing.view = params.view;
    existing.publishes += 1;
  } else {
    state.entries.push({ kind: 'home', user, view: params.view, publishes: 1 });
  }
  const viewNumber = state.nextViewNumber();
  return {
    ok: true,
    view: { ...params.view, id: `VHOME${user}`, team_id: state.teamId, hash: `${Date.now()}.${viewNumber}` },
  };
}

/** views.open, views.push and views.update: nothing is shown, the view comes back with an id and a hash. */
function viewsShow(state: EmulatorState, params: Rec): Rec {
  if (!isRec(params.view)) return { ok: false, error: 'invalid_arguments' };
  const viewNumber = state.nextViewNumber();
  const id = str(params.view_id) ?? `V${String(viewNumber).padStart(8, '0')}`;
  return { ok: true, view: { ...params.view, id, team_id: state.teamId, hash: `${Date.now()}.${viewNumber}` } };
}

const VIEWS_METHODS: Record<string, MethodHandler> = {
  'views.publish': viewsPublish,
  'views.open': viewsShow,
  'views.push': viewsShow,
  'views.update': viewsShow,
};

function filesGetUploadUrlExternal(state: EmulatorState, params: Rec): Rec {
  const filename = str(params.filename);
  const length = Number(str(params.length));
  if (!filename || !Number.isFinite(length)) return { ok: false, error: 'invalid_arguments' };
  const fileId = state.nextFileId();
  state.pendingFiles.set(fileId, { filename, length });
  return { ok: true, upload_url: `${state.origin}/upload/${fileId}`, file_id: fileId };
}

function filesCompleteUploadExternal(state: EmulatorState, params: Rec): Rec {
  const requested = list(params.files);
  if (requested.length === 0) return { ok: false, error: 'invalid_arguments' };
  const files: { id: string; title: string; name: string; size: number }[] = [];
  for (const item of requested) {
    const id = isRec(item) ? str(item.id) : undefined;
    const pending = id === undefined ? undefined : state.pendingFiles.get(id);
    if (!id || !pending) return { ok: false, error: 'file_not_found' };
    const title = (isRec(item) ? str(item.title) : undefined) ?? pending.filename;
    files.push({ id, title, name: pending.filename, size: state.uploads.get(id)?.length ?? 0 });
  }
  const channel = str(params.channel_id) ?? str(params.channels)?.split(',')[0];
  if (channel) {
    const threadTs = str(params.thread_ts);
    const comment = str(params.initial_comment);
    state.entries.push({
      kind: 'file',
      channel: conversationFor(channel),
      ts: state.nextTs(),
      files: files.map(({ id, title, name }) => ({ id, title, name })),
      ...(threadTs ? { threadTs } : {}),
      ...(comment ? { comment } : {}),
    });
  }
  return { ok: true, files };
}

const FILES_METHODS: Record<string, MethodHandler> = {
  'files.getUploadURLExternal': filesGetUploadUrlExternal,
  'files.completeUploadExternal': filesCompleteUploadExternal,
};

function usergroupsUsersList(state: EmulatorState, params: Rec): Rec {
  return { ok: true, users: [...(state.usergroups.get(str(params.usergroup) ?? '') ?? [])] };
}

/** By method name; a Map, so a name like 'constructor' finds nothing. Any method not here answers { ok: true }. */
const METHODS = new Map<string, MethodHandler>(
  Object.entries({
    'auth.test': authTest,
    ...CONVERSATIONS_METHODS,
    ...CHAT_METHODS,
    ...VIEWS_METHODS,
    ...FILES_METHODS,
    'usergroups.users.list': usergroupsUsersList,
  }),
);

function handleMethod(state: EmulatorState, method: string, params: Rec): Rec {
  const handler = METHODS.get(method);
  return handler ? handler(state, params) : { ok: true };
}

// ---------------------------------------------------------------------------------------------------------------
// HTTP: the Web API, the upload URLs and the response_url targets

function send(res: ServerResponse, status: number, body: Rec, headers: Record<string, string> = {}): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(payload),
    ...headers,
  });
  res.end(payload);
}

function authorised(req: IncomingMessage, params: Rec): boolean {
  const header = req.headers.authorization ?? '';
  if (/^Bearer xoxb-\S+$/.test(header)) return true;
  const token = str(params.token);
  return token !== undefined && token.startsWith('xoxb-');
}

/** Records one attempt (and, when answered 200, one call) with the status and body it was answered with. */
type Recorder = (status: number, response: Rec) => RecordedCall;

async function handleApi(
  state: EmulatorState,
  req: IncomingMessage,
  res: ServerResponse,
  method: string,
  query: URLSearchParams,
): Promise<void> {
  const at = Date.now();
  const raw = await readBody(req);
  const parsed = await parseBody(req.headers['content-type'] ?? '', raw);
  const params: Rec = {};
  for (const [key, value] of query) params[key] = value;
  Object.assign(params, parsed.fields);
  parseJsonFields(params);

  const record: Recorder = (status, response) => {
    const call: RecordedCall = { method, params, at, status, response };
    state.attempts.push(call);
    if (status === 200) state.calls.push(call);
    return call;
  };

  if (parsed.invalid) {
    const json = (req.headers['content-type'] ?? '').toLowerCase().startsWith('application/json');
    const body = { ok: false, error: json ? 'invalid_json' : 'invalid_form_data' };
    record(200, body);
    send(res, 200, body);
    return;
  }
  if (!authorised(req, params)) {
    const body = { ok: false, error: 'not_authed' };
    record(200, body);
    send(res, 200, body);
    return;
  }
  answerApi(state, res, method, params, record);
}

/** Answers a well-formed, authenticated call: as the next pending fault for its method says, or by doing it. */
function answerApi(state: EmulatorState, res: ServerResponse, method: string, params: Rec, record: Recorder): void {
  const fault = state.takeFault(method, params);
  if (fault?.kind === 'rate') {
    const body = { ok: false, error: 'ratelimited' };
    record(429, body);
    send(res, 429, body, { 'retry-after': String(fault.retryAfterSeconds) });
    return;
  }
  if (fault?.kind === 'http') {
    const body = { ok: false, error: `http_${fault.status}` };
    record(fault.status, body);
    send(res, fault.status, body);
    return;
  }
  const body = fault?.kind === 'error' ? { ok: false, error: fault.error } : handleMethod(state, method, params);
  if (fault?.kind === 'drop') {
    // The work is done (a message posted); only the answer is lost.
    if (fault.answer === 'hangup') {
      record(0, body);
      res.socket?.destroy();
      return;
    }
    const lost = { ok: false, error: `http_${fault.answer}` };
    record(fault.answer, lost);
    send(res, fault.answer, lost);
    return;
  }
  record(200, body);
  send(res, 200, body);
}

async function handleUpload(
  state: EmulatorState,
  req: IncomingMessage,
  res: ServerResponse,
  fileId: string,
): Promise<void> {
  const raw = await readBody(req);
  if (!state.pendingFiles.has(fileId)) {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('file not found');
    return;
  }
  const contentType = req.headers['content-type'] ?? '';
  let bytes = raw;
  if (contentType.toLowerCase().startsWith('multipart/form-data')) {
    const parsed = await parseBody(contentType, raw);
    // web-api sends one multipart field, `body`, holding the bytes.
    const field = parsed.fields.body;
    bytes = Buffer.isBuffer(field) ? field : (parsed.files[0] ?? Buffer.from(str(field) ?? ''));
  }
  state.uploads.set(fileId, bytes);
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end(`OK - ${bytes.length}`);
}

async function handleResponseUrl(
  state: EmulatorState,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<void> {
  const raw = (await readBody(req)).toString('utf8');
  let body: unknown = raw;
  try {
    body = JSON.parse(raw) as unknown;
  } catch {
    // not JSON: kept as the raw string
  }
  state.responses.push({ path, body });
  state.entries.push({ kind: 'response', id: decodeURIComponent(path.slice('/response/'.length)), body });
  send(res, 200, { ok: true });
}

function createEmulatorServer(state: EmulatorState): Server {
  return createServer((req, res) => {
    const requestUrl = new URL(req.url ?? '/', 'http://127.0.0.1');
    const path = requestUrl.pathname;
    let work: Promise<void>;
    if (path.startsWith('/api/') && (req.method === 'POST' || req.method === 'GET')) {
      work = handleApi(state, req, res, decodeURIComponent(path.slice('/api/'.length)), requestUrl.searchParams);
    } else if (path.startsWith('/upload/') && req.method === 'POST') {
      work = handleUpload(state, req, res, decodeURIComponent(path.slice('/upload/'.length)));
    } else if (path.startsWith('/response/') && req.method === 'POST') {
      work = handleResponseUrl(state, req, res, path);
    } else {
      req.resume();
      send(res, 404, { ok: false, error: 'not_found' });
      return;
    }
    work.catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, { ok: false, error: 'emulator_failure', detail: String(error) });
      else res.destroy();
    });
  });
}

/** Listens on an ephemeral port of 127.0.0.1; resolves with the port. */
async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}

// ---------------------------------------------------------------------------------------------------------------
// The transcript: one section per channel, response_url and App Home, in order of first appearance

const threadNote = (threadTs: string | undefined): string => (threadTs ? `, in thread ${threadTs}` : '');

function renderMessageEntry(entry: MessageEntry): string[] {
  const notes = [entry.edits > 0 ? `edited ×${entry.edits}` : '', entry.threadTs ? `in thread ${entry.threadTs}` : '']
    .filter(Boolean)
    .join(', ');
  if (entry.deleted) return [`-- ${entry.ts} (deleted)`];
  return [`-- ${entry.ts}${notes ? ` (${notes})` : ''}`, ...indent(renderContent(entry))];
}

function renderEphemeralEntry(entry: Extract<Entry, { kind: 'ephemeral' }>): string[] {
  return [
    `-- ${entry.ts} (ephemeral, only ${entry.user} sees it${threadNote(entry.threadTs)})`,
    ...indent(renderContent(entry)),
  ];
}

function renderFileEntry(entry: Extract<Entry, { kind: 'file' }>): string[] {
  const where = entry.threadTs ? ` (in thread ${entry.threadTs})` : '';
  const lines = [`-- file${entry.files.length > 1 ? 's' : ''} shared${where}`];
  if (entry.comment) lines.push(...indent(entry.comment.split('\n')));
  lines.push(...indent(entry.files.map((file) => `[file: ${file.title} (${file.id})]`)));
  return lines;
}

function renderResponseEntry(entry: Extract<Entry, { kind: 'response' }>): string[] {
  const body = isRec(entry.body) ? entry.body : { text: str(entry.body) ?? '' };
  const flags = [
    str(body.response_type) ?? 'ephemeral',
    body.replace_original === true || body.replace_original === 'true' ? 'replace_original' : '',
    body.delete_original === true || body.delete_original === 'true' ? 'delete_original' : '',
  ]
    .filter(Boolean)
    .join(', ');
  return [`-- reply (${flags})`, ...indent(renderContent(content(body)))];
}

function renderHomeEntry(entry: HomeEntry): string[] {
  const view = isRec(entry.view) ? entry.view : {};
  return [`-- home view (published ×${entry.publishes})`, ...indent(renderContent({ blocks: view.blocks }))];
}

/** The title of the section an entry belongs in, and its lines there. */
function renderEntry(entry: Entry): { title: string; lines: string[] } {
  switch (entry.kind) {
    case 'message':
      return { title: entry.channel, lines: renderMessageEntry(entry) };
    case 'ephemeral':
      return { title: entry.channel, lines: renderEphemeralEntry(entry) };
    case 'file':
      return { title: entry.channel, lines: renderFileEntry(entry) };
    case 'response':
      return { title: `response_url ${entry.id}`, lines: renderResponseEntry(entry) };
    case 'home':
      return { title: `App Home of ${entry.user}`, lines: renderHomeEntry(entry) };
  }
}

function renderTranscript(entries: Entry[]): string {
  const sections = new Map<string, string[]>();
  for (const entry of entries) {
    const { title, lines } = renderEntry(entry);
    const section = sections.get(title);
    if (section) section.push(...lines);
    else sections.set(title, lines);
  }
  const out: string[] = [];
  for (const [title, lines] of sections) out.push(`=== ${title} ===`, ...lines, '');
  return out.join('\n');
}

// ---------------------------------------------------------------------------------------------------------------
// The SlackEmulator handed to tests and the demo: plain closures over the state, so its methods can be passed
// around or destructured

/** "chat.postMessage ×2, auth.test ×1", or "none". */
function tally(from: RecordedCall[]): string {
  const counts = new Map<string, number>();
  for (const call of from) counts.set(call.method, (counts.get(call.method) ?? 0) + 1);
  return counts.size === 0 ? 'none' : [...counts].map(([name, n]) => `${name} ×${n}`).join(', ');
}

function callControls(
  state: EmulatorState,
): Pick<SlackEmulator, 'responseUrl' | 'callsTo' | 'rateLimit' | 'failHttp' | 'failWith' | 'dropAnswer'> {
  return {
    responseUrl(id?: string): string {
      // The counter moves on every call, even when an id is given.
      const generated = state.nextResponseId();
      return `${state.origin}/response/${encodeURIComponent(id ?? generated)}`;
    },
    callsTo(method: string): RecordedCall[] {
      return state.calls.filter((call) => call.method === method);
    },
    rateLimit(method: string, times: number, retryAfterSeconds: number, channel?: string): void {
      state.addFault(method, times, { kind: 'rate', retryAfterSeconds, ...(channel === undefined ? {} : { channel: conversationFor(channel) }) });
    },
    failHttp(method: string, times: number, status: number): void {
      state.addFault(method, times, { kind: 'http', status });
    },
    failWith(method: string, times: number, error: string): void {
      state.addFault(method, times, { kind: 'error', error });
    },
    dropAnswer(method: string, times: number, answer: number | 'hangup' = 500): void {
      state.addFault(method, times, { kind: 'drop', answer });
    },
  };
}

function stateViews(
  state: EmulatorState,
): Pick<SlackEmulator, 'messagesIn' | 'setUsergroup' | 'waitFor' | 'transcript' | 'reset'> {
  return {
    messagesIn(channel: string): PostedMessage[] {
      return state.postedIn(conversationFor(channel)).map((entry) => ({
        channel: entry.channel,
        ts: entry.ts,
        ...(entry.threadTs ? { threadTs: entry.threadTs } : {}),
        ...(entry.text !== undefined ? { text: entry.text } : {}),
        ...(entry.metadata ? { metadata: entry.metadata } : {}),
      }));
    },
    setUsergroup(id: string, users: string[]): void {
      state.usergroups.set(id, [...users]);
    },
    async waitFor(method: string, count = 1, timeoutMs = 10_000): Promise<RecordedCall[]> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const matching = state.calls.filter((call) => call.method === method);
        if (matching.length >= count) return matching;
        if (Date.now() >= deadline) {
          const failed = state.attempts.filter((call) => call.status !== 200);
          throw new Error(
            `waitFor('${method}', ${count}) timed out after ${timeoutMs} ms with ${matching.length}. ` +
              `Calls seen: ${tally(state.calls)}. Attempts answered 429/5xx: ${tally(failed)}.`,
          );
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    transcript(): string {
      return renderTranscript(state.entries);
    },
    reset(): void {
      state.reset();
    },
  };
}

export async function startSlackEmulator(options: { botUserId?: string; teamId?: string } = {}): Promise<SlackEmulator> {
  const state = new EmulatorState(options.botUserId ?? 'UBOT', options.teamId ?? 'T0HARBOR');
  const server = createEmulatorServer(state);
  state.origin = `http://127.0.0.1:${await listen(server)}`;
  return {
    url: `${state.origin}/api/`,
    origin: state.origin,
    botUserId: state.botUserId,
    teamId: state.teamId,
    calls: state.calls,
    attempts: state.attempts,
    responses: state.responses,
    uploads: state.uploads,
    ...callControls(state),
    ...stateViews(state),
    async close(): Promise<void> {
      if (!server.listening) return;
      await new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      });
    },
  };
}
