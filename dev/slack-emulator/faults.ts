// The failures a test scripts ahead of the calls they hit: HTTP 429 with Retry-After, another HTTP status, a
// 200 { ok:false, error }, or the work done and its answer lost. Each is queued per method and used up one call
// at a time; server.ts answers with them.

import type { SlackEmulator } from './emulator.js';
import { conversationFor, str, type Rec } from './params.js';

export type Fault =
  | { kind: 'rate'; retryAfterSeconds: number; channel?: string }
  | { kind: 'http'; status: number }
  | { kind: 'error'; error: string }
  | { kind: 'drop'; answer: number | 'hangup' };

/** The pending faults of one emulator, by method, in the order they were scripted. */
export class FaultScript {
  private readonly pending = new Map<string, { fault: Fault; remaining: number }[]>();

  add(method: string, times: number, fault: Fault): void {
    if (!Number.isInteger(times) || times < 0) throw new Error(`times must be a non-negative integer, got ${times}`);
    if (times === 0) return;
    const queue = this.pending.get(method) ?? [];
    queue.push({ fault, remaining: times });
    this.pending.set(method, queue);
  }

  /** The first pending fault of `method` that applies to this call (a rate limit may name one conversation). */
  take(method: string, params: Rec): Fault | undefined {
    const queue = this.pending.get(method);
    if (!queue) return undefined;
    const requested = str(params.channel);
    const index = queue.findIndex(({ fault }) =>
      fault.kind !== 'rate' || fault.channel === undefined || (requested !== undefined && conversationFor(requested) === fault.channel));
    const found = queue[index];
    if (!found) return undefined;
    found.remaining -= 1;
    if (found.remaining <= 0) queue.splice(index, 1);
    return found.fault;
  }

  clear(): void {
    this.pending.clear();
  }
}

/** The emulator's methods that script faults. */
export function faultControls(faults: FaultScript): Pick<SlackEmulator, 'rateLimit' | 'failHttp' | 'failWith' | 'dropAnswer'> {
  return {
    rateLimit(method: string, times: number, retryAfterSeconds: number, channel?: string): void {
      faults.add(method, times, { kind: 'rate', retryAfterSeconds, ...(channel === undefined ? {} : { channel: conversationFor(channel) }) });
    },
    failHttp(method: string, times: number, status: number): void {
      faults.add(method, times, { kind: 'http', status });
    },
    failWith(method: string, times: number, error: string): void {
      faults.add(method, times, { kind: 'error', error });
    },
    dropAnswer(method: string, times: number, answer: number | 'hangup' = 500): void {
      faults.add(method, times, { kind: 'drop', answer });
    },
  };
}
