import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { promisify } from 'node:util';
import { gunzip } from 'node:zlib';
import type { CustomRoute } from '@slack/bolt';
import { lineageSenders, type LineageSender } from '../config.js';
import type { EngineContext } from '../core/context.js';
import { ingestLineageEvent, type IngestOutcome } from '../core/lineage/ingest.js';
import { describeError, isBackfillError, ErrorCode } from '../errors.js';
import { codePointLabel, hasLoneSurrogate } from '../markup.js';

// POST /lineage and POST /api/v1/lineage (the OpenLineage HTTP transport's default endpoint): OpenLineage events
// in, served by the Bolt HTTP receiver beside /slack/events. This module is the HTTP edge only (the token, the
// encoding, the size, the text, the JSON); what an event means is src/core/lineage/ingest.ts.
// Answers: 200 recorded / noted / duplicate / ignored (with the reason), 202 kept pending on a proposal, 400
// malformed (the message names the field; also a body that is not UTF-8, not gzip when it says so, or a string
// holding NUL, another control character or a lone surrogate), 401 no or wrong token, 403 a job outside the
// token's namespaces, 413 too large (as sent, or once decompressed), 415 not JSON or an encoding other than gzip,
// 429 past a sender's bound (Retry-After), 500 our fault (logged; nothing committed).

/** A RunEvent is a few kilobytes; this leaves room for large facets and refuses anything meant to exhaust us. */
export const MAX_BODY_BYTES = 1024 * 1024;

/** Where the route is served: the bot's own path, and the one OpenLineage clients post to unless told otherwise. */
const LINEAGE_PATHS = ['/lineage', '/api/v1/lineage'] as const;

const gunzipAsync = promisify(gunzip);

export interface LineageRouteDeps {
  /** Its config's LINEAGE_TOKENS and LINEAGE_TOKEN are the senders. None: no route (Bolt answers 404), since there is nobody the bot could trust. */
  ctx: EngineContext;
  /** A new proposal was created: tell the operators. Its failure is logged, never the sender's problem. */
  onProposal?: (proposalId: number) => Promise<void>;
  log?: (message: string) => void;
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
  headers?: Record<string, string>;
}

export function lineageRoutes(deps: LineageRouteDeps): CustomRoute[] {
  const senders = lineageSenders(deps.ctx.config);
  if (senders.length === 0) return [];
  return LINEAGE_PATHS.map((path): CustomRoute => ({
    path,
    method: ['POST'],
    handler: (req, res) => {
      answer(deps, senders, req).then((reply) => send(res, reply), (error: unknown) => {
        (deps.log ?? console.error)(`POST ${path}: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
        send(res, { status: 500, body: { error: 'Something went wrong on our side; nothing was recorded. The error is in the bot\'s log.' } });
      });
    },
  }));
}

const digest = (text: string) => createHash('sha256').update(text).digest();

/**
 * The sender whose token the Authorization header presents, or undefined. Every sender's token is compared, as
 * SHA-256 digests (so timingSafeEqual gets equal lengths), whichever matches: the time says nothing about which
 * token, or how much of one, was right.
 */
function senderOf(header: string | undefined, senders: readonly LineageSender[]): LineageSender | undefined {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  const presented = digest(match?.[1] ?? '');
  let found: LineageSender | undefined;
  for (const sender of senders) {
    const same = timingSafeEqual(presented, digest(sender.token));
    if (same && !found) found = sender;
  }
  return match?.[1] ? found : undefined;
}

async function answer(deps: LineageRouteDeps, senders: readonly LineageSender[], req: IncomingMessage): Promise<Answer> {
  const sender = senderOf(req.headers.authorization, senders);
  if (!sender) {
    req.resume();
    return { status: 401, body: { error: 'A bearer token is required: Authorization: Bearer <a token of LINEAGE_TOKENS, or LINEAGE_TOKEN>.' }, headers: { 'www-authenticate': 'Bearer realm="lineage"' } };
  }
  const type = req.headers['content-type'] ?? '';
  if (!/^application\/json\b/i.test(type)) {
    req.resume();
    return { status: 415, body: { error: `The body must be an OpenLineage event as JSON (Content-Type: application/json), not ${shownHeader(type) || 'untyped'}.` } };
  }
  const encoding = (req.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  if (!ENCODINGS.has(encoding)) {
    req.resume();
    return { status: 415, body: { error: `The body is encoded as ${shownHeader(encoding)}; send it as it is or with Content-Encoding: gzip (the OpenLineage client's compression: gzip).` } };
  }
  const sent = await readBody(req);
  if (sent === 'too_large') return { status: 413, body: { error: `The body is larger than ${MAX_BODY_BYTES} bytes; send one event per request.` } };
  const bytes = encoding === 'identity' ? sent : await decompressed(sent);
  if (bytes === 'too_large') return { status: 413, body: { error: `The body is larger than ${MAX_BODY_BYTES} bytes once decompressed; send one event per request.` } };
  if (bytes === 'not_gzip') return { status: 400, body: { error: 'The body says Content-Encoding: gzip but is not gzip data; nothing was recorded.' } };
  let body: string;
  try {
    // fatal: a byte sequence that is not UTF-8 is refused, not silently turned into U+FFFD and stored.
    body = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    return { status: 400, body: { error: 'The body is not UTF-8 text; send the RunEvent as UTF-8 JSON. Nothing was recorded.' } };
  }
  let event: unknown;
  try {
    event = JSON.parse(body);
  } catch (error) {
    return { status: 400, body: { error: `The body is not JSON: ${describeError(error)}.` } };
  }
  const bad = invalidTextIn(event);
  if (bad) return { status: 400, body: { error: `${bad.path} holds ${bad.what}, which no name or facet may; send text without it. Nothing was recorded.` } };
  try {
    return await outcomeAnswer(deps, await ingestLineageEvent(deps.ctx, event, sender));
  } catch (error) {
    if (isBackfillError(error, ErrorCode.BadInput)) return { status: 400, body: { error: error.message } };
    if (isBackfillError(error, ErrorCode.NotAllowed)) return { status: 403, body: { error: error.message } };
    if (isBackfillError(error, ErrorCode.RateLimited)) {
      const seconds = Number(error.details.retryAfterSeconds);
      return { status: 429, body: { error: error.message }, headers: { 'retry-after': String(Number.isFinite(seconds) && seconds > 0 ? Math.ceil(seconds) : 60) } };
    }
    throw error;
  }
}

/** identity: as sent; gzip (and its old name x-gzip): what the OpenLineage clients' `compression: gzip` sends. */
const ENCODINGS = new Set(['identity', 'gzip', 'x-gzip']);

/** A header value in an answer: bounded, and printable ASCII only (a header is the sender's text). */
function shownHeader(value: string): string {
  return JSON.stringify(value.slice(0, 100).replace(/[^\x20-\x7e]/g, '?')).slice(1, -1);
}

/**
 * The gzip body decompressed, bounded as a plain one is: past MAX_BODY_BYTES of output zlib stops
 * (maxOutputLength), so a small bomb of a body cannot make a large buffer.
 */
async function decompressed(bytes: Buffer): Promise<Buffer | 'too_large' | 'not_gzip'> {
  try {
    return await gunzipAsync(bytes, { maxOutputLength: MAX_BODY_BYTES });
  } catch (error) {
    return (error as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE' ? 'too_large' : 'not_gzip';
  }
}

// NUL, the C0 controls but tab, newline and carriage return, and DEL: PostgreSQL refuses NUL in text (a 500 if
// it got there), and the others are terminal escapes nobody names a job or a dataset with.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;

/**
 * The first string (a key or a value) in the parsed body that is not text the bot can keep: a control character,
 * or a lone surrogate (half of a UTF-16 pair, which has no UTF-8 form). Walked with a stack of its own, so a deeply
 * nested body cannot overflow the call stack.
 */
function invalidTextIn(value: unknown): { path: string; what: string } | undefined {
  const stack: { value: unknown; path: string }[] = [{ value, path: 'the body' }];
  const check = (text: string, path: string) => {
    const control = CONTROL.exec(text);
    if (control) return { path, what: `the control character ${codePointLabel(text, control.index)}` };
    if (hasLoneSurrogate(text)) return { path, what: 'a lone surrogate (not valid Unicode)' };
    return undefined;
  };
  for (let item = stack.pop(); item; item = stack.pop()) {
    if (typeof item.value === 'string') {
      const bad = check(item.value, item.path);
      if (bad) return bad;
    } else if (Array.isArray(item.value)) {
      for (const [index, element] of item.value.entries()) stack.push({ value: element, path: `${item.path}[${index}]` });
    } else if (typeof item.value === 'object' && item.value !== null) {
      for (const [key, element] of Object.entries(item.value)) {
        const path = item.path === 'the body' ? key : `${item.path}.${key}`;
        const bad = check(key, `a key in ${item.path}`);
        if (bad) return bad;
        stack.push({ value: element, path });
      }
    }
  }
  return undefined;
}

async function outcomeAnswer(deps: LineageRouteDeps, outcome: IngestOutcome): Promise<Answer> {
  switch (outcome.kind) {
    case 'recorded': {
      const inferred = outcome.inferred > 0 ? { inferred: outcome.inferred } : {};
      return { status: 200, body: { outcome: 'recorded', consumer: outcome.consumer, reads: outcome.reads, ...inferred, ...(outcome.note ? { note: outcome.note } : {}) } };
    }
    case 'noted': return { status: 200, body: { outcome: 'noted', inputs: outcome.inputs, note: "kept for the run's COMPLETE event, which records what the run read" } };
    case 'duplicate': return { status: 200, body: { outcome: 'duplicate', reads: 0 } };
    case 'ignored': return { status: 200, body: { outcome: 'ignored', reason: outcome.reason } };
    case 'rejected_job': return { status: 200, body: { outcome: 'ignored', reason: `an operator rejected this job (lineage proposal #${outcome.proposalId})` } };
    case 'pending': {
      if (outcome.created && deps.onProposal) {
        await deps.onProposal(outcome.proposalId).catch((error: unknown) =>
          (deps.log ?? console.error)(`lineage proposal #${outcome.proposalId} could not be posted to Slack: ${describeError(error)}`));
      }
      const withoutHours = outcome.withoutHours > 0
        ? { withoutHours: outcome.withoutHours, note: 'an unknown job: its reads wait for an operator to confirm who it is; those without hours count once the operator gives the job a read rule' }
        : { note: 'an unknown job: its reads wait for an operator to confirm who it is' };
      return { status: 202, body: { outcome: 'pending', proposal: outcome.proposalId, reads: outcome.reads, ...withoutHours } };
    }
    default: {
      const unreachable: never = outcome;
      return unreachable;
    }
  }
}

/** The body's bytes, or 'too_large' once it passes MAX_BODY_BYTES (the rest is drained unread, so the answer still goes out). */
function readBody(req: IncomingMessage): Promise<Buffer | 'too_large'> {
  if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES) {
    req.resume();
    return Promise.resolve('too_large');
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) chunks.push(chunk);
    });
    req.on('end', () => resolve(size > MAX_BODY_BYTES ? 'too_large' : Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, reply: Answer): void {
  res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
  res.end(JSON.stringify(reply.body));
}
