// chat.*: posting, updating, deleting and ephemeral messages, kept as entries for the history methods and the
// transcript.

import { conversationFor, isRec, str, type Rec } from '../params.js';
import { BOT_ID, content, messageKey, type EmulatorState, type MessageEntry } from '../state.js';
import type { MethodHandler } from './index.js';

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

/** A message's permalink, as Slack words it for a workspace (the domain is the emulator's team). */
function chatGetPermalink(state: EmulatorState, params: Rec): Rec {
  const channel = str(params.channel);
  const ts = str(params.message_ts);
  const entry = channel === undefined || ts === undefined ? undefined : state.messages.get(messageKey(channel, ts));
  if (!entry || entry.deleted || channel === undefined || ts === undefined) return { ok: false, error: 'message_not_found' };
  return { ok: true, channel, permalink: `https://harborlight.slack.com/archives/${channel}/p${ts.replace('.', '')}` };
}

export const CHAT_METHODS: Record<string, MethodHandler> = {
  'chat.postMessage': chatPostMessage,
  'chat.update': chatUpdate,
  'chat.delete': chatDelete,
  'chat.postEphemeral': chatPostEphemeral,
  'chat.getPermalink': chatGetPermalink,
};
