import type { GateResult } from '../core/announce/gate.js';
import type { Plan } from '../core/identify/plan.js';
import { formatHour, formatMoney } from './format.js';
import { person, terminalNoticeText, type TextStyle } from './text.js';
import { terminalText } from '../markup.js';

// What the CLI prints after a command, on a terminal's terms: people by name, no Slack markup, and nothing from
// outside (a consumer's or report's name, a queue's error) with control characters in it. Pure: the facts the
// core returned in, lines out.

const t = terminalText;

type Waiting = GateResult['waitingFor'];

const waitingFor = (waiting: Waiting, style: TextStyle) => waiting.map((w) => `${t(w.consumer)} ${person(w.owner, style)}`).join(', ');

export function planFrozenLine(plan: Pick<Plan, 'planId' | 'inputsHash'>): string {
  return `Plan #${plan.planId ?? '?'} frozen (inputs ${plan.inputsHash.slice(0, 12)}): start it with --plan ${plan.planId ?? '<id>'}.`;
}

export function startedLines(backfill: { id: number; state: string }, announcements: Plan['announcements'], style: TextStyle): string[] {
  return [
    `Backfill #${backfill.id} created (${backfill.state}).`,
    ...announcements.map((a) => `\n--- to ${person(a.owner, style)} (${t(a.consumer)}, ${a.notifyRule}) ---\n${terminalNoticeText({ kind: 'announcement', facts: a.facts }, style)}`),
  ];
}

export function acknowledgedLines(actor: string, result: Pick<GateResult, 'changed' | 'waitingFor'>, style: TextStyle): string[] {
  return [
    result.changed ? `Acknowledged by ${person(actor, style)}.` : 'Already acknowledged: nothing changed.',
    result.waitingFor.length ? `Still waiting for: ${waitingFor(result.waitingFor, style)}` : 'Every required acknowledgement is in.',
  ];
}

export function heldLine(backfillId: number, actor: string, style: TextStyle): string {
  return `Backfill #${backfillId} is held by ${person(actor, style)}; it runs only after they acknowledge.`;
}

export function overrideLine(actor: string, approved: boolean, style: TextStyle): string {
  return approved ? `Gate opened by override of ${person(actor, style)}.` : 'Nothing to override.';
}

export function approvedLine(result: Pick<GateResult, 'approved' | 'waitingFor'>): string {
  return result.approved ? 'Approved; the gate is open.' : `Approved. Still waiting for: ${result.waitingFor.map((w) => t(w.consumer)).join(', ')}`;
}

/** A stop is in the database whatever the queue says; `removed` is how many queued jobs went, or why none could. */
export function stoppedLine(backfillId: number, removed: number | Error): string {
  return removed instanceof Error
    ? `Backfill #${backfillId} stopped and fenced. Its queued jobs were not removed: ${t(removed.message)} They will find it stopped and do nothing.`
    : `Backfill #${backfillId} stopped and fenced; ${removed} queued job(s) removed.`;
}

/** Nothing accepted: the backfill was paused for a change to its catalog, put back since (see continuedNotice). */
export function continuedLine(backfillId: number, accepted: readonly Date[]): string {
  if (accepted.length === 0) return `Backfill #${backfillId} continues, its catalog as announced again; nothing was accepted.`;
  return `Backfill #${backfillId} continues; accepted: ${accepted.map(formatHour).join(', ')}.`;
}

export function rolledBackLine(backfillId: number, restored: number): string {
  return `Backfill #${backfillId} rolled back: ${restored} partition(s) restored; consumers replay.`;
}

export function signedLine(signed: { report: string; period: string; total: string; signedBy: string; signatureNumber: number }, style: TextStyle): string {
  return `Signed ${t(signed.report)} ${t(signed.period)} = ${formatMoney(signed.total)} by ${person(signed.signedBy, style)} (signature ${signed.signatureNumber}).`;
}

export function signersLines(rows: readonly { report: string; signer: string }[], style: TextStyle): string {
  return rows.map((r) => `${t(r.report)}: ${person(r.signer, style)}`).join('\n') || 'No signers configured.';
}

export function notASignerLine(report: string, user: string, style: TextStyle): string {
  return `${person(user, style)} was not a signer of ${t(report)}.`;
}

export function signersOfLine(report: string, signers: readonly string[], style: TextStyle): string {
  return `Signers of ${t(report)}: ${signers.map((s) => person(s, style)).join(', ') || 'none'}`;
}

export function delegatesLines(rows: readonly { owner: string; delegate: string }[], style: TextStyle): string {
  return rows.map((r) => `${person(r.owner, style)}: ${person(r.delegate, style)}`).join('\n') || 'No delegates configured.';
}

export function delegateChangedLine(change: 'add' | 'remove', owner: string, user: string, style: TextStyle): string {
  return `${change === 'add' ? 'Added' : 'Removed'}: ${person(user, style)} ${change === 'add' ? 'may now act' : 'no longer acts'} for ${person(owner, style)}.`;
}
