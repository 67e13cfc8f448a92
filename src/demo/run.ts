import { Queue } from 'bullmq';
import pg from 'pg';
import { STEP_QUEUE } from '../../jobs/registry.js';
import { runUntilSettled } from '../cli/runner.js';
import { loadConfig } from '../config.js';
import type { EngineContext } from '../core/context.js';
import { acknowledge } from '../core/gate.js';
import { planBackfill } from '../core/plan.js';
import { startBackfill } from '../core/start.js';
import { listEvents } from '../db/events.js';
import { migrate } from '../db/migrate.js';
import { createPool, quoteIdent } from '../db/pool.js';
import { isBackfillError } from '../errors.js';
import { redisConnection } from '../queue/stepQueue.js';
import { renderDiff, renderPlan } from '../views/text.js';
import { OWNERS } from './constants.js';
import { seedDemo } from './seed.js';

// npm run demo: the night-15 backfill end to end on local Postgres and Redis, the demo answering as the owners.

const OPERATOR = 'U07ONCALL';

function section(title: string): void {
  console.log(`\n━━ ${title} ${'━'.repeat(Math.max(0, 70 - title.length))}`);
}

async function recreateDatabase(url: string): Promise<void> {
  const target = new URL(url);
  const name = decodeURIComponent(target.pathname.slice(1));
  target.pathname = '/postgres';
  const admin = new pg.Client({ connectionString: target.toString() });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${quoteIdent(name)}`);
  } finally {
    await admin.end();
  }
}

async function main(): Promise<void> {
  const base = loadConfig();
  const config = { ...base, DATABASE_URL: base.DEMO_DATABASE_URL, QUEUE_PREFIX: `${base.QUEUE_PREFIX}-demo` };
  const queue = new Queue(STEP_QUEUE, { connection: redisConnection(config), prefix: config.QUEUE_PREFIX });
  await queue.obliterate({ force: true });
  await queue.close();

  section(`Seeding the Harborlight demo into ${new URL(config.DATABASE_URL).pathname.slice(1)}`);
  await recreateDatabase(config.DATABASE_URL);
  const pool = createPool(config.DATABASE_URL, 'backfill-demo');
  const ctx: EngineContext = { pool, config };
  try {
    await migrate(pool);
    const started = Date.now();
    const summary = await seedDemo(pool);
    console.log(`November 2026 built by the pipeline's own step in ${((Date.now() - started) / 1000).toFixed(1)} s:`, summary);

    section('Night 15: plan (dry run, writes only an audit event)');
    const request = { pipeline: 'orders', target: '2026-11-15', reason: 'currency column parsed as text on the 05:00–10:00 batch', actor: OPERATOR };
    console.log(renderPlan(await planBackfill(ctx, request)));

    section('Start: before-total captured with announced_at, announcements sent');
    const { backfill, announcements } = await startBackfill(ctx, request);
    console.log(`Backfill #${backfill.id}: total before ${backfill.totalBefore}, announced at ${backfill.announcedAt.toISOString()}`);
    for (const a of announcements) console.log(`\n→ to <@${a.owner}> (${a.consumer}, told ${a.notifyRule})\n${a.text.replace(/^/gm, '  ')}`);

    section('Acknowledgements (the demo answers as the owners)');
    for (const owner of [OWNERS.settlementLead, OWNERS.payouts]) {
      const result = await acknowledge(ctx, { backfillId: backfill.id, actor: owner });
      console.log(`<@${owner}> acknowledged; ${result.approved ? 'gate open: steps enqueued' : `still waiting for ${result.waitingFor.map((w) => w.owner).join(', ')}`}`);
    }

    section('Jobs (BullMQ, deterministic ids), in the order they finished');
    const report = await runUntilSettled(ctx, backfill.id, (line) => console.log(line));
    for (const event of await listEvents(pool, backfill.id)) {
      if (['recomputed', 'watermark_moved', 'replayed', 'compared'].includes(event.kind)) {
        console.log(`${event.at.toISOString().slice(11, 23)}  ${event.kind.padEnd(16)} ${summarize(event.detail)}`);
      }
    }

    section('Diff, filed in the backfill log');
    console.log(renderDiff(report));
    if (report.backfill.state !== 'done') throw new Error(`backfill ended ${report.backfill.state}: ${report.backfill.failure ?? ''}`);
  } finally {
    await pool.end();
  }
}

function summarize(detail: Record<string, unknown>): string {
  if (typeof detail.partition === 'string') return `${detail.partition}  rows ${String(detail.rowsBefore)} → ${String(detail.rowsAfter)}  total ${String(detail.totalBefore)} → ${String(detail.totalAfter)}`;
  if (typeof detail.consumer === 'string') return `${detail.consumer} via ${String(detail.via)}`;
  if ('from' in detail) return `${String(detail.from)} → ${String(detail.to)}`;
  return `total ${String(detail.totalBefore)} → ${String(detail.totalAfter)} (${String(detail.diff)})`;
}

main().then(() => process.exit(0), (error: unknown) => {
  console.error(isBackfillError(error) ? error.message : error);
  process.exit(1);
});
