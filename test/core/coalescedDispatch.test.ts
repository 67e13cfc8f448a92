// The dispatches step jobs ask for after their commits, coalesced per backfill (src/queue/coalescedDispatch.ts):
// each request is answered by a dispatch that began after it (it reads the requester's commit), and requests
// made while one runs share the one after it. Here the dispatch is a function the test releases by hand, so
// every interleaving it names is taken exactly; the worker tests run it over real queues.

import { describe, expect, it } from 'vitest';
import { CoalescedDispatch } from '../../src/queue/coalescedDispatch.js';

/** A dispatch the test finishes: each run is numbered, records when it began, and waits for its release. */
class HeldDispatch {
  readonly runs: { backfillId: number; began: number; release: () => void; fail: (error: Error) => void }[] = [];
  private clock = 0;

  readonly dispatch = (backfillId: number): Promise<number> => new Promise<number>((resolve, reject) => {
    const began = this.tick();
    const n = this.runs.length;
    this.runs.push({ backfillId, began, release: () => resolve(n), fail: reject });
  });

  tick(): number {
    this.clock += 1;
    return this.clock;
  }
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('dispatches coalesced per backfill', () => {
  it('answers requests made while a dispatch runs with one dispatch after it, which begins after every one of them', async () => {
    const held = new HeldDispatch();
    const dispatches = new CoalescedDispatch(held.dispatch);
    const first = dispatches.request(1);
    const askedAt = [held.tick(), held.tick(), held.tick()];
    const later = [dispatches.request(1), dispatches.request(1), dispatches.request(1)];
    await settle();
    expect(held.runs).toHaveLength(1);
    held.runs[0]?.release();
    expect(await first).toBe(0);
    await settle();
    // One more dispatch for the three, begun after the last of them asked.
    expect(held.runs).toHaveLength(2);
    expect(held.runs[1]?.began).toBeGreaterThan(Math.max(...askedAt));
    held.runs[1]?.release();
    expect(await Promise.all(later)).toEqual([1, 1, 1]);
    expect(held.runs).toHaveLength(2);
  });

  it('never answers a request with the dispatch that was already running when it was made', async () => {
    const held = new HeldDispatch();
    const dispatches = new CoalescedDispatch(held.dispatch);
    void dispatches.request(1);
    const asked = held.tick();
    let answered = false;
    const late = dispatches.request(1).then((n) => {
      answered = true;
      return n;
    });
    held.runs[0]?.release();
    await settle();
    expect(answered).toBe(false);
    expect(held.runs[1]?.began).toBeGreaterThan(asked);
    held.runs[1]?.release();
    expect(await late).toBe(1);
  });

  it('starts afresh once nothing runs, and keeps backfills apart', async () => {
    const held = new HeldDispatch();
    const dispatches = new CoalescedDispatch(held.dispatch);
    const one = dispatches.request(1);
    const two = dispatches.request(2);
    await settle();
    expect(held.runs.map((run) => run.backfillId)).toEqual([1, 2]);
    held.runs[0]?.release();
    held.runs[1]?.release();
    expect(await Promise.all([one, two])).toEqual([0, 1]);
    const again = dispatches.request(1);
    await settle();
    expect(held.runs).toHaveLength(3);
    held.runs[2]?.release();
    expect(await again).toBe(2);
  });

  it('gives a failed dispatch\'s error to its own requesters, and still runs the next one for those waiting on it', async () => {
    const held = new HeldDispatch();
    const dispatches = new CoalescedDispatch(held.dispatch);
    const failing = dispatches.request(1);
    const waiting = dispatches.request(1);
    held.runs[0]?.fail(new Error('the queue is gone'));
    await expect(failing).rejects.toThrow('the queue is gone');
    await settle();
    expect(held.runs).toHaveLength(2);
    held.runs[1]?.release();
    expect(await waiting).toBe(1);
  });
});
