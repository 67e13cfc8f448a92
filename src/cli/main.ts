import { writeFile } from 'node:fs/promises';
import { hostname, userInfo } from 'node:os';
import { parseArgs } from 'node:util';
import type { RunConfig } from '../backends.js';
import { checkFlags, parseCommand, type Command } from '../commands/arguments.js';
import type { CommandFacts, CommandOptions } from '../commands/run.js';
import { cliUsage, findCommand, type CommandSpec } from '../commands/table.js';
import type { Acting } from '../core/authorization.js';
import type { EngineContext } from '../core/context.js';
import type { BackfillReport } from '../core/file/status.js';
import { BackfillError, ErrorCode, isBackfillError } from '../errors.js';
import { isSlackUserId } from '../slackUser.js';
import type { TextStyle } from '../views/text.js';

// npx backfill <command>: parse the words and flags, check the person against the command table's rule, run
// the use case (src/commands/run.ts) in a command session (src/commandSession.ts), and print its facts for a
// terminal.

const USAGE = cliUsage();
const argv = process.argv.slice(2);

// PERF: only what reads the command line is imported above. A command line that asks for the usage (help, -h,
// none, an unknown command) is answered by main() here, before the modules the commands use are loaded below:
// they bring pg, pino, the Slack app and the engine, most of a start. On that path main() returns before it
// touches any of them. The step workers (and BullMQ with them) are loaded only by `worker` and --wait.
if (asksForUsage(argv)) process.exit(await main(argv));

const { explainCancellation, openCommandSession } = await import('../commandSession.js');
const { openBackends } = await import('../backends.js');
const { backfillOf, runCommand } = await import('../commands/run.js');
const { loadConfig } = await import('../config.js');
const { authorize, principalOf, runActing } = await import('../core/authorization.js');
const { recordingRefusals } = await import('../core/refusals.js');
const { parseHour } = await import('../core/time.js');
const { runOn } = await import('../processLifecycle.js');
const { renderCatalogApplied, renderCatalogPlan } = await import('../views/catalogPlan.js');
const {
  acknowledgedLines, approvedLine, continuedLine, delegateChangedLine, delegatesLines, heldLine, notASignerLine, overrideLine, planFrozenLine,
  rolledBackLine, signedLine, signersLines, signersOfLine, startedLines, stoppedLine,
} = await import('../views/cliReplies.js');
const { renderCosts } = await import('../views/costs.js');
const { incidentPackageJson, incidentPackageMarkdown } = await import('../views/incidentPackage.js');
const { lineageDecisionReply, lineageProposalsReply } = await import('../views/lineage.js');
const {
  fromSlackMarkup, PLAIN, renderBackfillList, renderDiff, renderPaidAgainst, renderPlan, renderPruned, renderRetention, renderStatus, renderTick,
  renderTimeline,
} = await import('../views/text.js');

/** Whether the command line asks only for the usage. One that is refused does not: main() says why. */
function asksForUsage(commandLine: string[]): boolean {
  try {
    return readCommandLine(commandLine).usage !== undefined;
  } catch {
    return false;
  }
}

/** The command line read: the usage's exit code when that is all it asks for, else the command and its flags. */
function readCommandLine(commandLine: string[]) {
  const { values, positionals } = parseArgs({
    args: commandLine,
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
  if (parsed.kind === 'help' || !spec) return { usage: command || values.help ? 0 : 2 };
  return { usage: undefined, values, command, args, parsed, spec };
}

async function main(commandLine: string[]): Promise<number> {
  const read = readCommandLine(commandLine);
  if (read.usage !== undefined) {
    console.log(USAGE);
    return read.usage;
  }
  const { values, command, args, parsed, spec } = read;
  if (values.as !== undefined && !isSlackUserId(values.as)) {
    throw new BackfillError(ErrorCode.BadInput, `--as takes the Slack user id of the person acted for, such as U07SETTLE; "${values.as}" is not one.`);
  }
  // Only `migrate --create` creates a configured database: a mistyped name is said, not silently made.
  const backends = await openBackends(loadConfig(), { create: command === 'migrate' && values.create, checkQueue: false, log: (line) => console.error(line) });
  // On stderr, so that what a command prints (an export, say) stays the whole of stdout.
  console.error(backends.summary);
  return runOn(backends, (config) => runInSession(config, parsed, spec, { ...values, args }));
}

/** One command in a command session: authorized with the rights of whom it acts for, run, and printed. */
async function runInSession(config: RunConfig, parsed: Exclude<Command, { kind: 'help' }>, spec: CommandSpec, values: Flags & { args: string[] }): Promise<number> {
  const acting = cliActing(config, values.as, values.reason);
  // Whose rights it uses (--as, else the CLI user as cliActing maps them); events name the CLI user (runActing).
  const actor = principalOf(acting);
  let style: TextStyle = PLAIN;
  try {
    const session = await openCommandSession(config);
    const { ctx } = session;
    try {
      style = { people: session.people, colour: process.stdout.isTTY === true && !config.NO_COLOR };
      if (parsed.kind === 'worker') {
        authorize(acting, spec.rule, spec.action);
        return await runWorkers(ctx, style);
      }
      const refusal = { actor: acting.actor, action: actionOf(parsed, spec.name), backfillId: backfillOf(parsed), input: { args: values.args, as: values.as ?? null } };
      const facts = await runActing(acting, () => recordingRefusals(ctx, refusal, () => {
        authorize(acting, spec.rule, spec.action);
        if (parsed.kind === 'retention' && values.prune) authorize(acting, 'operator', 'prune stored rows');
        return runCommand(ctx, session.effects, parsed, actor, commandOptions(values));
      }));
      return await runActing(acting, () => print(facts, ctx, { ...values, actor, style }));
    } finally {
      await session.close();
    }
  } catch (error) {
    throw forTerminal(error, parsed, style);
  }
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

/** The CLI's flags, as parseArgs reads them. */
interface Flags {
  as?: string | undefined;
  reason?: string | undefined;
  consumer?: string | undefined;
  'override-limit'?: string | undefined;
  plan?: string | undefined;
  until?: string | undefined;
  prune?: boolean | undefined;
  wait?: boolean | undefined;
  format?: string | undefined;
  out?: string | undefined;
}

/** How the CLI prints: its flags that shape the output, and how text shows people. */
interface PrintOptions {
  /** Whose rights the command used: the person its lines name. */
  actor: string;
  style: TextStyle;
  wait?: boolean | undefined;
  format?: string | undefined;
  out?: string | undefined;
}

/** How a refusal names what was asked in the timeline: the command, with its action where it has several. */
function actionOf(command: Command, name: string): string {
  if (command.kind === 'catalog-plan' || command.kind === 'catalog-apply') return command.kind.replace('-', ' ');
  if (command.kind === 'lineage') return `lineage ${command.action}`;
  return name;
}

/** The flags that tell a use case more (which consumer, a limit override, the plan, up to when, prune). */
function commandOptions(values: Flags): CommandOptions {
  return {
    consumer: values.consumer,
    limitOverride: values['override-limit'],
    planId: values.plan === undefined ? undefined : backfillId(values.plan),
    until: values.until ? parseHour(values.until) : undefined,
    prune: values.prune,
  };
}

/** Prints what the command did; the exit code says whether it did what was asked. */
async function print(facts: CommandFacts, ctx: EngineContext, options: PrintOptions): Promise<number> {
  const { style } = options;
  const line = (text: string) => console.log(text);
  switch (facts.kind) {
    case 'help': line(USAGE); return 0;
    case 'migrate': line('Migrations applied.'); return 0;
    case 'plan': line(renderPlan(facts.plan, style)); line(planFrozenLine(facts.plan)); return 0;
    case 'start':
      startedLines(facts.started.backfill, facts.started.announcements, style).forEach(line);
      return settle(ctx, facts.started.backfill.id, options);
    case 'ack': acknowledgedLines(options.actor, facts.result, style).forEach(line); return settle(ctx, facts.backfillId, options);
    case 'hold': line(heldLine(facts.backfillId, options.actor, style)); return 0;
    case 'override': line(overrideLine(options.actor, facts.approved, style)); return settle(ctx, facts.backfillId, options);
    case 'cancel': line(`Backfill #${facts.backfillId} cancelled.`); return 0;
    case 'approve': line(approvedLine(facts.result)); return settle(ctx, facts.backfillId, options);
    case 'stop': line(stoppedLine(facts.backfillId, facts.removed)); return 0;
    case 'continue': line(continuedLine(facts.backfillId, facts.accepted)); return settle(ctx, facts.backfillId, options);
    case 'rollback': line(rolledBackLine(facts.backfillId, facts.restored)); return settle(ctx, facts.backfillId, options);
    case 'status': line(renderStatus(facts.report, style)); return 0;
    case 'recent': line(renderBackfillList(facts.backfills, style)); return 0;
    case 'log': line(renderDiff(facts.report, style)); line(`\nTimeline:\n${renderTimeline(facts.events, style)}`); return 0;
    case 'shared': return 0;
    case 'tick': line(renderTick(facts.result, style)); return 0;
    case 'paid-against': line(renderPaidAgainst(facts.answer, style)); return 0;
    case 'sign': line(signedLine(facts.signed, style)); return 0;
    case 'lineage-list': line(fromSlackMarkup(lineageProposalsReply(facts.proposals), style)); return 0;
    case 'lineage-decided': line(fromSlackMarkup(lineageDecisionReply(facts.decision), style)); return 0;
    case 'signer-list': line(signersLines(facts.signers, style)); return 0;
    case 'signer':
      if (facts.change === 'remove' && !facts.wasSigner) line(notASignerLine(facts.report, facts.user, style));
      line(signersOfLine(facts.report, facts.signers, style));
      return 0;
    case 'delegate-list': line(delegatesLines(facts.delegates, style)); return 0;
    case 'delegate': line(delegateChangedLine(facts.change, facts.owner, facts.user, style)); return 0;
    case 'export': return writeExport(facts.pkg, options);
    case 'costs': line(renderCosts(facts.summary)); return 0;
    case 'retention': line(renderRetention(facts.report)); return 0;
    case 'pruned': line(renderPruned(facts.pruned)); return 0;
    case 'catalog-plan': line(renderCatalogPlan(facts.plan)); return facts.plan.refusals.length > 0 ? 1 : 0;
    case 'catalog-apply': line(renderCatalogApplied(facts.plan)); return 0;
    default: {
      const unreachable: never = facts;
      return unreachable;
    }
  }
}

async function writeExport(pkg: Extract<CommandFacts, { kind: 'export' }>['pkg'], options: PrintOptions): Promise<number> {
  if (options.format !== 'md' && options.format !== 'json') throw new BackfillError(ErrorCode.BadInput, `--format is md or json, not "${options.format ?? ''}".`);
  const text = options.format === 'json' ? incidentPackageJson(pkg) : incidentPackageMarkdown(pkg);
  if (!options.out) {
    console.log(text);
    return 0;
  }
  await writeFile(options.out, text);
  console.log(`Wrote ${options.out}.`);
  return 0;
}

/** `backfill worker`: the step workers in this process, printing what they would send, until Ctrl-C. */
async function runWorkers(ctx: EngineContext, style: TextStyle): Promise<number> {
  const { startWorkers } = await import('../worker.js');
  const { PrintingMessenger } = await import('./runner.js');
  const workers = await startWorkers({ ...ctx, messenger: new PrintingMessenger((line) => console.log(line), style) });
  console.log('Workers running; Ctrl-C stops them.');
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await workers.close();
  return 0;
}

/** --wait: the workers run here until the backfill settles; the diff is printed and the exit code says how it ended. */
async function settle(ctx: EngineContext, id: number, options: PrintOptions): Promise<number> {
  if (!options.wait) return 0;
  const { PrintingMessenger, runUntilSettled, TerminalProgress } = await import('./runner.js');
  // A bar redrawn in place on a terminal, plain lines in a pipe; the run's own lines print above it.
  const progress = new TerminalProgress(process.stdout, id);
  const line = (text: string) => progress.print(text);
  let report: BackfillReport;
  try {
    report = await runUntilSettled(ctx, id, line, new PrintingMessenger(line, options.style), (reading) => progress.update(reading));
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

main(argv).then((code) => process.exit(code), (raw: unknown) => {
  const error = explainCancellation(raw);
  console.error(isBackfillError(error) ? fromSlackMarkup(error.message, PLAIN) : error);
  process.exit(isBackfillError(error) ? 1 : 70);
});
