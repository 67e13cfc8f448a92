/**
 * The dispatches the step jobs of one process ask for after their steps commit, coalesced per backfill. A job
 * ends once whatever its step made runnable is enqueued, so it waits for a dispatch that began after its commit;
 * it need not have a dispatch of its own. Jobs of the same backfill that finish while one runs all wait for the
 * one next after it, which reads every commit before it began: one look at the rows and the queue for all of them.
 *
 * PERF: a dispatch reads the backfill's runnable steps and asks the queue about each (src/queue/stepQueue.ts), so
 * it grows with the partitions; every step ran its own, four at a time beside one another, each finding the
 * same steps already queued (docs/benchmark.md).
 */
export class CoalescedDispatch<T> {
  private readonly running = new Map<number, Promise<T>>();
  private readonly next = new Map<number, Promise<T>>();

  constructor(private readonly dispatch: (backfillId: number) => Promise<T>) {}

  /** A dispatch of the backfill that begins after this call: the one running now does not count, it may have read too early. */
  request(backfillId: number): Promise<T> {
    const queued = this.next.get(backfillId);
    if (queued) return queued;
    const current = this.running.get(backfillId);
    if (!current) return this.start(backfillId);
    // Its failure is its own requesters'; the next one runs anyway.
    const after = current.then(() => undefined, () => undefined).then(() => {
      this.next.delete(backfillId);
      return this.start(backfillId);
    });
    this.next.set(backfillId, after);
    return after;
  }

  private start(backfillId: number): Promise<T> {
    const run: Promise<T> = this.dispatch(backfillId).finally(() => {
      if (this.running.get(backfillId) === run) this.running.delete(backfillId);
    });
    this.running.set(backfillId, run);
    return run;
  }
}
