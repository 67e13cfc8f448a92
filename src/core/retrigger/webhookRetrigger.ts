import { createHmac, timingSafeEqual } from 'node:crypto';
import { BackfillError, ErrorCode } from '../../errors.js';
import { quoteOutside } from '../../redaction.js';
import { replayKey, type ReplayCall } from './call.js';
import type { Retrigger } from './definition.js';
import { callChecked } from './outboundHttp.js';
import { checkUrlForCall, type UrlPolicy } from './urlPolicy.js';

// The webhook kind: a signed POST the receiver can check for origin and freshness, under the replay's key.

export interface WebhookCall extends ReplayCall {
  secret: string;
  timeoutMs: number;
  policy: UrlPolicy;
}

/**
 * POSTs the replay request. The signature is HMAC-SHA256 over "<timestamp>.<body>" so a receiver can check
 * both origin and freshness; the idempotency key lets it drop a retried delivery. A non-2xx answer is a
 * failure worth retrying; the job's backoff spaces the retries.
 */
export async function callWebhook(retrigger: Extract<Retrigger, { kind: 'webhook' }>, call: WebhookCall): Promise<{ status: number }> {
  const what = (url: string) => `webhook ${url} for ${call.consumer}`;
  // Checked as it is called, not only when the catalog was applied: the allowed hosts and DNS may have changed.
  const checked = await checkUrlForCall(retrigger.url, call.policy, what);
  const body = JSON.stringify({ backfill_id: call.backfillId, consumer: call.consumer, partitions: call.partitions.map((h) => h.toISOString()) });
  const timestamp = Math.floor(Date.now() / 1000).toString();
  const signature = createHmac('sha256', call.secret).update(`${timestamp}.${body}`).digest('hex');
  const answer = await callChecked(what, checked, {
    method: 'POST',
    body,
    headers: {
      'content-type': 'application/json',
      'x-backfill-timestamp': timestamp,
      'x-backfill-signature': `sha256=${signature}`,
      'idempotency-key': replayKey(call),
    },
    timeoutMs: call.timeoutMs,
  });
  if (answer.status < 200 || answer.status > 299) {
    throw new BackfillError(ErrorCode.StepFailed, `${what(quoteOutside(retrigger.url))} answered ${answer.status}${answer.text ? `: ${quoteOutside(answer.text)}` : ''}`, { retryable: true });
  }
  return { status: answer.status };
}

export function verifyWebhookSignature(secret: string, timestamp: string, body: string, header: string): boolean {
  const expected = `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
  return expected.length === header.length && timingSafeEqual(Buffer.from(expected), Buffer.from(header));
}
