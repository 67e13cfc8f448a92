import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CustomRoute } from '@slack/bolt';
import type { EngineContext } from '../core/context.js';
import { ingestRunEvent, type IngestOutcome } from '../core/lineage/ingest.js';
import { describeError, isBackfillError, ErrorCode } from '../errors.js';

// POST /lineage: OpenLineage run events in, served by the Bolt HTTP receiver beside /slack/events. This module is
// the HTTP edge only (the token, the size, the JSON); what an event means is src/core/lineage/ingest.ts.
// Answers: 200 recorded / duplicate / ignored, 202 kept pending on a proposal, 400 malformed (the message names
// the field), 401 no or wrong token, 413 too large, 415 not JSON, 500 our fault (logged; nothing committed).

/** A RunEvent is a few kilobytes; this leaves room for large facets and refuses anything meant to exhaust us. */
export const MAX_BODY_BYTES = 1024 * 1024;

export interface LineageRouteDeps {
  ctx: EngineContext;
  /** LINEAGE_TOKEN. Unset: no route (Bolt answers 404), since there is nobody the bot could trust. */
  token: string | undefined;
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
  const { token } = deps;
  if (!token) return [];
  return [{
    path: '/lineage',
    method: ['POST'],
    handler: (req, res) => {
      answer(deps, token, req).then((reply) => send(res, reply), (error: unknown) => {
        (deps.log ?? console.error)(`POST /lineage: ${error instanceof Error ? error.stack ?? error.message : String(error)}`);
        send(res, { status: 500, body: { error: 'Something went wrong on our side; nothing was recorded. The error is in the bot\'s log.' } });
      });
    },
  }];
}

/** Compared as SHA-256 digests, so timingSafeEqual gets equal lengths and the time says nothing about the token. */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  if (!match?.[1]) return false;
  const digest = (text: string) => createHash('sha256').update(text).digest();
  return timingSafeEqual(digest(match[1]), digest(token));
}

async function answer(deps: LineageRouteDeps, token: string, req: IncomingMessage): Promise<Answer> {
  if (!bearerMatches(req.headers.authorization, token)) {
    req.resume();
    return { status: 401, body: { error: 'A bearer token is required: Authorization: Bearer <LINEAGE_TOKEN>.' }, headers: { 'www-authenticate': 'Bearer realm="lineage"' } };
  }
  const type = req.headers['content-type'] ?? '';
  if (!/^application\/json\b/i.test(type)) {
    req.resume();
    return { status: 415, body: { error: `The body must be an OpenLineage RunEvent as JSON (Content-Type: application/json), not ${type || 'untyped'}.` } };
  }
  const body = await readBody(req);
  if (body === 'too_large') return { status: 413, body: { error: `The body is larger than ${MAX_BODY_BYTES} bytes; send one RunEvent per request.` } };
  let event: unknown;
  try {
    event = JSON.parse(body);
  } catch (error) {
    return { status: 400, body: { error: `The body is not JSON: ${describeError(error)}.` } };
  }
  try {
    return await outcomeAnswer(deps, await ingestRunEvent(deps.ctx, event));
  } catch (error) {
    if (isBackfillError(error, ErrorCode.BadInput)) return { status: 400, body: { error: error.message } };
    throw error;
  }
}

async function outcomeAnswer(deps: LineageRouteDeps, outcome: IngestOutcome): Promise<Answer> {
  switch (outcome.kind) {
    case 'recorded': return { status: 200, body: { outcome: 'recorded', consumer: outcome.consumer, reads: outcome.reads } };
    case 'duplicate': return { status: 200, body: { outcome: 'duplicate', reads: 0 } };
    case 'ignored': return { status: 200, body: { outcome: 'ignored', reason: outcome.reason } };
    case 'rejected_job': return { status: 200, body: { outcome: 'ignored', reason: `an operator rejected this job (lineage proposal #${outcome.proposalId})` } };
    case 'pending': {
      if (outcome.created && deps.onProposal) {
        await deps.onProposal(outcome.proposalId).catch((error: unknown) =>
          (deps.log ?? console.error)(`lineage proposal #${outcome.proposalId} could not be posted to Slack: ${describeError(error)}`));
      }
      return { status: 202, body: { outcome: 'pending', proposal: outcome.proposalId, reads: outcome.reads, note: 'an unknown job: its reads wait for an operator to confirm who it is' } };
    }
    default: {
      const unreachable: never = outcome;
      return unreachable;
    }
  }
}

/** The body as text, or 'too_large' once it passes MAX_BODY_BYTES (the rest is drained unread, so the answer still goes out). */
function readBody(req: IncomingMessage): Promise<string | 'too_large'> {
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
    req.on('end', () => resolve(size > MAX_BODY_BYTES ? 'too_large' : Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function send(res: ServerResponse, reply: Answer): void {
  res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers });
  res.end(JSON.stringify(reply.body));
}
