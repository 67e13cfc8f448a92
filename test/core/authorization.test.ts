// Who may do what, tested once below both front ends (src/core/authorization.ts): the rules the Slack command
// and the CLI both apply, and what an action taken on someone else's behalf leaves in the timeline.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMANDS, findCommand } from '../../src/commands/table.js';
import { authorize, principalOf, runActing, type Acting, type Rule } from '../../src/core/authorization.js';
import { acknowledge, approveCapacity, cancelBackfill, hold } from '../../src/core/announce/gate.js';
import { addDelegate, signReport } from '../../src/core/finance/signing.js';
import { startBackfill } from '../../src/core/announce/start.js';
import { listEvents } from '../../src/db/events.js';
import { ErrorCode, isBackfillError } from '../../src/errors.js';
import { createTestEngine, type TestEngine } from '../support/engine.js';

const OPERATOR: Acting = { actor: 'U07ONCALL', operator: true };
const VISITOR: Acting = { actor: 'U07VISITOR', operator: false };
const CLI_OPERATOR: Acting = { actor: 'cli:dana@ops-1', operator: true };

function refusal(acting: Acting, rule: Rule, action = 'do it'): string | undefined {
  try {
    authorize(acting, rule, action);
    return undefined;
  } catch (error) {
    expect(isBackfillError(error, ErrorCode.NotAllowed)).toBe(true);
    return (error as Error).message;
  }
}

describe('authorization, the same for every entry point', () => {
  it('lets anyone read, and only operators run the operators\' commands', () => {
    expect(refusal(VISITOR, 'anyone')).toBeUndefined();
    expect(refusal(OPERATOR, 'operator')).toBeUndefined();
    expect(refusal(VISITOR, 'operator', 'stop a backfill')).toBe('<@U07VISITOR> is not a backfill operator, so cannot stop a backfill. ' +
      'Operators are listed in BACKFILL_OPERATORS (Slack users) or BACKFILL_CLI_OPERATORS (OS users of the CLI); ask one of them, or ask to be added.');
    // Owners and signers are checked against the rows by the action itself; nothing is refused up front.
    expect(refusal(VISITOR, 'owner')).toBeUndefined();
    expect(refusal(VISITOR, 'signer')).toBeUndefined();
  });

  it('lets only an operator with a reason act on someone else\'s behalf, with that person\'s rights', () => {
    const forSettle = { ...CLI_OPERATOR, onBehalfOf: 'U07SETTLE' };
    expect(refusal(forSettle, 'owner', 'acknowledge')).toBe('Acting on behalf of <@U07SETTLE> needs a reason, kept in the timeline: add --reason "<why they cannot acknowledge themselves>".');
    expect(refusal({ ...forSettle, reason: '   ' }, 'owner', 'acknowledge')).toMatch(/needs a reason/);
    expect(refusal({ ...forSettle, operator: false, reason: 'asked me' }, 'signer', 'sign a report'))
      .toBe('cli:dana@ops-1 is not an operator, so cannot sign a report on behalf of <@U07SETTLE>. Only an operator may act for someone else; <@U07SETTLE> can do it themselves.');
    expect(refusal({ ...forSettle, reason: 'on a plane' }, 'owner', 'acknowledge')).toBeUndefined();
    expect(principalOf({ ...forSettle, reason: 'on a plane' })).toBe('U07SETTLE');
    expect(principalOf(CLI_OPERATOR)).toBe('cli:dana@ops-1');
  });

  it('uses only the rights of the person acted for: an operators\' command for someone who is not an operator is refused', () => {
    const forRandom = { ...CLI_OPERATOR, onBehalfOf: 'U0RANDOM1', reason: 'x' };
    expect(refusal(forRandom, 'operator', 'cancel a backfill')).toBe('<@U0RANDOM1> is not a backfill operator the CLI knows of, so cli:dana@ops-1 cannot ' +
      'cancel a backfill on their behalf: acting for someone uses their rights, not yours. On the CLI the operators acted for are the Slack users in ' +
      'BACKFILL_OPERATORS and the Slack ids in BACKFILL_CLI_OPERATORS (dana=U07DANA), not the operators\' user group; do it without --as, or ask an operator.');
    expect(refusal({ ...forRandom, onBehalfOfOperator: true }, 'operator', 'cancel a backfill')).toBeUndefined();
    // Owners and signers are still checked against the rows, for the person acted for.
    expect(refusal(forRandom, 'owner', 'acknowledge')).toBeUndefined();
  });

  it('takes a mapped CLI user as their Slack id, and --as themselves as acting as themselves', () => {
    const dana: Acting = { actor: 'cli:dana@ops-1', person: 'U07DANA', operator: true };
    expect(principalOf(dana)).toBe('U07DANA');
    // No reason needed and no operator check on "someone else": it is the same person.
    expect(refusal({ ...dana, onBehalfOf: 'U07DANA' }, 'operator', 'approve a backfill')).toBeUndefined();
    expect(principalOf({ ...dana, onBehalfOf: 'U07DANA' })).toBe('U07DANA');
    expect(principalOf({ ...dana, onBehalfOf: 'U07LEAD', reason: 'x' })).toBe('U07LEAD');
  });

  it('has one rule for every command, offered on Slack, the CLI or both', () => {
    const names = COMMANDS.map((c) => c.name);
    expect(new Set(names).size).toBe(names.length);
    for (const name of ['plan', 'start', 'override', 'cancel', 'approve', 'stop', 'continue', 'rollback']) {
      expect(findCommand(name, 'slack')?.rule).toBe('operator');
      expect(findCommand(name, 'cli')?.rule).toBe('operator');
    }
    expect(findCommand('ack', 'cli')?.rule).toBe('owner');
    expect(findCommand('ack', 'slack')).toBeUndefined();
    expect(findCommand('sign', 'slack')?.rule).toBe('signer');
    expect(findCommand('paid-against', 'cli')?.rule).toBe('anyone');
  });
});

describe('an action on someone else\'s behalf, in the timeline', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    engine = await createTestEngine();
  });
  afterAll(async () => engine.close());

  it('names the actor and the person acted for; the gate counts the person acted for', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor: 'U07ONCALL' });
    const acting: Acting = { ...CLI_OPERATOR, onBehalfOf: 'U07SETTLE', reason: 'Dana is on a plane' };
    const result = await runActing(acting, () => acknowledge(engine.ctx, { backfillId: backfill.id, actor: principalOf(acting) }));
    expect(result.changed).toBe(true);
    expect(result.waitingFor.map((w) => w.consumer)).toEqual(['payout_export']);
    const acknowledged = (await listEvents(engine.ctx.pool, backfill.id)).filter((e) => e.kind === 'acknowledged');
    expect(acknowledged.map((e) => ({ actor: e.actor, onBehalfOf: e.onBehalfOf, onBehalfReason: e.onBehalfReason }))).toEqual([
      { actor: 'cli:dana@ops-1', onBehalfOf: 'U07SETTLE', onBehalfReason: 'Dana is on a plane' },
    ]);
    // Outside the command, events are the actor's own again.
    await acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07PAYOUTS' });
    const last = (await listEvents(engine.ctx.pool, backfill.id)).filter((e) => e.kind === 'acknowledged').at(-1);
    expect(last).toMatchObject({ actor: 'U07PAYOUTS', onBehalfOf: null, onBehalfReason: null });
  });

  it('lets an owner who held on the CLI as a mapped user (settle=U07SETTLE) release it on Slack: one person', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15T14:00..2026-11-15T15:00', reason: 'one holder, two front ends', actor: 'U07ONCALL' });
    const settleCli: Acting = { actor: 'cli:settle@ops-1', person: 'U07SETTLE', operator: true };
    await runActing(settleCli, () => hold(engine.ctx, { backfillId: backfill.id, actor: principalOf(settleCli), reason: 'checking the export' }));
    const { rows } = await engine.ctx.pool.query(`SELECT actor, actor_person FROM backfill.events WHERE backfill_id = $1 AND kind = 'held'`, [backfill.id]);
    expect(rows).toEqual([{ actor: 'cli:settle@ops-1', actor_person: 'U07SETTLE' }]);
    await acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07SETTLE' });
    const released = (await listEvents(engine.ctx.pool, backfill.id)).filter((e) => e.kind === 'released');
    expect(released.map((e) => e.actor)).toEqual(['U07SETTLE']);
    await cancelBackfill(engine.ctx, { backfillId: backfill.id, actor: 'U07ONCALL' });
  });

  it('owners or their delegates acknowledge and hold, a report\'s signers sign it, and nobody else, from any entry point', async () => {
    const { backfill } = await startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15T12:00..2026-11-15T13:00', reason: 'owner and signer rules', actor: 'U07ONCALL' });
    const notAllowed = (promise: Promise<unknown>) => expect(promise).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.NotAllowed));
    await notAllowed(acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07VISITOR' }));
    await notAllowed(hold(engine.ctx, { backfillId: backfill.id, actor: 'U07VISITOR' }));
    await addDelegate(engine.ctx, { owner: 'U07SETTLE', delegate: 'U07DEPUTY', actor: 'U07ONCALL' });
    const byDelegate = await acknowledge(engine.ctx, { backfillId: backfill.id, actor: 'U07DEPUTY', consumer: 'settlement_report' });
    expect(byDelegate.changed).toBe(true);
    await notAllowed(signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: 'U07DEPUTY' }));
    const signed = await signReport(engine.ctx, { report: 'settlement_report', period: '2026-11-15', actor: 'U07SETTLE' });
    expect(signed.signedBy).toBe('U07SETTLE');
  });
});

describe('the two-operator rule counts people, whichever front end they use', () => {
  let engine: TestEngine;
  beforeAll(async () => {
    // Six partitions over a limit of three: every backfill here waits for a second operator.
    engine = await createTestEngine('month-end', { CAPACITY_LIMIT: '3' });
  });
  afterAll(async () => engine.close());

  const DANA_CLI: Acting = { actor: 'cli:dana@ops-1', person: 'U07DANA', operator: true };
  const notAllowed = (promise: Promise<unknown>, message: RegExp) =>
    expect(promise).rejects.toSatisfy((error: unknown) => isBackfillError(error, ErrorCode.NotAllowed) && message.test(error.message));
  // One night, so each test first cancels the one before it (overlapping backfills are refused).
  const start = async (actor: string) => {
    const { rows } = await engine.ctx.pool.query<{ id: number }>(`SELECT id::int FROM backfill.backfills WHERE state IN ('announced', 'approved')`);
    for (const row of rows) await cancelBackfill(engine.ctx, { backfillId: row.id, actor: 'U07ONCALL' });
    return startBackfill(engine.ctx, { pipeline: 'orders', target: '2026-11-15', reason: 'currency parsed as text', actor });
  };
  const approvals = async (backfillId: number) =>
    (await engine.ctx.pool.query<{ operator: string }>('SELECT operator FROM backfill.capacity_approvals WHERE backfill_id = $1', [backfillId])).rows.map((r) => r.operator);

  it('takes dana on the CLI (dana=U07DANA) and U07DANA on Slack as one person, and records the CLI as the actor', async () => {
    const { backfill } = await runActing(DANA_CLI, () => start(principalOf(DANA_CLI)));
    expect(backfill.needsSecondApproval).toBe(true);
    expect(backfill.requestedBy).toBe('U07DANA');
    const { rows } = await engine.ctx.pool.query(`SELECT actor, actor_person, on_behalf_of FROM backfill.events WHERE backfill_id = $1 AND kind = 'requested'`, [backfill.id]);
    expect(rows).toEqual([{ actor: 'cli:dana@ops-1', actor_person: 'U07DANA', on_behalf_of: null }]);
    // On Slack there is no acting context: the Slack user is the principal.
    await notAllowed(approveCapacity(engine.ctx, { backfillId: backfill.id, actor: 'U07DANA' }), /^<@U07DANA> asked for backfill #\d+, so cannot also be its second approval/);
    expect(await approvals(backfill.id)).toEqual([]);
    const approved = await approveCapacity(engine.ctx, { backfillId: backfill.id, actor: 'U07LEAD' });
    expect(approved.changed).toBe(true);
    expect(await approvals(backfill.id)).toEqual(['U07LEAD']);
  });

  it('refuses U07DANA\'s backfill to dana on the CLI, even acting for another operator', async () => {
    const { backfill } = await start('U07DANA');
    await notAllowed(runActing(DANA_CLI, () => approveCapacity(engine.ctx, { backfillId: backfill.id, actor: principalOf(DANA_CLI) })), /^<@U07DANA> asked for backfill/);
    const forLead: Acting = { ...DANA_CLI, onBehalfOf: 'U07LEAD', onBehalfOfOperator: true, reason: 'lead said yes by phone' };
    await notAllowed(runActing(forLead, () => approveCapacity(engine.ctx, { backfillId: backfill.id, actor: principalOf(forLead) })),
      /^<@U07DANA> asked for backfill #\d+, so cannot be its second approval on behalf of <@U07LEAD> either: another operator must approve it, as themselves\.$/);
    expect(await approvals(backfill.id)).toEqual([]);
  });

  it('refuses the real actor behind a request made on someone else\'s behalf, and the person it was made for', async () => {
    const unmapped: Acting = { actor: 'cli:sam@ops-2', operator: true };
    const forLead: Acting = { ...unmapped, onBehalfOf: 'U07LEAD', onBehalfOfOperator: true, reason: 'lead is driving' };
    const { backfill } = await runActing(forLead, () => start(principalOf(forLead)));
    expect(backfill.requestedBy).toBe('U07LEAD');
    await notAllowed(runActing(unmapped, () => approveCapacity(engine.ctx, { backfillId: backfill.id, actor: principalOf(unmapped) })), /^cli:sam@ops-2 asked for backfill/);
    await notAllowed(approveCapacity(engine.ctx, { backfillId: backfill.id, actor: 'U07LEAD' }), /^<@U07LEAD> asked for backfill/);
    expect(await approvals(backfill.id)).toEqual([]);
    const byDana = await runActing(DANA_CLI, () => approveCapacity(engine.ctx, { backfillId: backfill.id, actor: principalOf(DANA_CLI) }));
    expect(byDana.changed).toBe(true);
    expect(await approvals(backfill.id)).toEqual(['U07DANA']);
  });
});
