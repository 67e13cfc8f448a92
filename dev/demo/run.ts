import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LogLevel } from '@slack/bolt';
import { STEP_QUEUE } from '../../src/queue/registry.js';
import { postBlockAction, postSlashCommand, startSlackEmulator, type SlackEmulator } from '../slack-emulator/index.js';
import { openBackends, type QueueBackend, type RunConfig } from '../../src/backends.js';
import { loadConfig } from '../../src/config.js';
import { registerSecrets } from '../../src/redaction.js';
import { loadBackfillReport } from '../../src/core/file/status.js';
import { listEvents } from '../../src/db/events.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool, sessionSettings, recreateDatabase, type Pool } from '../../src/db/pool.js';
import { isBackfillError } from '../../src/errors.js';
import { createQueue } from '../../src/queue/connection.js';
import { runOn } from '../../src/processLifecycle.js';
import { createSlackApp } from '../../src/app.js';
import { ActionId, encodeButtonValue } from '../../src/views/blocks.js';
import { renderDiff } from '../../src/views/text.js';
import { loadPeople } from '../../src/db/people.js';
import { DEMO_PEOPLE, OWNERS } from './constants.js';
import { demoOptions, parseTargetShape, seedDemo, TARGET_SHAPES, type TargetShape } from './seed.js';

// npm run demo: the night-15 backfill end to end on the configured PostgreSQL and Redis, or on the embedded
// PostgreSQL with the queues in it (src/backends.ts), driven the way Slack drives it:
// signed slash commands and button clicks into the real Bolt receiver, the bot's Web API calls answered by a
// local Slack emulator, whose messages are printed as a person would have seen them.

const OPERATOR = 'U07ONCALL';
const INCIDENT = 'C0INCIDENT';
const SECRET = 'demo-signing-secret';
/**
 * Where the demo leaves what it made: in the project's git-ignored .backfill-bot folder, two folders up from
 * dev/demo/ (the demo runs from source only, under tsx).
 */
const DEMO_OUTPUT = fileURLToPath(new URL('../../.backfill-bot/demo/', import.meta.url));

function section(title: string): void {
  console.log(`\n━━ ${title} ${'━'.repeat(Math.max(0, 74 - title.length))}`);
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`the demo timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** `--target partitioned`: warehouse.orders partitioned by hour, each partition published by swap. */
function parseTarget(argv: string[]): TargetShape {
  const options = demoOptions(argv, ['target'], `Usage: npm run demo [-- --target ${TARGET_SHAPES.join('|')}]`);
  return parseTargetShape(options.target ?? 'plain');
}

/** The demo's hours are 60 rows, which a real deployment would rewrite (SWAP_MIN_ROWS): here they are swapped, to show the swap. */
const SHOW_THE_SWAP = { SWAP_MIN_ROWS: 0 };

async function main(): Promise<void> {
  const target = parseTarget(process.argv.slice(2));
  const loaded = loadConfig();
  // The demo signs its webhooks with a secret of its own, made anew each run unless one is configured: never a
  // default anyone could read here.
  const base = { ...loaded, WEBHOOK_SIGNING_SECRET: loaded.WEBHOOK_SIGNING_SECRET ?? randomBytes(32).toString('hex') };
  registerSecrets([base.WEBHOOK_SIGNING_SECRET]);
  const backends = await openBackends({ ...base, QUEUE_PREFIX: `${base.QUEUE_PREFIX}-demo` }, { role: 'demo', create: true, log: (line) => console.log(line) });
  console.log(backends.summary);
  await runOn(backends, (config) => runDemo({ ...config, BACKFILL_OPERATORS: [OPERATOR], STATUS_THROTTLE_MS: 0, ...(target === 'partitioned' ? SHOW_THE_SWAP : {}) }, backends.queue, target));
}

async function runDemo(config: RunConfig, queueBackend: QueueBackend, target: TargetShape): Promise<void> {
  // Queues in PostgreSQL live in the demo's database, which is made anew below; Redis keeps them, so empty them.
  if (queueBackend.kind === 'redis') {
    const queue = createQueue(queueBackend, STEP_QUEUE);
    await queue.obliterate({ force: true });
    await queue.close();
  }

  section(`Seeding the Harborlight demo into ${new URL(config.DATABASE_URL).pathname.slice(1)}`);
  await recreateDatabase(config.DATABASE_URL);
  const pool = createPool(config.DATABASE_URL, 'backfill-demo', sessionSettings(config));
  await migrate(pool);
  const slack = await startSlackEmulator();
  const bot = await createSlackApp({
    ctx: { pool, config },
    slack: { botToken: 'xoxb-demo', signingSecret: SECRET, apiUrl: slack.url },
    logLevel: LogLevel.WARN,
  });
  try {
    await seed(pool, target);
    const server = await bot.start(0);
    await converse(`http://127.0.0.1:${(server?.address() as AddressInfo).port}/slack/events`, slack, pool);
    await show(slack, pool, Boolean(config.NO_COLOR));
  } finally {
    await bot.stop();
    await slack.close();
    await pool.end();
  }
}

async function seed(pool: Pool, target: TargetShape): Promise<void> {
  const started = Date.now();
  const summary = await seedDemo(pool, { target });
  console.log(`November 2026 built by the pipeline's own step in ${((Date.now() - started) / 1000).toFixed(1)} s: ` +
    `${summary.orderRows} rows in ${summary.partitions} partitions, ${summary.unreconciled} unreconciled, watermark ${summary.watermark}`);
  console.log(target === 'partitioned'
    ? 'warehouse.orders is partitioned by hour (orders_pYYYYMMDDHH): each partition is published by swap (DETACH the live one, ATTACH the staged one)'
    : 'warehouse.orders is one plain table: each partition is published by rewrite (DELETE … RETURNING into the saved rows, INSERT … SELECT)');
}

/** The name Slack sends with each request, which the bot learns (backfill.people): the demo's names for its people. */
const nameOf = (user: string): string | undefined => DEMO_PEOPLE.find((p) => p.slackId === user)?.name;

/** The operator types in the incident channel; the owners press Acknowledge; the run goes to its end. */
async function converse(events: string, slack: SlackEmulator, pool: Pool): Promise<void> {
  let typed = 0;
  const type = async (user: string, text: string) => {
    console.log(`<@${user}> in <#${INCIDENT}>: /backfill ${text}`);
    await postSlashCommand(events, SECRET, { text, user_id: user, user_name: nameOf(user), channel_id: INCIDENT, response_url: slack.responseUrl(`${user}-${Date.now()}`) });
    await until(async () => slack.responses.length > 0 && slack.responses.length >= typed + 1, 'the reply');
    typed += 1;
  };

  section('In the incident channel');
  await type(OPERATOR, 'plan orders 2026-11-15');
  await type(OPERATOR, 'start orders 2026-11-15 currency column parsed as text on the 05:00-10:00 batch');
  await until(async () => slack.callsTo('chat.postMessage').filter((c) => String(c.params.channel).startsWith('D')).length === 2, 'the announcements');

  section('The owners acknowledge in their DMs (the demo presses the buttons for them)');
  for (const [owner, consumer] of [[OWNERS.settlementLead, 'settlement_report'], [OWNERS.payouts, 'payout_export']] as const) {
    console.log(`<@${owner}> presses Acknowledge on the ${consumer} announcement`);
    await postBlockAction(events, SECRET, { user: owner, userName: nameOf(owner), actionId: ActionId.Acknowledge, value: encodeButtonValue({ backfillId: 1, consumer }), responseUrl: slack.responseUrl() });
  }
  await until(async () => (await loadBackfillReport(pool, 1)).backfill.state === 'done', 'the backfill to finish');
  await until(async () => slack.callsTo('chat.postMessage').filter((c) => c.params.channel === INCIDENT).length >= 2, 'the diff message');
  await until(async () => slack.callsTo('chat.postMessage').some((c) => c.params.channel === `D${OWNERS.forecast}`), 'the after-run DM');
  await until(async () => slack.callsTo('files.completeUploadExternal').length >= 1, 'the diff chart');
}

/**
 * The diff chart as the emulator received it (the bytes POSTed to its upload URL), written where a person can
 * open it: .backfill-bot/demo/backfill-<id>-diff.png. Returns its absolute path.
 */
async function saveDiffChart(slack: SlackEmulator, backfillId: number): Promise<string> {
  const filename = `backfill-${backfillId}-diff.png`;
  const asked = slack.callsTo('files.getUploadURLExternal').find((c) => c.params.filename === filename);
  const bytes = slack.uploads.get(String(asked?.response.file_id ?? ''));
  if (!bytes) throw new Error(`the emulator received no ${filename}`);
  await mkdir(DEMO_OUTPUT, { recursive: true });
  const path = join(DEMO_OUTPUT, filename);
  await writeFile(path, bytes);
  return path;
}

/** What Slack showed, the jobs in the order they ran, and the backfill log row. */
async function show(slack: SlackEmulator, pool: Pool, noColour: boolean): Promise<void> {
  section('What Slack showed (the emulator\'s transcript)');
  console.log(slack.transcript());

  section('Jobs (BullMQ, deterministic ids): staged, then the canary published first, then the waves');
  for (const event of await listEvents(pool, 1)) {
    if (['announcement_sent', 'acknowledged', 'approved', 'staged', 'recomputed', 'watermark_moved', 'replayed', 'compared', 'notified', 'diff_posted'].includes(event.kind)) {
      console.log(`${event.at.toISOString().slice(11, 23)}  ${event.actor.padEnd(12)} ${event.kind.padEnd(18)} ${summarize(event.detail)}`);
    }
  }

  section('The backfill log row');
  const report = await loadBackfillReport(pool, 1);
  // People by the names they go by, as the CLI shows them; colour only on a terminal.
  console.log(renderDiff(report, { people: await loadPeople(pool), colour: process.stdout.isTTY === true && !noColour }));
  console.log(`\nDiff chart: ${await saveDiffChart(slack, 1)}`);
  if (report.backfill.state !== 'done') throw new Error(`backfill ended ${report.backfill.state}: ${report.backfill.failure ?? ''}`);
}

function summarize(detail: Record<string, unknown>): string {
  if (typeof detail.partition === 'string' && 'keysChanged' in detail) {
    return `${detail.partition}  staged: keys missing ${String(detail.keysMissing)}, added ${String(detail.keysAdded)}, duplicated ${String(detail.keysDuplicated)}, changed ${String(detail.keysChanged)}`;
  }
  if (typeof detail.partition === 'string') {
    const by = typeof detail.publishedBy === 'string' ? ` by ${detail.publishedBy}` : '';
    return `${detail.partition}  published${by}: rows ${String(detail.rowsBefore)} → ${String(detail.rowsAfter)}  total ${String(detail.totalBefore)} → ${String(detail.totalAfter)}`;
  }
  if (typeof detail.consumer === 'string') return `${detail.consumer}${detail.via ? ` via ${String(detail.via)}` : ''}`;
  if ('from' in detail) return `${String(detail.from)} → ${String(detail.to)}`;
  if ('totalAfter' in detail) return `total ${String(detail.totalBefore)} → ${String(detail.totalAfter)} (${String(detail.diff)})`;
  return '';
}

main().then(() => process.exit(0), (error: unknown) => {
  console.error(isBackfillError(error) ? error.message : error);
  process.exit(1);
});
