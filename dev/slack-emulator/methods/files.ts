// files.*: the external upload flow. getUploadURLExternal hands out an upload URL on the emulator (server.ts
// keeps the bytes POSTed to it); completeUploadExternal shares the files in a conversation.

import { conversationFor, isRec, list, str, type Rec } from '../params.js';
import type { EmulatorState } from '../state.js';
import type { MethodHandler } from './index.js';

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

export const FILES_METHODS: Record<string, MethodHandler> = {
  'files.getUploadURLExternal': filesGetUploadUrlExternal,
  'files.completeUploadExternal': filesCompleteUploadExternal,
};
