import type { EngineContext } from '../core/context.js';
import type { EscalationMessage, EscalationReach, Messenger, OwnerMessage } from '../core/messenger.js';
import type { Notice } from '../core/notices.js';
import { person, PLAIN, terminalNoticeText, type TextStyle } from '../views/text.js';
import { escalationText } from '../views/waiting.js';
import { terminalText } from '../markup.js';
import { loadBackfillReport, type BackfillReport } from '../core/file/status.js';
import { ACTIVE_STATES } from '../core/states.js';
import { backfillProgress, plainProgressLine, terminalProgressLine } from '../views/progress.js';
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

  async escalate(message: EscalationMessage): Promise<EscalationReach> {
    const { to } = message;
    const whom = to.kind === 'channel' ? `channel ${to.channel}` : to.kind === 'delegates' ? to.users.map((user) => person(user, this.style)).join(', ')
      : 'user' in to ? person(to.user, this.style) : `user group ${to.usergroup}`;
    this.print(`--- escalation to ${whom} ---\n${escalationText(message, (id) => person(id, this.style), terminalText, terminalText)}`);
    return { users: to.kind === 'delegates' ? to.users : 'user' in to ? [to.user] : [], ...(to.kind === 'channel' ? { channel: to.channel } : {}), unreachable: [] };
  }

  async changed(): Promise<void> {}
}

/**
 * Runs the backfill's steps in this process (a real BullMQ worker) until it is no longer active and its
 * messages are sent, then returns what the database says. `onReport` sees every reading on the way (the
 * progress display of --wait).
 */
export async function runUntilSettled(ctx: EngineContext, backfillId: number, print: (line: string) => void, messenger: Messenger = new PrintingMessenger(print), onReport?: (report: BackfillReport) => void): Promise<BackfillReport> {
  const workers = await startWorkers({ ...ctx, messenger }, { sweepMs: 500 });
  try {
    await workers.kick(backfillId);
    for (;;) {
      const report = await loadBackfillReport(ctx.pool, backfillId);
      onReport?.(report);
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

/** Where a progress display writes: process.stdout, or a stand-in in a test. */
export interface ProgressOutput {
  isTTY?: boolean;
  /** The terminal's width: a line longer than it would wrap, and \r would redraw only its last part. */
  columns?: number;
  write(text: string): unknown;
}

const CLEAR_LINE = '\r\x1b[2K';

/**
 * The run's progress while --wait waits. On a terminal: one line redrawn in place (the bar, the counts, the
 * time left once known), lifted out of the way of any other line printed meanwhile and drawn again under it.
 * Elsewhere (a pipe, a log): a plain line each time the counts change, and nothing that redraws.
 */
export class TerminalProgress {
  private shown = '';
  private lastPlain = '';

  constructor(private readonly out: ProgressOutput, private readonly backfillId: number, private readonly now: () => Date = () => new Date()) {}

  update(report: BackfillReport): void {
    const progress = backfillProgress(report, this.now());
    if (this.out.isTTY) {
      const width = this.out.columns ? this.out.columns - 1 : Infinity;
      const line = terminalProgressLine(this.backfillId, progress).slice(0, width);
      if (line !== this.shown) this.out.write(`${CLEAR_LINE}${line}`);
      this.shown = line;
      return;
    }
    const line = plainProgressLine(this.backfillId, progress);
    if (line !== this.lastPlain) this.out.write(`${line}\n`);
    this.lastPlain = line;
  }

  /** A line of the run's own (a message printed instead of sent), above the bar. */
  print(line: string): void {
    this.out.write(this.out.isTTY && this.shown ? `${CLEAR_LINE}${line}\n${this.shown}` : `${line}\n`);
  }

  /** Leaves the bar's last state on its line and moves below it. */
  end(): void {
    if (this.out.isTTY && this.shown) this.out.write('\n');
    this.shown = '';
  }
}
