import { readFile, writeFile } from 'node:fs/promises';
import { applyCatalog, planCatalog } from '../core/catalog/apply.js';
import { renderCatalogApplied, renderCatalogPlan } from '../views/catalogPlan.js';
import { hostname, userInfo } from 'node:os';
import { buildIncidentPackage } from '../core/file/incidentPackage.js';
import { summarizeCosts } from '../core/file/costs.js';
import { decideProposal, listProposals } from '../core/lineage/proposals.js';
import { lineageDecisionReply, lineageProposalsReply } from '../views/lineage.js';
import { renderCosts } from '../views/costs.js';
import {
  acknowledgedLines, approvedLine, continuedLine, delegateChangedLine, delegatesLines, heldLine, overrideLine, planFrozenLine, rolledBackLine,
  notASignerLine, signedLine, signersLines, signersOfLine, startedLines, stoppedLine,
} from '../views/cliReplies.js';
import { incidentPackageJson, incidentPackageMarkdown } from '../views/incidentPackage.js';
import { answerPaidAgainst } from '../core/finance/paidAgainst.js';
import { addDelegate, addSigner, removeDelegate, removeSigner, signReport } from '../core/finance/signing.js';
import { parseArgs } from 'node:util';
import { checkQueue, openBackends, queueBackendOf, type RunConfig } from '../backends.js';
import { checkFlags, parseCommand, type Command } from '../commands/arguments.js';
import { cliUsage, findCommand } from '../commands/table.js';
import { findPlan } from '../db/plans.js';
import { authorize, principalOf, runActing, type Acting } from '../core/authorization.js';
import { loadConfig } from '../config.js';
import { runOn } from '../processLifecycle.js';
import type { EngineContext } from '../core/context.js';
import { acknowledge, approveCapacity, cancelBackfill, hold, overrideGate } from '../core/announce/gate.js';
import { continueBackfill, rollbackBackfill, stopBackfill } from '../core/recovery/recovery.js';
import { createStepQueue, removeQueuedJobs } from '../queue/stepQueue.js';
import { planBackfill } from '../core/identify/plan.js';
import { recordingRefusals } from '../core/refusals.js';
import { listRetention, pruneStoredRows } from '../core/recovery/retention.js';
import { startBackfill } from '../core/announce/start.js';
import { loadBackfillReport, type BackfillReport } from '../core/file/status.js';
import { tick } from '../core/engine/tick.js';
import { parseHour } from '../core/time.js';
import { listRecentBackfills } from '../db/backfills.js';
import { listDelegates } from '../db/delegates.js';
import { listEvents } from '../db/events.js';
import { loadPeople } from '../db/people.js';
import { migrate } from '../db/migrate.js';
import { createPool, explainCancellation, poolBounds } from '../db/pool.js';
import { listReportSigners, listSigners } from '../db/signers.js';
import { BackfillError, ErrorCode, isBackfillError } from '../errors.js';
import { fromSlackMarkup, PLAIN, renderBackfillList, renderDiff, renderPaidAgainst, renderPlan, renderPruned, renderRetention, renderStatus, renderTick, renderTimeline, type TextStyle } from '../views/text.js';
import { PrintingMessenger, runUntilSettled, TerminalProgress } from './runner.js';
import { isSlackUserId } from '../slackUser.js';

const USAGE = cliUsage();

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      as: { type: 'string' },
      reason: { type: 'string' },
      consumer: { type: 'string' },
      'override-limit': { type: 'string' },
      plan: { type: 'string' },
      until: { type: 'string' },
      since: { type: 'string' },
      format: { type: 'string', default: 'md' },
      out: { type: 'string' },
      wait: { type: 'boolean', default: false },
      prune: { type: 'boolean', default: false },
      create: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  const [command, ...args] = positionals;
  // Flags are checked like the command's words: no control characters, a reason within its limit.
  checkFlags(values);
  // Checked before anything is opened: a mistyped command changes nothing and needs no database.
  const parsed = command === undefined || values.help ? ({ kind: 'help' } as const) : parseCommand('cli', commandWords(positionals, values.since));
  const spec = command === undefined ? undefined : findCommand(command, 'cli');
  if (parsed.kind === 'help' || !spec) {
    console.log(USAGE);
    return command || values.help ? 0 : 2;
  }
  if (values.as !== undefined && !isSlackUserId(values.as)) {
    throw new BackfillError(ErrorCode.BadInput, `--as takes the Slack user id of the person acted for, such as U07SETTLE; "${values.as}" is not one.`);
  }
  // Only `migrate --create` creates a configured database: a mistyped name is said, not silently made.
  const backends = await openBackends(loadConfig(), { create: command === 'migrate' && values.create, checkQueue: false, log: (line) => console.error(line) });
  // On stderr, so that what a command prints (an export, say) stays the whole of stdout.
  console.error(backends.summary);
  return runOn(backends, async (config) => {
    const pool = createPool(config.DATABASE_URL, 'backfill-cli', poolBounds(config));
    const ctx: EngineContext = { pool, config };
    const acting = cliActing(config, values.as, values.reason);
    // Whose rights it uses (--as, else the CLI user as cliActing maps them); events name the CLI user (runActing).
    const actor = principalOf(acting);
    let style: TextStyle = PLAIN;
    try {
      await migrate(pool);
      style = { people: await loadPeople(pool), colour: process.stdout.isTTY === true && !config.NO_COLOR };
      await recordingRefusals(ctx, { actor: acting.actor, action: spec.name, input: { args, as: values.as ?? null } }, async () => {
        authorize(acting, spec.rule, spec.action);
        if (parsed.kind === 'retention' && values.prune) authorize(acting, 'operator', 'prune stored rows');
      });
      return await runActing(acting, () => run(ctx, parsed, { ...values, actor, style }));
    } catch (error) {
      throw forTerminal(error, parsed, style);
    } finally {
      await pool.end();
    }
  });
}

/**
 * The CLI's actor: its OS user and host, and the Slack user BACKFILL_CLI_OPERATORS maps that user to, if any;
 * an operator when the list is empty or names that user. The person acted for (--as) is an operator only when
 * an explicit list names them (BACKFILL_OPERATORS, or a Slack id in BACKFILL_CLI_OPERATORS): the CLI does not
 * talk to Slack, so it cannot see the operators' user group.
 */
function cliActing(config: RunConfig, onBehalfOf: string | undefined, reason: string | undefined): Acting {
  const user = userInfo().username;
  const operators = config.BACKFILL_CLI_OPERATORS;
  const entry = operators.find((operator) => operator.user === user);
  const onBehalfOfOperator = onBehalfOf !== undefined
    && (config.BACKFILL_OPERATORS.includes(onBehalfOf) || operators.some((operator) => operator.slackId === onBehalfOf));
  return {
    actor: `cli:${user}@${hostname()}`, person: entry?.slackId, operator: operators.length === 0 || entry !== undefined,
    onBehalfOf, onBehalfOfOperator, reason,
  };
}

interface Options {
  actor: string;
  /** How text shows people (their names) and whether it colours (a terminal, without NO_COLOR). */
  style: TextStyle;
  consumer?: string | undefined;
  'override-limit'?: string | undefined;
  plan?: string | undefined;
  until?: string | undefined;
  wait?: boolean | undefined;
  prune?: boolean | undefined;
  format?: string | undefined;
  out?: string | undefined;
}

/** The commands the CLI offers, as src/commands/arguments.ts parses them. */
type CliCommand = Exclude<Command, { kind: 'help' }>;
type Handler<K extends CliCommand['kind']> = (ctx: EngineContext, command: Extract<CliCommand, { kind: K }>, options: Options) => Promise<number>;

/** What each CLI command does; src/commands/table.ts says who may run it and how it is written. */
const HANDLERS: { [K in CliCommand['kind']]: Handler<K> } = {
  migrate: async () => {
    console.log('Migrations applied.');
    return 0;
  },
  plan: async (ctx, { pipeline, target, reason }, options) => {
    const { actor } = options;
    const request = { pipeline, target, reason, actor, limitOverride: options['override-limit'] };
    const plan = await recordingRefusals(ctx, { actor, action: 'plan', input: { pipeline, target } }, () => planBackfill(ctx, request));
    console.log(renderPlan(plan, options.style));
    console.log(planFrozenLine(plan));
    return 0;
  },
  start: async (ctx, { pipeline, target, reason }, options) => {
    const { actor } = options;
    const planId = options.plan === undefined ? undefined : backfillId(options.plan);
    const request = { pipeline, target, reason, actor, limitOverride: options['override-limit'], planId };
    const result = await recordingRefusals(ctx, { actor, action: 'start', input: { pipeline, target, planId } }, () => startBackfill(ctx, request));
    for (const line of startedLines(result.backfill, result.announcements, options.style)) console.log(line);
    return settle(ctx, result.backfill.id, options);
  },
  'start-plan': async (ctx, { planId, reason }, options) => {
    const frozen = await findPlan(ctx.pool, planId);
    if (!frozen) throw new BackfillError(ErrorCode.BadInput, `There is no plan #${planId}. \`backfill plan\` makes one and shows its id.`);
    return HANDLERS.start(ctx, { kind: 'start', pipeline: frozen.pipeline, target: frozen.target, reason }, { ...options, plan: String(planId) });
  },
  ack: async (ctx, { backfillId: id }, options) => {
    const { actor } = options;
    const result = await recordingRefusals(ctx, { actor, action: 'acknowledge', backfillId: id },
      () => acknowledge(ctx, { backfillId: id, actor, consumer: options.consumer }));
    for (const line of acknowledgedLines(actor, result, options.style)) console.log(line);
    return settle(ctx, id, options);
  },
  hold: async (ctx, { backfillId: id, reason }, options) => {
    const { actor } = options;
    await recordingRefusals(ctx, { actor, action: 'hold', backfillId: id },
      () => hold(ctx, { backfillId: id, actor, consumer: options.consumer, reason }));
    console.log(heldLine(id, actor, options.style));
    return 0;
  },
  override: async (ctx, { backfillId: id, reason }, options) => {
    const { actor } = options;
    const result = await recordingRefusals(ctx, { actor, action: 'override', backfillId: id },
      () => overrideGate(ctx, { backfillId: id, actor, reason }));
    console.log(overrideLine(actor, result.approved, options.style));
    return settle(ctx, id, options);
  },
  cancel: async (ctx, { backfillId: id, reason }, options) => {
    const { actor } = options;
    await recordingRefusals(ctx, { actor, action: 'cancel', backfillId: id },
      () => cancelBackfill(ctx, { backfillId: id, actor, reason }));
    console.log(`Backfill #${id} cancelled.`);
    return 0;
  },
  approve: async (ctx, { backfillId: id }, options) => {
    const { actor } = options;
    const result = await recordingRefusals(ctx, { actor, action: 'approve', backfillId: id }, () => approveCapacity(ctx, { backfillId: id, actor }));
    console.log(approvedLine(result));
    return settle(ctx, id, options);
  },
  stop: async (ctx, { backfillId: id, reason }, options) => {
    const { actor } = options;
    await recordingRefusals(ctx, { actor, action: 'stop', backfillId: id }, () => stopBackfill(ctx, { backfillId: id, actor, reason }));
    // The stop is in the database already; queued jobs would find it stopped and do nothing, so a Redis that
    // does not answer only means they are not removed now.
    const unreachable = await checkQueue(queueBackendOf(ctx.config)).then(() => undefined, (error: unknown) => error as Error);
    if (unreachable) {
      console.log(stoppedLine(id, unreachable));
      return 0;
    }
    const queue = createStepQueue(ctx.config);
    try {
      console.log(stoppedLine(id, await removeQueuedJobs(queue, id)));
    } finally {
      await queue.close();
    }
    return 0;
  },
  continue: async (ctx, { backfillId: id, reason, partitions }, options) => {
    const { actor } = options;
    const { accepted } = await recordingRefusals(ctx, { actor, action: 'continue', backfillId: id },
      () => continueBackfill(ctx, { backfillId: id, actor, reason, partitions }));
    console.log(continuedLine(id, accepted));
    return settle(ctx, id, options);
  },
  rollback: async (ctx, { backfillId: id, reason }, options) => {
    const { actor } = options;
    const { restored } = await recordingRefusals(ctx, { actor, action: 'rollback', backfillId: id },
      () => rollbackBackfill(ctx, { backfillId: id, actor, reason }));
    console.log(rolledBackLine(id, restored.length));
    return settle(ctx, id, options);
  },
  status: async (ctx, { backfillId: id }, options) => {
    if (id === undefined) {
      console.log(renderBackfillList(await listRecentBackfills(ctx.pool), options.style));
      return 0;
    }
    console.log(renderStatus(await loadBackfillReport(ctx.pool, id), options.style));
    return 0;
  },
  log: async (ctx, { backfillId: id }, options) => {
    if (id === undefined) {
      console.log(renderBackfillList(await listRecentBackfills(ctx.pool, 100), options.style));
      return 0;
    }
    console.log(renderDiff(await loadBackfillReport(ctx.pool, id), options.style));
    console.log(`\nTimeline:\n${renderTimeline(await listEvents(ctx.pool, id), options.style)}`);
    return 0;
  },
  tick: async (ctx, { pipeline }, options) => {
    const { actor } = options;
    const until = options.until ? parseHour(options.until) : undefined;
    console.log(renderTick(await tick(ctx, { pipeline, actor, until }), options.style));
    return 0;
  },
  'paid-against': async (ctx, { report, date }, options) => {
    const answer = await answerPaidAgainst(ctx.pool, { report, date });
    console.log(renderPaidAgainst(answer, options.style));
    return 0;
  },
  sign: async (ctx, { report, date: period }, options) => {
    const { actor } = options;
    const signed = await recordingRefusals(ctx, { actor, action: 'sign', input: { report, period } }, () => signReport(ctx, { report, period, actor }));
    console.log(signedLine(signed, options.style));
    return 0;
  },
  lineage: async (ctx, command, options) => {
    const { actor } = options;
    const reply = command.action === 'list' ? lineageProposalsReply(await listProposals(ctx))
      : lineageDecisionReply(await recordingRefusals(ctx, { actor, action: `lineage ${command.action}`, input: { proposal: command.proposalId } }, () => decideProposal(ctx, actor, command)));
    console.log(fromSlackMarkup(reply, options.style));
    return 0;
  },
  'signer-list': async (ctx, { report }, options) => {
    const rows = await listReportSigners(ctx.pool, report ?? null);
    console.log(signersLines(rows, options.style));
    return 0;
  },
  signer: async (ctx, { change, report, user }, options) => {
    const { actor } = options;
    if (change === 'add') await addSigner(ctx, { report, signer: user, actor });
    else if (!(await removeSigner(ctx, { report, signer: user, actor }))) console.log(notASignerLine(report, user, options.style));
    console.log(signersOfLine(report, await listSigners(ctx.pool, report), options.style));
    return 0;
  },
  'delegate-list': async (ctx, _command, options) => {
    const rows = await listDelegates(ctx.pool);
    console.log(delegatesLines(rows, options.style));
    return 0;
  },
  delegate: async (ctx, { change, owner, user }, options) => {
    const { actor } = options;
    if (change === 'add') await addDelegate(ctx, { owner, delegate: user, actor });
    else await removeDelegate(ctx, { owner, delegate: user, actor });
    console.log(delegateChangedLine(change, owner, user, options.style));
    return 0;
  },
  export: async (ctx, { backfillId: id }, options) => {
    if (options.format !== 'md' && options.format !== 'json') throw new BackfillError(ErrorCode.BadInput, `--format is md or json, not "${options.format ?? ''}".`);
    const pkg = await buildIncidentPackage(ctx.pool, id);
    const text = options.format === 'json' ? incidentPackageJson(pkg) : incidentPackageMarkdown(pkg);
    if (options.out) {
      await writeFile(options.out, text);
      console.log(`Wrote ${options.out}.`);
    } else {
      console.log(text);
    }
    return 0;
  },
  costs: async (ctx, { since }) => {
    console.log(renderCosts(await summarizeCosts(ctx.pool, since)));
    return 0;
  },
  retention: async (ctx, { backfillId: id }, options) => {
    const { actor } = options;
    if (!options.prune) {
      console.log(renderRetention(await listRetention(ctx, { backfillId: id })));
      return 0;
    }
    console.log(renderPruned(await pruneStoredRows(ctx, { actor, includeRollbackRows: true, backfillId: id })));
    return 0;
  },
  'catalog-plan': async (ctx, { file }, options) => {
    const { actor } = options;
    const plan = await recordingRefusals(ctx, { actor, action: 'catalog plan', input: { file } }, async () => planCatalog(ctx.pool, await readCatalogFile(file), actor, ctx.config));
    console.log(renderCatalogPlan(plan));
    return plan.refusals.length > 0 ? 1 : 0;
  },
  'catalog-apply': async (ctx, { file }, options) => {
    const { actor } = options;
    const plan = await recordingRefusals(ctx, { actor, action: 'catalog apply', input: { file } }, async () => applyCatalog(ctx.pool, await readCatalogFile(file), actor, ctx.config));
    console.log(renderCatalogApplied(plan));
    return 0;
  },
  worker: async (ctx, _command, options) => {
    const { startWorkers } = await import('../worker.js');
    const workers = await startWorkers({ ...ctx, messenger: new PrintingMessenger((line) => console.log(line), options.style) });
    console.log('Workers running; Ctrl-C stops them.');
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
    await workers.close();
    return 0;
  },
};

function run<K extends CliCommand['kind']>(ctx: EngineContext, command: Extract<CliCommand, { kind: K }>, options: Options): Promise<number> {
  const handler: Handler<K> = HANDLERS[command.kind];
  return handler(ctx, command, options);
}

async function settle(ctx: EngineContext, id: number, options: Options): Promise<number> {
  if (!options.wait) return 0;
  // A bar redrawn in place on a terminal, plain lines in a pipe; the run's own lines print above it.
  const progress = new TerminalProgress(process.stdout, id);
  const print = (line: string) => progress.print(line);
  let report: BackfillReport;
  try {
    report = await runUntilSettled(ctx, id, print, new PrintingMessenger(print, options.style), (reading) => progress.update(reading));
  } finally {
    progress.end();
  }
  console.log(renderDiff(report, options.style));
  return report.backfill.state === 'done' || report.backfill.state === 'rolled_back' ? 0 : 1;
}

/** The command's words: costs takes its date as --since, and the command table's schema checks it like any other argument. */
function commandWords(positionals: string[], since: string | undefined): string[] {
  return positionals[0] === 'costs' && since !== undefined ? [...positionals, since] : positionals;
}

async function readCatalogFile(file: string): Promise<{ text: string; source: string }> {
  try {
    return { text: await readFile(file, 'utf8'), source: file };
  } catch (error) {
    throw new BackfillError(ErrorCode.BadInput, `Cannot read the catalog file ${file}: ${(error as Error).message}. Give the path of a YAML file, e.g. src/demo/catalog.yml.`, { cause: error });
  }
}

function backfillId(text: string | undefined): number {
  if (!text || !/^[1-9]\d{0,15}$/.test(text)) throw new BackfillError(ErrorCode.BadInput, `"${text ?? ''}" is not a backfill id; ids are whole numbers such as 12.`);
  return Number(text);
}

/** What a failed command prints: a lost connection said as such, a refusal with names instead of <@U…>. */
function forTerminal(error: unknown, command: Command, style: TextStyle): unknown {
  if (lostConnection(error)) return connectionLostError(command, error);
  // A refusal is written once, in Slack's markup; the terminal gets names instead of <@U…>.
  return isBackfillError(error) ? new BackfillError(error.code, fromSlackMarkup(error.message, style), { cause: error, retryable: error.retryable, details: error.details }) : error;
}

/**
 * PostgreSQL went away under the command: a restart (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
 * cannot_connect_now), pg_terminate_backend (57P01 too), a class 08 connection exception, or the socket cut
 * under node-postgres. A refusal the bot wrote itself is never one of these.
 */
function lostConnection(error: unknown): boolean {
  for (let cause = error, depth = 0; cause instanceof Error && depth < 5; cause = cause.cause, depth++) {
    if (isBackfillError(cause)) return false;
    const code = (cause as { code?: unknown }).code;
    if (typeof code === 'string' && (/^(57P0[123]|08[0-9A-Z]{3})$/.test(code) || ['ECONNRESET', 'ECONNREFUSED', 'EPIPE'].includes(code))) return true;
    if (/Connection terminated|connection error|terminating connection/i.test(cause.message)) return true;
  }
  return false;
}

/**
 * Commands whose change is one transaction that a second run refuses or skips once it has taken effect (stop
 * and rollback refuse a backfill no longer in the state they move it from; cancel returns a cancelled one as is).
 */
const SAFE_TO_REPEAT = new Set<string>(['stop', 'rollback', 'cancel']);

function connectionLostError(command: Command, cause: unknown): BackfillError {
  const id = 'backfillId' in command && typeof command.backfillId === 'number' ? command.backfillId : undefined;
  const repeat = SAFE_TO_REPEAT.has(command.kind)
    ? ` ${command.kind} commits in one transaction, so it took effect whole or not at all, and running it again is safe: it does it, or says it was done.`
    : ' Check that before running it again.';
  return new BackfillError(ErrorCode.ConnectionLost,
    `The connection to PostgreSQL was lost while \`${command.kind}\` ran (the server restarted, or the session was ended). ` +
    `Whether it took effect is in the database: once PostgreSQL is back, run \`npx backfill status${id === undefined ? '' : ` ${id}`}\`.${repeat}`,
    { cause, retryable: true });
}

main(process.argv.slice(2)).then((code) => process.exit(code), (raw: unknown) => {
  const error = explainCancellation(raw);
  console.error(isBackfillError(error) ? fromSlackMarkup(error.message, PLAIN) : error);
  process.exit(isBackfillError(error) ? 1 : 70);
});
