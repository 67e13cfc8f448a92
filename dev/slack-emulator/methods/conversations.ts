// conversations.*: opening a DM, and reading a conversation's history and a thread's replies, paged with
// cursors as on Slack.

import { conversationFor, flag, str, type Rec } from '../params.js';
import { messageKey, type EmulatorState } from '../state.js';
import type { MethodHandler } from './index.js';

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

export const CONVERSATIONS_METHODS: Record<string, MethodHandler> = {
  'conversations.open': conversationsOpen,
  'conversations.history': conversationsHistory,
  'conversations.replies': conversationsReplies,
};
