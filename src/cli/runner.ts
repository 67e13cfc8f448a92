import type { EngineContext } from '../core/context.js';
import type { Messenger, OwnerMessage } from '../core/messenger.js';
import type { Notice } from '../core/notices.js';
import { person, PLAIN, terminalNoticeText, type TextStyle } from '../views/text.js';
import { loadBackfillReport, type BackfillReport } from '../core/file/status.js';
import { ACTIVE_STATES } from '../core/engine/stateMachine.js';
import { startWorkers } from '../worker.js';

/** Without Slack, messages are printed, worded for a terminal; the timeline keeps that they were delivered. */
export class PrintingMessenger implements Messenger {
  constructor(private readonly print: (line: string) => void, private readonly style: TextStyle = PLAIN) {}

  async announce(message: OwnerMessage): Promise<undefined> {
    this.print(`(announcement delivered to ${person(message.owner, this.style)} for ${message.consumer})`);
    return undefined;
  }

  async notifyOwner(message: OwnerMessage): Promise<void> {
    this.print(`--- to ${person(message.owner, this.style)} (${message.consumer}, after the run) ---\n${terminalNoticeText(message.notice, this.style)}`);
  }

  async reportDiff(): Promise<void> {}

  async reportReconciliation(): Promise<void> {}

  async directMessage(user: string, notice: Notice): Promise<void> {
    this.print(`--- to ${person(user, this.style)} ---\n${terminalNoticeText(notice, this.style)}`);
  }

  async incidentNotice(backfillId: number, notice: Notice): Promise<void> {
    this.print(`--- incident notice, backfill #${backfillId} ---\n${terminalNoticeText(notice, this.style)}`);
  }

  async remind(message: OwnerMessage): Promise<void> {
    this.print(`(reminder to ${person(message.owner, this.style)}: backfill #${message.backfillId} still waits for ${message.consumer})`);
  }

  async changed(): Promise<void> {}
}

/**
 * Runs the backfill's steps in this process (a real BullMQ worker) until it is no longer active and its
 * messages are sent, then returns what the database says.
 */
export async function runUntilSettled(ctx: EngineContext, backfillId: number, print: (line: string) => void, messenger: Messenger = new PrintingMessenger(print)): Promise<BackfillReport> {
  const workers = await startWorkers({ ...ctx, messenger }, { sweepMs: 500 });
  try {
    await workers.kick(backfillId);
    for (;;) {
      const report = await loadBackfillReport(ctx.pool, backfillId);
      const pending = report.steps.some((s) => s.status === 'pending' || s.status === 'running');
      const running = report.steps.some((s) => s.status === 'running');
      const waitingForPeople = report.backfill.state === 'announced' || report.backfill.state === 'held';
      const finished = !ACTIVE_STATES.includes(report.backfill.state);
      // A paused backfill waits for an operator with its publish steps pending: settled once nothing runs.
      const paused = report.backfill.state === 'paused' && !running;
      if ((waitingForPeople && !pending) || (finished && !pending) || paused) return report;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    await workers.close();
  }
}
