import { createHmac, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { runPipelineSql } from '../../db/pipelineSql.js';
import type { PoolClient } from '../../db/pool.js';
import { BackfillError, ErrorCode } from '../../errors.js';

/** How a consumer is re-run after its partitions changed: SQL in the warehouse, or an HTTP webhook. */
export const retriggerSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('sql'), statements: z.array(z.string().min(1)).min(1) }),
  z.object({ kind: z.literal('webhook'), url: z.url() }),
]);
export type Retrigger = z.infer<typeof retriggerSchema>;

export function parseRetrigger(consumer: string, value: unknown): Retrigger {
  const parsed = retriggerSchema.safeParse(value);
  if (!parsed.success) {
    throw new BackfillError(ErrorCode.BadInput,
      `consumer ${consumer} has an unusable retrigger definition: expected {"kind":"sql","statements":[…]} or {"kind":"webhook","url":"https://…"}`);
  }
  return parsed.data;
}

/** Each statement gets $1 = the corrected partitions (timestamptz[]); all run in the caller's transaction. */
export async function runSqlRetrigger(tx: PoolClient, retrigger: Extract<Retrigger, { kind: 'sql' }>, hours: Date[]): Promise<{ statements: number; rows: number }> {
  let rows = 0;
  for (const statement of retrigger.statements) {
    const result = await runPipelineSql(tx, statement, [hours]);
    rows += result.rowCount ?? 0;
  }
  return { statements: retrigger.statements.length, rows };
}

export interface WebhookCall {
  backfillId: number;
  consumer: string;
  partitions: Date[];
  secret: string;
  timeoutMs: number;
}

/**
 * POSTs the replay request. The signature is HMAC-SHA256 over "<timestamp>.<body>" so a receiver can check
 * both origin and freshness; the idempotency key lets it drop a retried delivery. A non-2xx answer is a
 * failure worth retrying; the job's backoff spaces the retries.
 */
export async function callWebhook(retrigger: Extract<Retrigger, { kind: 'webhook' }>, call: WebhookCall): Promise<{ status: number }> {
  const body = JSON.stringify({ backfill_id: call.backfillId, consumer: call.consumer, partitions: call.partitions.map((h) => h.toISOString()) });
  const timestamp = Math.floor(Date.now() / 1000).toString();
  const signature = createHmac('sha256', call.secret).update(`${timestamp}.${body}`).digest('hex');
  let response: Response;
  try {
    response = await fetch(retrigger.url, {
      method: 'POST',
      body,
      headers: {
        'content-type': 'application/json',
        'x-backfill-timestamp': timestamp,
        'x-backfill-signature': `sha256=${signature}`,
        'idempotency-key': `backfill-${call.backfillId}-replay-${call.consumer}`,
      },
      signal: AbortSignal.timeout(call.timeoutMs),
    });
  } catch (error) {
    throw new BackfillError(ErrorCode.StepFailed, `webhook ${retrigger.url} for ${call.consumer} did not answer: ${(error as Error).message}`, { cause: error, retryable: true });
  }
  if (!response.ok) {
    throw new BackfillError(ErrorCode.StepFailed, `webhook ${retrigger.url} for ${call.consumer} answered ${response.status}`, { retryable: true });
  }
  return { status: response.status };
}

export function verifyWebhookSignature(secret: string, timestamp: string, body: string, header: string): boolean {
  const expected = `sha256=${createHmac('sha256', secret).update(`${timestamp}.${body}`).digest('hex')}`;
  return expected.length === header.length && timingSafeEqual(Buffer.from(expected), Buffer.from(header));
}
