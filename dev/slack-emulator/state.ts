// Everything one emulator holds: the calls it recorded, what was posted (as entries, in order, for the history
// methods and the transcript), the bytes uploaded, and the faults it was told to fake.

import { FaultScript } from './faults.js';
import { str, type Rec } from './params.js';

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

/** A file as a shared-file message lists it. */
export interface SharedFile {
  id: string;
  title: string;
  name: string;
}

export interface Content {
  text?: string;
  blocks?: unknown;
  attachments?: unknown;
}

export type Entry =
  | ({ kind: 'message'; channel: string; ts: string; threadTs?: string; edits: number; deleted: boolean; metadata?: Rec } & Content)
  | ({ kind: 'ephemeral'; channel: string; user: string; ts: string; threadTs?: string } & Content)
  | { kind: 'file'; channel: string; ts: string; threadTs?: string; comment?: string; files: SharedFile[] }
  | { kind: 'response'; id: string; body: unknown }
  | { kind: 'home'; user: string; view: unknown; publishes: number };

export type MessageEntry = Extract<Entry, { kind: 'message' }>;
export type FileEntry = Extract<Entry, { kind: 'file' }>;
export type HomeEntry = Extract<Entry, { kind: 'home' }>;

const BASE_SECONDS = 1764480000;
export const BOT_ID = 'BBOT';

export const messageKey = (channel: string, ts: string): string => `${channel}\u0000${ts}`;

/** What a call's params put on screen: its text, blocks and attachments. */
export function content(params: Rec): Content {
  const result: Content = {};
  const text = str(params.text);
  if (text !== undefined) result.text = text;
  if (params.blocks !== undefined) result.blocks = params.blocks;
  if (params.attachments !== undefined) result.attachments = params.attachments;
  return result;
}

export class EmulatorState {
  readonly botUserId: string;
  readonly teamId: string;
  /** http://127.0.0.1:PORT, set once the server listens (before any request can arrive). */
  origin = '';
  readonly calls: RecordedCall[] = [];
  readonly attempts: RecordedCall[] = [];
  readonly responses: { path: string; body: unknown }[] = [];
  readonly uploads = new Map<string, Buffer>();
  readonly faults = new FaultScript();
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
