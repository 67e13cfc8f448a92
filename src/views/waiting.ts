import { isCatalogPause } from '../core/catalog/catalogPause.js';
import type { BackfillReport } from '../core/file/status.js';
import type { EscalationMessage } from '../core/messenger.js';
import type { EscalationStepFacts } from '../core/announce/escalation.js';
import { formatTime } from './format.js';
import type { NamePerson, Outside, Quote } from './notices.js';

// Where a backfill stands, in one sentence, for every view: the status message in Slack, the CLI's status.

/** ", N of them waiting out Slack's rate limit" while Slack makes announcements wait (the gate says who). */
function rateLimited(report: BackfillReport): string {
  const waiting = report.consumers.filter((c) => c.announceRetryAt && !c.messageTs && !c.undeliverable).length;
  return waiting ? `, ${waiting} of them waiting out Slack's rate limit` : '';
}

/** Whom an escalation step tells, as a sentence names it. */
function escalationTarget(step: EscalationStepFacts, name: NamePerson, outside: Outside): string {
  if (step.names === null) return 'the delegates';
  if ('channel' in step.names) return outside(`#${step.names.channel}`);
  if ('usergroup' in step.names) return `the on-call group ${outside(step.names.usergroup)}`;
  return `the on-call ${name(step.names.user)}`;
}

/**
 * Since when an owner has been waited on (their announcement went out), how far their escalation path has gone
 * and which step is next: `since 2026-11-16 09:02 UTC; escalated to the delegates at …; next: #C0FINANCE at …`.
 */
function waitedSince(report: BackfillReport, consumer: string, name: NamePerson, outside: Outside): string {
  const announced = report.steps.find((s) => s.kind === 'announce' && s.key === consumer && (s.status === 'done' || s.status === 'undeliverable'));
  const path = report.escalations.filter((e) => e.consumer === consumer);
  const sent = path.filter((e) => e.status === 'sent').at(-1);
  const next = path.find((e) => e.status === 'waiting' || e.status === 'sending');
  return [
    ...(announced?.finishedAt ? [`since ${formatTime(announced.finishedAt)}`] : []),
    ...(sent ? [`escalated to ${escalationTarget(sent, name, outside)}${sent.sentAt ? ` at ${formatTime(sent.sentAt)}` : ''}`] : []),
    ...(next ? [`next: ${escalationTarget(next, name, outside)} ${next.dueAt ? `at ${formatTime(next.dueAt)}` : `${next.after} after the announcement`}`] : []),
  ].join('; ');
}

/**
 * Who or what the backfill waits on now, in one sentence: every backfill that is not finished either has work
 * in flight or waits on a named person, and says which; `name`, `quote` and `outside` are the view's way with
 * people, commands and text from outside (consumer names, Slack's answers, a breach's words).
 */
export function waitingOn(report: BackfillReport, name: NamePerson, quote: Quote, outside: Outside): string {
  const { backfill, consumers, steps, targets } = report;
  const open = (kind: string) => steps.filter((s) => s.kind === kind && !['done', 'undeliverable', 'skipped', 'failed'].includes(s.status)).length;
  const missing = consumers.filter((c) => c.notifyRule === 'before' && !c.ackedAt && !c.overriddenBy);
  const unreachable = missing.filter((c) => c.undeliverable);
  const reachable = missing.filter((c) => !c.undeliverable);
  // "(settlement_report, since …; next: …)": the consumer, then how long and how far it has been escalated.
  const about = (c: (typeof missing)[number]) => [outside(c.consumer), waitedSince(report, c.consumer, name, outside)].filter(Boolean).join(', ');
  const cannot = unreachable.map((c) => `${name(c.owner)} (${about(c)}) cannot be reached (Slack: ${outside(c.undeliverable ?? '')}): a delegate's acknowledgement or an operator's override with a reason`);
  switch (backfill.state) {
    case 'announced':
    case 'held': {
      const parts = [
        ...(backfill.state === 'held' ? ['the owner who held it to acknowledge (or an operator to cancel it)'] : []),
        ...(reachable.length ? [`acknowledgements from ${reachable.map((c) => `${name(c.owner)} (${about(c)})`).join(', ')}`] : []),
        ...cannot,
        ...(backfill.needsSecondApproval && !report.secondApproval ? ['a second operator\'s approval of its size'] : []),
        ...(open('announce') ? [`${open('announce')} announcement(s) still being delivered${rateLimited(report)}`] : []),
      ];
      return `Waiting on ${parts.join('; ') || 'a second operator\'s approval'}.`;
    }
    case 'approved':
      return open('announce') ? `Approved; waiting for ${open('announce')} announcement(s) to go out before it runs${rateLimited(report)}.` : 'Approved; the workers start it now.';
    case 'paused': {
      // A continue is refused while the catalog differs from what was announced, whatever paused it: it is not offered then.
      if (report.catalogChanged?.length) {
        return `Waiting on an operator: the catalog still differs from what was announced (${report.catalogChanged.map(outside).join(', ')}): ` +
          `put it back as announced, then ${quote(`continue ${backfill.id} <reason>`)}; or ${quote('stop')} / ${quote('rollback')}.`;
      }
      // Paused for a catalog put back since: nothing to accept, a continue runs it on.
      if (isCatalogPause(backfill)) {
        return `Waiting on an operator: the catalog is as announced again, so ${quote(`continue ${backfill.id} <reason>`)} runs it on; or ${quote('stop')} / ${quote('rollback')}.`;
      }
      const breached = targets.filter((t) => t.breach).map((t) => outside(t.breach ?? '')).join('; ');
      return `Waiting on an operator: ${quote(`continue ${backfill.id} [hours] <reason>`)} accepts the partitions outside their envelope (${breached || 'see the reconciliation'}), or ${quote('stop')} / ${quote('rollback')}.`;
    }
    case 'running':
      return `In flight: ${open('stage')} to stage, ${open('publish')} to publish, watermark ${open('watermark') ? 'to move' : 'moved'}.`;
    case 'replaying':
      return `In flight: ${open('replay')} consumer replay(s) to go.`;
    case 'comparing':
      return 'In flight: comparing the signed figures with the rebuilt reports.';
    case 'rolling_back':
      return `Rolling back: ${open('replay')} replay(s) and ${open('notify')} message(s) to go.`;
    case 'stopped':
    case 'failed':
      return backfill.publishedAny
        ? `Finished ${backfill.state}, with partitions published: it holds its hours until an operator rolls it back (${quote(`rollback ${backfill.id}`)}).`
        : `Finished ${backfill.state}; nothing of it was published.`;
    case 'done':
    case 'cancelled':
    case 'rolled_back':
      return `Finished: ${backfill.state.replace('_', ' ')}.`;
    default: {
      const unreachableState: never = backfill.state;
      return unreachableState;
    }
  }
}

/**
 * What one step of an escalation path tells its people: whose acknowledgement is missing and since when, and
 * what they can do about it. The delegates' DM carries the announcement with its buttons below these words.
 */
export function escalationText(message: Pick<EscalationMessage, 'backfillId' | 'consumer' | 'owner' | 'facts' | 'to'>, name: NamePerson, quote: Quote, outside: Outside): string {
  const { backfillId, consumer, owner, facts } = message;
  const waiting = `backfill #${backfillId} of ${outside(facts.pipeline)} is waiting for ${name(owner)} to acknowledge it for ${outside(consumer)}` +
    `${facts.since ? ` since ${formatTime(facts.since)}` : ''} (escalation step ${facts.step} of ${facts.steps})`;
  const override = `an operator can ${quote(`/backfill override ${backfillId} <reason>`)}`;
  switch (message.to.kind) {
    case 'delegates':
      return `The ${waiting}. You are their delegate: Acknowledge or Hold answers in their place.`;
    case 'channel':
      return `The ${waiting}. Their delegates can acknowledge in their place, or ${override}.`;
    case 'oncall':
      return `You are on call: the ${waiting}. Reach them, or ${override}.`;
    default: {
      const unknown: never = message.to;
      return unknown;
    }
  }
}
