// The messenger of the model-based test: records every delivery by its intent, like the Slack messenger keeps
// one row per intent, and fails on demand. A fault is armed for a method and fires on that method's next calls;
// a transient one is a plain Error (Slack answered 503), an undeliverable one is the BackfillError the Slack
// messenger throws for user_not_found. changed() never fails: the contract says it must not throw.

import type { EscalationMessage, EscalationReach, Landed, Messenger, OwnerMessage } from '../../src/core/messenger.js';
import type { Notice } from '../../src/core/notices.js';
import { slackNoticeText } from '../../src/views/notices.js';
import { BackfillError, ErrorCode } from '../../src/errors.js';

export const FAULTY_METHODS = ['announce', 'notifyOwner', 'reportDiff', 'reportReconciliation', 'incidentNotice'] as const;
export type FaultyMethod = (typeof FAULTY_METHODS)[number];
export type FaultKind = 'transient' | 'undeliverable';

/** The message of an injected transient fault: the harness tells it apart from a raw error of the engine. */
export const TRANSIENT_FAULT = 'model fault: Slack answered 503 service_unavailable';
const UNDELIVERABLE_SLACK_ERROR = 'user_not_found';

function injectedFault(kind: FaultKind, method: FaultyMethod): Error {
  return kind === 'transient'
    ? new Error(TRANSIENT_FAULT)
    : new BackfillError(ErrorCode.Undeliverable, `Slack cannot deliver the ${method} message: ${UNDELIVERABLE_SLACK_ERROR}`,
      { details: { slackError: UNDELIVERABLE_SLACK_ERROR } });
}

export interface Delivery {
  method: FaultyMethod | 'remind' | 'directMessage' | 'escalate';
  intent: string;
  backfillId?: number;
  to?: string;
  text?: string;
}

export class ModelMessenger implements Messenger {
  /** Every delivery that succeeded, in order; the same intent delivered again is recorded again. */
  readonly deliveries: Delivery[] = [];
  /** Faults still armed, per method: fired in order, each as many times as it was armed for. */
  private readonly armed = new Map<FaultyMethod, FaultKind[]>();
  /** How many faults fired, per kind: the report says whether the faults reached the engine at all. */
  readonly fired: Record<FaultKind, number> = { transient: 0, undeliverable: 0 };

  failNext(method: FaultyMethod, kind: FaultKind, times: number): void {
    const queue = this.armed.get(method) ?? [];
    for (let n = 0; n < times; n += 1) queue.push(kind);
    this.armed.set(method, queue);
  }

  disarm(): void {
    this.armed.clear();
  }

  /** Throws the next armed fault of the method, if any. */
  private fault(method: FaultyMethod): void {
    const kind = this.armed.get(method)?.shift();
    if (kind === undefined) return;
    this.fired[kind] += 1;
    throw injectedFault(kind, method);
  }

  async announce(message: OwnerMessage): Promise<Landed> {
    this.fault('announce');
    this.deliveries.push({ method: 'announce', intent: message.intent, backfillId: message.backfillId, to: message.owner });
    return { channel: `D-${message.owner}`, ts: `${this.deliveries.length}.000100` };
  }

  async notifyOwner(message: OwnerMessage): Promise<void> {
    this.fault('notifyOwner');
    this.deliveries.push({ method: 'notifyOwner', intent: message.intent, backfillId: message.backfillId, to: message.owner, text: slackNoticeText(message.notice) });
  }

  async reportDiff(backfillId: number, intent: string): Promise<void> {
    this.fault('reportDiff');
    this.deliveries.push({ method: 'reportDiff', intent, backfillId });
  }

  async reportReconciliation(backfillId: number, intent: string): Promise<void> {
    this.fault('reportReconciliation');
    this.deliveries.push({ method: 'reportReconciliation', intent, backfillId });
  }

  async remind(message: OwnerMessage): Promise<void> {
    this.deliveries.push({ method: 'remind', intent: message.intent, backfillId: message.backfillId, to: message.owner });
  }

  async directMessage(user: string, notice: Notice, intent: string): Promise<void> {
    this.deliveries.push({ method: 'directMessage', intent, to: user, text: slackNoticeText(notice) });
  }

  async escalate(message: EscalationMessage): Promise<EscalationReach> {
    this.deliveries.push({ method: 'escalate', intent: message.intent, backfillId: message.backfillId, to: message.owner });
    return { users: message.to.kind === 'delegates' ? message.to.users : [], unreachable: [] };
  }

  async incidentNotice(backfillId: number, notice: Notice, intent: string): Promise<void> {
    this.fault('incidentNotice');
    this.deliveries.push({ method: 'incidentNotice', intent, backfillId, text: slackNoticeText(notice) });
  }

  async changed(): Promise<void> {}
}
