// npm run demo:seed [-- --scenario night-9-outage] [--target partitioned]: creates the database when needed, migrates it and seeds
// (or re-seeds) the Harborlight demo. Exit 0 on success; a BackfillError prints its message and exits 1.

import { openBackends } from '../../src/backends.js';
import { loadConfig } from '../../src/config.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool, sessionSettings } from '../../src/db/pool.js';
import { runOn } from '../../src/processLifecycle.js';
import { BackfillError, ErrorCode, isBackfillError } from '../../src/errors.js';
import { DemoScenario, SCENARIO_AS_OF } from './constants.js';
import { demoOptions, parseTargetShape, seedDemo, TARGET_SHAPES, type SeedSummary, type TargetShape } from './seed.js';

const SCENARIOS = Object.values(DemoScenario);

const USAGE = `Usage: npm run demo:seed -- [--scenario ${SCENARIOS.join('|')}] [--target ${TARGET_SHAPES.join('|')}]`;

function parseSeedArgs(argv: string[]): { scenario: DemoScenario; target: TargetShape } {
  const options = demoOptions(argv, ['scenario', 'target'], USAGE);
  const scenario = SCENARIOS.find((candidate) => candidate === (options.scenario ?? DemoScenario.MonthEnd));
  if (!scenario) throw new BackfillError(ErrorCode.BadInput, `Unknown scenario "${options.scenario ?? ''}". Choose one of: ${SCENARIOS.join(', ')}.`);
  return { scenario, target: parseTargetShape(options.target ?? 'plain') };
}

/** 1284310.55 → 1,284,310.55 */
function formatMoney(value: string): string {
  const [whole = '', fraction = '00'] = value.split('.');
  return `${whole.replace(/\B(?=(\d{3})+(?!\d))/g, ',')}.${fraction}`;
}

function describeSummary(summary: SeedSummary, millis: number): string {
  const signed = summary.signedTotalNight15 === null ? 'not signed yet' : `${formatMoney(summary.signedTotalNight15)} (signed)`;
  return [
    `Seeded the Harborlight demo, scenario ${summary.scenario} (as of ${SCENARIO_AS_OF[summary.scenario]}) in ${(millis / 1000).toFixed(1)} s`,
    `  warehouse.orders:  ${summary.orderRows} rows in ${summary.partitions} partitions (${summary.rawRows} raw rows landed, ${summary.pendingRows} pending)`,
    `  flagged partitions: ${summary.unreconciled} unreconciled`,
    `  settlement report 2026-11-15: ${signed}`,
    `  watermark: ${summary.watermark}`,
  ].join('\n');
}

async function main(): Promise<void> {
  const { scenario, target } = parseSeedArgs(process.argv.slice(2));
  // The database may be created here; a working one named by mistake would be seeded over, so only here.
  const backends = await openBackends(loadConfig(), { create: true, checkQueue: false, log: (line) => console.log(line) });
  console.log(backends.summary);
  await runOn(backends, async (config) => {
    const pool = createPool(config.DATABASE_URL, 'backfill-bot-demo-seed', sessionSettings(config));
    try {
      const started = performance.now();
      await migrate(pool);
      const summary = await seedDemo(pool, { scenario, target });
      console.log(describeSummary(summary, performance.now() - started));
    } finally {
      await pool.end();
    }
  });
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    // A BackfillError is written for a person; anything else is a bug, and its stack helps more than its message.
    console.error(isBackfillError(error) ? error.message : error);
    process.exit(1);
  },
);
