import { acknowledge, approveCapacity, cancelBackfill, hold, overrideGate, type GateResult } from '../core/announce/gate.js';
import { startBackfill, type StartResult } from '../core/announce/start.js';
import { applyCatalog, planCatalog, type CatalogInput } from '../core/catalog/apply.js';
import type { CatalogPlan } from '../core/catalog/plan.js';
import type { EngineContext } from '../core/context.js';
import { tick, type TickResult } from '../core/recompute/tick.js';
import { summarizeCosts, type CostSummary } from '../core/file/costs.js';
import { buildIncidentPackage, type IncidentPackage } from '../core/file/incidentPackage.js';
import { loadBackfillReport, type BackfillReport } from '../core/file/status.js';
import { answerPaidAgainst, type PaidAgainstAnswer } from '../core/finance/paidAgainst.js';
import { addDelegate, addSigner, removeDelegate, removeSigner, signReport } from '../core/finance/signing.js';
import { planBackfill, type Plan } from '../core/identify/plan.js';
import { decideProposal, listProposals, type DecisionResult } from '../core/lineage/proposals.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../core/recovery/recovery.js';
import { listRetention, pruneStoredRows, type PrunedBackfill, type RetentionReport } from '../core/recovery/retention.js';
import { listRecentBackfills, type BackfillRow } from '../db/backfills.js';
import { listDelegates } from '../db/delegates.js';
import { listEvents, type TimelineEvent } from '../db/events.js';
import type { LineageProposal } from '../db/lineageEvents.js';
import { rememberPeople } from '../db/people.js';
import { findPlan } from '../db/plans.js';
import { listReportSigners, listSigners } from '../db/signers.js';
import { BackfillError, ErrorCode } from '../errors.js';
import type { Command } from './schemas.js';

// The use cases: every command a person gives, executed once, whichever front end it came from. The Slack
// listeners and the CLI parse what was typed (src/commands/arguments.ts), check who may run it
// (src/core/authorization.ts, with what each front end knows of the person), call runCommand, and render the
// facts it returns in their own words. What only a front end can do (put jobs on the queue, take them off,
// tell an incident channel, bring a status message up to date, upload a file to Slack, read a file on the
// operator's machine) it hands in as effects; the use case decides when each happens.

/** A decision a person made about a backfill, told where the backfill is followed (Slack: its incident channel). */
export type Decision =
  | { kind: 'approved'; actor: string; backfillId: number }
  | { kind: 'stopped'; actor: string; backfillId: number; reason: string; removed: number | Error }
  | { kind: 'continued'; actor: string; backfillId: number; accepted: Date[]; reason: string }
  | { kind: 'rolled_back'; actor: string; backfillId: number; restored: number }
  | { kind: 'overridden'; actor: string; backfillId: number; reason: string }
  | { kind: 'cancelled'; actor: string; backfillId: number; reason: string | undefined }
  | { kind: 'held'; actor: string; backfillId: number; consumer: string };

/** Where an incident package went, when the front end shares it (Slack: the backfill's incident thread). */
export type SharedPackage =
  | { how: 'uploaded'; channel: string; fileId: string }
  | { how: 'unchanged'; channel: string; fileId: string; uploadedAt: Date }
  | { how: 'uploading'; channel: string }
  | { how: 'no_channel' };

export interface CommandEffects {
  /** Enqueue whatever of the backfill became runnable; the workers' sweep does it too, later. */
  kick(backfillId: number): Promise<void>;
  /** Take a stopped backfill's not-yet-started jobs off the queue: how many, or why that could not be done now. */
  dequeue(backfillId: number): Promise<number | Error>;
  /** Tell the people following the backfill what was decided. */
  tell(decision: Decision): Promise<void>;
  /** The backfill changed: where its status is shown is brought up to date. */
  changed(backfillId: number): Promise<void>;
  /** An owner answered their announcement: where they saw it says so (Slack: the DM's buttons are replaced). */
  answered?(answer: { backfillId: number; consumer: string; action: 'acknowledge' | 'hold'; actor: string; at: Date }): Promise<void>;
  /** The incident package shared with the people of the incident; without it, `log` returns the diff and the timeline. */
  sharePackage?(backfillId: number): Promise<SharedPackage>;
  /** The catalog file a catalog command names, as text (the CLI reads it on the operator's machine). */
  readCatalog?(file: string): Promise<CatalogInput>;
}

/** What the CLI's flags add to a command: the same use case, told a little more. */
export interface CommandOptions {
  /** ack and hold: for which of the person's consumers (one of several they own). */
  consumer?: string | undefined;
  /** plan and start: the reason to go beyond the capacity limit. */
  limitOverride?: string | undefined;
  /** start: the plan it starts from (as `start plan <id>` says). */
  planId?: number | undefined;
  /** tick: up to which hour. */
  until?: Date | undefined;
  /** retention: drop the stored rows instead of listing them. */
  prune?: boolean | undefined;
  /** start: the channel it was started from, where its status and notices go (Slack). */
  incidentChannel?: string | undefined;
}

/** What a command did, as facts: each front end words them. */
export type CommandFacts =
  | { kind: 'help' }
  | { kind: 'migrate' }
  | { kind: 'plan'; plan: Plan }
  | { kind: 'start'; started: StartResult; planId: number | undefined }
  | { kind: 'ack' | 'hold'; backfillId: number; consumer: string | undefined; result: GateResult }
  | { kind: 'override'; backfillId: number; approved: boolean }
  | { kind: 'cancel'; backfillId: number }
  | { kind: 'approve'; backfillId: number; result: GateResult }
  | { kind: 'stop'; backfillId: number; removed: number | Error }
  | { kind: 'continue'; backfillId: number; accepted: Date[] }
  | { kind: 'rollback'; backfillId: number; restored: number }
  | { kind: 'status'; report: BackfillReport }
  | { kind: 'recent'; for: 'status' | 'log'; backfills: BackfillRow[] }
  | { kind: 'log'; report: BackfillReport; events: TimelineEvent[] }
  | { kind: 'shared'; backfillId: number; where: SharedPackage }
  | { kind: 'tick'; result: TickResult }
  | { kind: 'paid-against'; answer: PaidAgainstAnswer }
  | { kind: 'sign'; signed: Awaited<ReturnType<typeof signReport>> }
  | { kind: 'lineage-list'; proposals: LineageProposal[] }
  | { kind: 'lineage-decided'; decision: DecisionResult }
  | { kind: 'signer-list'; signers: { report: string; signer: string }[] }
  | { kind: 'signer'; change: 'add' | 'remove'; report: string; user: string; wasSigner: boolean; signers: string[] }
  | { kind: 'delegate-list'; delegates: { owner: string; delegate: string }[] }
  | { kind: 'delegate'; change: 'add' | 'remove'; owner: string; user: string }
  | { kind: 'export'; pkg: IncidentPackage }
  | { kind: 'costs'; summary: CostSummary }
  | { kind: 'retention'; report: RetentionReport }
  | { kind: 'pruned'; pruned: PrunedBackfill[] }
  | { kind: 'catalog-plan' | 'catalog-apply'; plan: CatalogPlan };

/** The commands that are use cases: `worker` runs a process, not a use case, and stays with the CLI. */
export type UseCase = Exclude<Command, { kind: 'worker' }>;

/** How many backfills `status` and `log` list without an id. */
const RECENT = { status: 10, log: 100 } as const;

type Run<K extends UseCase['kind']> = (ctx: EngineContext, effects: CommandEffects, command: Extract<UseCase, { kind: K }>, actor: string, options: CommandOptions) => Promise<CommandFacts>;

const USE_CASES: { [K in UseCase['kind']]: Run<K> } = {
  help: async () => ({ kind: 'help' }),
  migrate: async () => ({ kind: 'migrate' }),
  plan: async (ctx, _effects, { pipeline, target, reason }, actor, options) =>
    ({ kind: 'plan', plan: await planBackfill(ctx, { pipeline, target, reason, actor, limitOverride: options.limitOverride }) }),
  start: async (ctx, effects, { pipeline, target, reason }, actor, options) => {
    const started = await startBackfill(ctx, { pipeline, target, reason, actor, limitOverride: options.limitOverride, planId: options.planId, incidentChannel: options.incidentChannel });
    await effects.kick(started.backfill.id);
    await effects.changed(started.backfill.id);
    return { kind: 'start', started, planId: options.planId };
  },
  'start-plan': async (ctx, effects, { planId, reason }, actor, options) => {
    const frozen = await findPlan(ctx.pool, planId);
    if (!frozen) throw new BackfillError(ErrorCode.BadInput, `There is no plan #${planId}. \`plan\` makes one and shows its id.`);
    return USE_CASES.start(ctx, effects, { kind: 'start', pipeline: frozen.pipeline, target: frozen.target, reason }, actor, { ...options, planId });
  },
  ack: async (ctx, effects, { backfillId }, actor, options) => {
    const result = await acknowledge(ctx, { backfillId, actor, consumer: options.consumer });
    if (result.changed) await afterAnswer(effects, { backfillId, consumer: options.consumer, action: 'acknowledge', actor }, result);
    return { kind: 'ack', backfillId, consumer: options.consumer, result };
  },
  hold: async (ctx, effects, { backfillId, reason }, actor, options) => {
    const result = await hold(ctx, { backfillId, actor, consumer: options.consumer, reason });
    if (result.changed) await afterAnswer(effects, { backfillId, consumer: options.consumer, action: 'hold', actor }, result);
    return { kind: 'hold', backfillId, consumer: options.consumer, result };
  },
  override: async (ctx, effects, { backfillId, reason }, actor) => {
    const result = await overrideGate(ctx, { backfillId, actor, reason });
    await effects.tell({ kind: 'overridden', actor, backfillId, reason });
    await effects.kick(backfillId);
    await effects.changed(backfillId);
    return { kind: 'override', backfillId, approved: result.approved };
  },
  cancel: async (ctx, effects, { backfillId, reason }, actor) => {
    await cancelBackfill(ctx, { backfillId, actor, reason });
    await effects.tell({ kind: 'cancelled', actor, backfillId, reason });
    await effects.changed(backfillId);
    return { kind: 'cancel', backfillId };
  },
  approve: async (ctx, effects, { backfillId }, actor) => {
    const result = await approveCapacity(ctx, { backfillId, actor });
    await effects.tell({ kind: 'approved', actor, backfillId });
    if (result.approved) await effects.kick(backfillId);
    await effects.changed(backfillId);
    return { kind: 'approve', backfillId, result };
  },
  stop: async (ctx, effects, { backfillId, reason }, actor) => {
    await stopBackfill(ctx, { backfillId, actor, reason });
    // The stop is in the database already: a queued job finds it stopped and does nothing, so a queue that does
    // not answer only means its jobs are not removed now.
    const removed = await effects.dequeue(backfillId);
    await effects.tell({ kind: 'stopped', actor, backfillId, reason, removed });
    await effects.changed(backfillId);
    return { kind: 'stop', backfillId, removed };
  },
  continue: async (ctx, effects, { backfillId, reason, partitions }, actor) => {
    const { accepted } = await continueBackfill(ctx, { backfillId, actor, reason, partitions });
    await effects.tell({ kind: 'continued', actor, backfillId, accepted, reason });
    await effects.kick(backfillId);
    await effects.changed(backfillId);
    return { kind: 'continue', backfillId, accepted };
  },
  rollback: async (ctx, effects, { backfillId, reason }, actor) => {
    const { restored } = await rollbackBackfill(ctx, { backfillId, actor, reason });
    await effects.tell({ kind: 'rolled_back', actor, backfillId, restored: restored.length });
    await effects.kick(backfillId);
    await effects.changed(backfillId);
    return { kind: 'rollback', backfillId, restored: restored.length };
  },
  status: async (ctx, _effects, { backfillId }) => (backfillId === undefined
    ? { kind: 'recent', for: 'status', backfills: await listRecentBackfills(ctx.pool, RECENT.status) }
    : { kind: 'status', report: await loadBackfillReport(ctx.pool, backfillId) }),
  log: async (ctx, effects, { backfillId }) => {
    if (backfillId === undefined) return { kind: 'recent', for: 'log', backfills: await listRecentBackfills(ctx.pool, RECENT.log) };
    if (effects.sharePackage) return { kind: 'shared', backfillId, where: await effects.sharePackage(backfillId) };
    return { kind: 'log', report: await loadBackfillReport(ctx.pool, backfillId), events: await listEvents(ctx.pool, backfillId) };
  },
  tick: async (ctx, _effects, { pipeline }, actor, options) => ({ kind: 'tick', result: await tick(ctx, { pipeline, actor, until: options.until }) }),
  'paid-against': async (ctx, _effects, { report, date }) => ({ kind: 'paid-against', answer: await answerPaidAgainst(ctx.pool, { report, date }) }),
  sign: async (ctx, _effects, { report, date }, actor) => ({ kind: 'sign', signed: await signReport(ctx, { report, period: date, actor }) }),
  lineage: async (ctx, _effects, command, actor) => (command.action === 'list'
    ? { kind: 'lineage-list', proposals: await listProposals(ctx) }
    : { kind: 'lineage-decided', decision: await decideProposal(ctx, actor, command) }),
  'signer-list': async (ctx, _effects, { report }) => ({ kind: 'signer-list', signers: await listReportSigners(ctx.pool, report ?? null) }),
  signer: async (ctx, _effects, { change, report, user }, actor) => {
    const wasSigner = change === 'add' ? (await addSigner(ctx, { report, signer: user, actor }), true) : await removeSigner(ctx, { report, signer: user, actor });
    return { kind: 'signer', change, report, user, wasSigner, signers: await listSigners(ctx.pool, report) };
  },
  'delegate-list': async (ctx) => ({ kind: 'delegate-list', delegates: await listDelegates(ctx.pool) }),
  delegate: async (ctx, _effects, { change, owner, user }, actor) => {
    if (change === 'add') await addDelegate(ctx, { owner, delegate: user, actor });
    else await removeDelegate(ctx, { owner, delegate: user, actor });
    return { kind: 'delegate', change, owner, user };
  },
  export: async (ctx, _effects, { backfillId }) => ({ kind: 'export', pkg: await buildIncidentPackage(ctx.pool, backfillId) }),
  costs: async (ctx, _effects, { since }) => ({ kind: 'costs', summary: await summarizeCosts(ctx.pool, since) }),
  retention: async (ctx, _effects, { backfillId }, actor, options) => (options.prune
    ? { kind: 'pruned', pruned: await pruneStoredRows(ctx, { actor, includeRollbackRows: true, backfillId }) }
    : { kind: 'retention', report: await listRetention(ctx, { backfillId }) }),
  'catalog-plan': async (ctx, effects, { file }, actor) => ({ kind: 'catalog-plan', plan: await planCatalog(ctx.pool, await readCatalog(effects, file), actor, ctx.config) }),
  'catalog-apply': async (ctx, effects, { file }, actor) => ({ kind: 'catalog-apply', plan: await applyCatalog(ctx.pool, await readCatalog(effects, file), actor, ctx.config) }),
};

/** An owner's acknowledgement or hold took effect: their message says so, a hold is told, an open gate runs. */
async function afterAnswer(effects: CommandEffects, answer: { backfillId: number; consumer: string | undefined; action: 'acknowledge' | 'hold'; actor: string }, result: GateResult): Promise<void> {
  const { backfillId, consumer } = answer;
  if (consumer !== undefined) await effects.answered?.({ ...answer, consumer, at: new Date() });
  if (answer.action === 'hold' && consumer !== undefined) await effects.tell({ kind: 'held', actor: answer.actor, backfillId, consumer });
  if (result.approved) await effects.kick(backfillId);
  await effects.changed(backfillId);
}

async function readCatalog(effects: CommandEffects, file: string): Promise<CatalogInput> {
  if (!effects.readCatalog) throw new BackfillError(ErrorCode.BadInput, 'The catalog is applied from a file, on the CLI: `npx backfill catalog plan|apply <file>`.');
  return effects.readCatalog(file);
}

/**
 * Runs one command for `actor` (whose rights the front end has already checked against the command table's
 * rule) and returns what it did. A refusal throws a BackfillError, and nothing changed; the front end records
 * it in the timeline (src/core/refusals.ts) with what was typed.
 */
export function runCommand<K extends UseCase['kind']>(ctx: EngineContext, effects: CommandEffects, command: Extract<UseCase, { kind: K }>, actor: string, options: CommandOptions = {}): Promise<CommandFacts> {
  const run: Run<K> = USE_CASES[command.kind];
  return run(ctx, effects, command, actor, options);
}

/** The backfill a command is about, if it names one: its refusal goes into that backfill's timeline. */
export function backfillOf(command: Command): number | undefined {
  return 'backfillId' in command && typeof command.backfillId === 'number' ? command.backfillId : undefined;
}

/** Someone's display name as Slack sent it, kept so that a terminal can say who did what. */
export async function rememberName(ctx: EngineContext, slackId: string, name: string): Promise<void> {
  await rememberPeople(ctx.pool, [{ slackId, name }]);
}
