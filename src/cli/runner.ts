import type { EngineContext } from '../core/context.js';
import type { Notifier } from '../core/steps.js';
import { loadBackfillReport, type BackfillReport } from '../core/status.js';
import { ACTIVE_STATES } from '../core/stateMachine.js';
import { startWorkers } from '../worker.js';

/** Without Slack, an "after" owner's message is printed and kept in the timeline by the notify step. */
export class TimelineNotifier implements Notifier {
  constructor(private readonly print: (line: string) => void) {}

  async notifyOwner(message: { backfillId: number; consumer: string; owner: string; text: string }): Promise<void> {
    this.print(`--- to <@${message.owner}> (${message.consumer}, after the run) ---\n${message.text}`);
  }
}

/**
 * Runs the backfill's steps in this process (a real BullMQ worker) until it is no longer active and its
 * notifications are sent, then returns what the database says.
 */
export async function runUntilSettled(ctx: EngineContext, backfillId: number, print: (line: string) => void, notifier: Notifier = new TimelineNotifier(print)): Promise<BackfillReport> {
  const workers = await startWorkers({ ...ctx, notifier }, { sweepMs: 500 });
  try {
    await workers.kick(backfillId);
    for (;;) {
      const report = await loadBackfillReport(ctx.pool, backfillId);
      const settled = !ACTIVE_STATES.includes(report.backfill.state) || report.backfill.state === 'announced' || report.backfill.state === 'held';
      const pending = report.steps.some((s) => s.status === 'pending' || s.status === 'running');
      if (settled && !(report.backfill.state === 'done' && pending)) return report;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    await workers.close();
  }
}
