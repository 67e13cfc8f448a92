import type { Messenger } from '../core/messenger.js';
import type { Logger } from '../log.js';

/**
 * The status refreshes the step jobs asked for and did not wait on. A job ends when its step's effect is
 * committed and whatever became runnable is enqueued, not when Slack shows the new status: the messenger
 * coalesces refreshes and holds them to one a STATUS_THROTTLE_MS (src/slack/delivery/messenger.ts), and a
 * job that waited for one held its worker slot idle for up to that long (and for as long as Slack took, its
 * 429s included), one step after another. The status is only a view of the rows, so nothing of the engine waits
 * for it; a worker that closes waits for the refreshes still running, within its deadline, so the message
 * a person sees last is not one step behind.
 */
export class StatusRefreshes {
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly messenger: Pick<Messenger, 'changed'>, private readonly log: Logger) {}

  /** Asks for the backfill's status to be refreshed, and returns at once. */
  request(backfillId: number): void {
    const refresh: Promise<void> = Promise.resolve()
      .then(() => this.messenger.changed(backfillId))
      .catch((error: unknown) => this.log.warn({ err: error, backfillId }, 'the status refresh failed; the next change refreshes it'))
      .finally(() => this.running.delete(refresh));
    this.running.add(refresh);
  }

  /** Settles once every refresh asked for so far has (the worker bounds the wait with its close deadline). */
  async idle(): Promise<void> {
    await Promise.all([...this.running]);
  }
}
