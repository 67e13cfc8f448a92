// A local stand-in for the Slack Web API (and for response_url and file-upload targets), served by node:http on
// 127.0.0.1 with an ephemeral port. Tests and `npm run demo` point `clientOptions.slackApiUrl` at `emulator.url`.
// It records every call, can be told to answer 429 / 5xx / ok:false or to lose its answer after doing the work
// (faults.ts), serves the conversations' history (with message metadata and shared files, methods/), keeps the
// bytes uploaded to its upload URLs (server.ts), and renders what a person would have seen (transcript.ts).
// No vitest imports here: the demo runs this folder under tsx.

import { faultControls } from './faults.js';
import { conversationFor } from './params.js';
import { createEmulatorServer, listen } from './server.js';
import { EmulatorState, type RecordedCall } from './state.js';
import { renderTranscript } from './transcript.js';

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

// The SlackEmulator handed to tests and the demo: plain closures over the state, so its methods can be passed
// around or destructured.

/** "chat.postMessage ×2, auth.test ×1", or "none". */
function tally(from: RecordedCall[]): string {
  const counts = new Map<string, number>();
  for (const call of from) counts.set(call.method, (counts.get(call.method) ?? 0) + 1);
  return counts.size === 0 ? 'none' : [...counts].map(([name, n]) => `${name} ×${n}`).join(', ');
}

function callRecords(state: EmulatorState): Pick<SlackEmulator, 'responseUrl' | 'callsTo'> {
  return {
    responseUrl(id?: string): string {
      // The counter moves on every call, even when an id is given.
      const generated = state.nextResponseId();
      return `${state.origin}/response/${encodeURIComponent(id ?? generated)}`;
    },
    callsTo(method: string): RecordedCall[] {
      return state.calls.filter((call) => call.method === method);
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
    ...callRecords(state),
    ...faultControls(state.faults),
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
