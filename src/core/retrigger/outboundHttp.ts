import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside } from '../../redaction.js';
import type { CheckedUrl, NameOfCall } from './urlPolicy.js';

// The one way a webhook or REST re-trigger calls out. node:http rather than fetch, for three reasons:
//   - it connects to the addresses urlPolicy.ts checked, not to whatever a second resolution answers: the socket's
//     lookup is answered from the checked list, so a DNS answer that changes between the check and the connection
//     (rebinding) cannot move the call. TLS still checks the certificate against the host name (SNI is the name).
//     What remains is the name's owner pointing it somewhere new between two calls: each call checks again.
//   - it never follows a redirect: a 3xx is refused, since its Location could lead anywhere, past every check;
//   - the answer is read up to MAX_ANSWER_BYTES and no further, so a hostile endpoint cannot fill the memory.

/** What is kept of an answer: enough for a status document; a longer one is cut (and then no longer JSON). */
const MAX_ANSWER_BYTES = 256 * 1024;

export interface OutboundAnswer {
  status: number;
  /** The answer's text, at most MAX_ANSWER_BYTES of it; outside text: quote it only through quoteOutside. */
  text: string;
}

export interface OutboundCall {
  method: 'GET' | 'POST' | 'PUT';
  headers: Record<string, string>;
  body?: string | undefined;
  timeoutMs: number;
}

/** Answers the socket's lookup from the checked addresses only. */
function pinnedLookup(checked: CheckedUrl): LookupFunction {
  return (_host, options, callback) => {
    const family = options.family === 4 || options.family === 6 ? options.family : undefined;
    const usable = checked.addresses.filter((entry) => family === undefined || entry.family === family);
    if (options.all) return callback(null, usable);
    const first = usable[0];
    if (!first) return callback(Object.assign(new Error(`no checked address of family ${String(family)}`), { code: 'ENOTFOUND' }), '', 0);
    return callback(null, first.address, first.family);
  };
}

function readBounded(response: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    response.on('data', (chunk: Buffer) => {
      if (size >= MAX_ANSWER_BYTES) return;
      chunks.push(chunk.subarray(0, MAX_ANSWER_BYTES - size));
      size += chunk.length;
      if (size >= MAX_ANSWER_BYTES) {
        resolve(Buffer.concat(chunks).toString('utf8'));
        response.destroy();
      }
    });
    response.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    response.on('error', reject);
  });
}

/**
 * Calls the checked URL. A connection that fails or times out is retryable; a redirect is refused and is not.
 * `what` names the call around its URL, which it is given quoted redacted.
 */
export async function callChecked(what: NameOfCall, checked: CheckedUrl, call: OutboundCall): Promise<OutboundAnswer> {
  const named = what(quoteOutside(checked.url.href));
  const send = checked.url.protocol === 'https:' ? httpsRequest : httpRequest;
  const signal = AbortSignal.timeout(call.timeoutMs);
  let answer: OutboundAnswer;
  try {
    answer = await new Promise<OutboundAnswer>((resolve, reject) => {
      const outgoing = send(checked.url, {
        method: call.method, signal, lookup: pinnedLookup(checked),
        // A length rather than chunked encoding, which some orchestrators' front proxies refuse.
        headers: call.body === undefined ? call.headers : { ...call.headers, 'content-length': String(Buffer.byteLength(call.body)) },
        // A socket of its own: a pooled one could have been opened for another check.
        agent: false,
      }, (response) => {
        readBounded(response).then((text) => resolve({ status: response.statusCode ?? 0, text }), reject);
      });
      outgoing.on('error', reject);
      outgoing.end(call.body);
    });
  } catch (error) {
    const reason = signal.aborted ? `no answer within ${call.timeoutMs} ms` : quoteOutside((error as Error).message, 200);
    throw new BackfillError(ErrorCode.StepFailed, `${named} did not answer: ${reason}`, { cause: error, retryable: true });
  }
  if (answer.status >= 300 && answer.status <= 399) {
    throw new BackfillError(ErrorCode.StepFailed,
      `${named} answered ${answer.status}, a redirect, which a re-trigger never follows (it could lead past the host checks): put the URL it redirects to in the catalog`,
      { retryable: false });
  }
  return answer;
}
