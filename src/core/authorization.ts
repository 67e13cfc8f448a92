import { actsForSomeoneElse, type Acting } from '../db/acting.js';
import { mention } from './messenger.js';
import { BackfillError, ErrorCode } from '../errors.js';

export { principalOf, runActing, type Acting } from '../db/acting.js';

// Who may do what, for every entry point (Slack, the CLI, plain-word questions), decided here:
//   anyone    status, the backfill log, what was paid against
//   operator  plan, start, approve, override, cancel, stop, continue, rollback, tick, retention, the catalog of
//             signers and delegates. Slack: BACKFILL_OPERATORS or the operators user group; the CLI: the OS
//             users in BACKFILL_CLI_OPERATORS, or, when that is empty, whoever holds the database's credentials.
//             An entry dana=U07DANA makes the CLI's dana the Slack user U07DANA for every rule that compares
//             people (the two-operator rule, who holds), so one person is one person on both front ends.
//   owner     acknowledge or hold: the consumer's owner or one of their delegates (checked against the
//             consumers table inside the transaction, src/core/announce/gate.ts)
//   signer    sign a report's figure: someone on that report's signers list (src/core/finance/signing.ts)
// Acting on behalf of someone else (the CLI's --as) uses that person's rights, and only theirs, for the owner,
// signer and operator rules: it is refused unless the actor is an operator and gives a reason, and an
// operators' command is refused unless the person acted for is an operator too. Every event of it names both
// (backfill.events.actor, on_behalf_of, on_behalf_reason).

export type Rule = 'anyone' | 'operator' | 'owner' | 'signer';

/**
 * Refuses an action the actor may not take under `rule`, with a sentence saying who may. The owner and signer
 * rules are checked again, against the rows, by the core function that takes the action; this checks what can
 * be known before: operator status and the terms of acting on someone else's behalf.
 */
export function authorize(acting: Acting, rule: Rule, action: string): void {
  if (actsForSomeoneElse(acting)) {
    if (!acting.operator) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `${mention(acting.actor)} is not an operator, so cannot ${action} on behalf of ${mention(acting.onBehalfOf)}. ` +
        `Only an operator may act for someone else; ${mention(acting.onBehalfOf)} can do it themselves.`);
    }
    if (!acting.reason?.trim()) {
      throw new BackfillError(ErrorCode.NotAllowed,
        `Acting on behalf of ${mention(acting.onBehalfOf)} needs a reason, kept in the timeline: add --reason "<why they cannot ${action} themselves>".`);
    }
  }
  if (rule === 'operator' && !acting.operator) {
    throw new BackfillError(ErrorCode.NotAllowed,
      `${mention(acting.actor)} is not a backfill operator, so cannot ${action}. Operators are listed in BACKFILL_OPERATORS ` +
      '(Slack users) or BACKFILL_CLI_OPERATORS (OS users of the CLI); ask one of them, or ask to be added.');
  }
  // With someone else's rights, an operator is no more than the person acted for. The CLI cannot ask Slack who
  // is in the operators' user group, so it knows operators only from its explicit lists, and says so.
  if (rule === 'operator' && actsForSomeoneElse(acting) && acting.onBehalfOfOperator !== true) {
    throw new BackfillError(ErrorCode.NotAllowed,
      `${mention(acting.onBehalfOf)} is not a backfill operator the CLI knows of, so ${mention(acting.actor)} cannot ${action} on their behalf: acting for someone uses ` +
      'their rights, not yours. On the CLI the operators acted for are the Slack users in BACKFILL_OPERATORS and the Slack ids in ' +
      'BACKFILL_CLI_OPERATORS (dana=U07DANA), not the operators\' user group; do it without --as, or ask an operator.');
  }
}
