// npm run bench -- --cli [--runs N]: how long `npx backfill` takes to answer, on the compiled build as a user runs
// it (node bin/backfill.mjs, which loads dist/src/cli/main.js). Builds first (npm run build), so the figures are
// of the code in the checkout. Three commands take turns, N timed runs each after one untimed one:
//
//   node -e 0                 Node's own start on this machine, the floor under the other two
//   backfill help             the usage, from the command table alone
//   backfill status <id>      one backfill's report, on a database of its own (backfill_bot_bench_cli, dropped at
//                             the end) seeded with the month-end demo and one backfill started
//
// One more run of each CLI command records which of the heavy packages it loaded (help should load none of them,
// status only pg). Printed, and written to bench/cli-results.json (the latest run on each kind of database).

import { recordRun } from './resultsFile.js';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { openBackends } from '../src/backends.js';
import { loadConfig } from '../src/config.js';
import { startBackfill } from '../src/core/announce/start.js';
import { migrate } from '../src/db/migrate.js';
import { createPool, dropDatabase, recreateDatabase } from '../src/db/pool.js';
import { seedDemo } from '../dev/demo/seed.js';
import { spread, type Spread } from './stats.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BIN = path.join(ROOT, 'bin/backfill.mjs');
const RESULTS_NOTE = 'npm run bench -- --cli: the latest run on each kind of database, keyed cli[-embedded]; seconds';
const RESULTS_FILE = fileURLToPath(new URL('./cli-results.json', import.meta.url));
const CLI_DATABASE = 'backfill_bot_bench_cli';
/** Seconds, on this machine: what a person waits for before the answer. */
const TARGETS = { help: 0.3, status: 0.5 } as const;
/** The packages that make a start slow; a command that does not use one should not load it. */
const HEAVY_PACKAGES = ['pg', 'bullmq', 'ioredis', '@slack/bolt', '@resvg/resvg-js', 'pino', 'yaml'];

export const CLI_USAGE = `npm run bench -- --cli [--runs N]
  --runs N   timed runs of each command, taking turns with node -e 0 (default 15)`;

interface Timed extends Spread {
  command: string;
  /** The median less node -e 0's: what the command adds to Node's own start. */
  overNodeSeconds: number;
  target: number | null;
  met: boolean | null;
  /** Which of HEAVY_PACKAGES one run of it loaded (null for node -e 0). */
  loaded: string[] | null;
}

function parseCliArgs(argv: string[]): { runs: number } | 'help' {
  const { values } = parseArgs({ args: argv, options: { runs: { type: 'string', default: '15' }, help: { type: 'boolean', short: 'h', default: false } } });
  if (values.help) return 'help';
  const runs = Number(values.runs);
  if (!Number.isInteger(runs) || runs < 1 || runs > 1000) throw new Error(`--runs must be a whole number from 1 to 1000, not "${values.runs}"\n\n${CLI_USAGE}`);
  return { runs };
}

/** Seconds from spawn to exit; a run that fails stops the bench with what it printed. */
function timeRun(args: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const seconds = (performance.now() - started) / 1000;
      if (code === 0) resolve(seconds);
      else reject(new Error(`node ${args.join(' ')} exited ${code ?? 'on a signal'}: ${stderr.trim()}`));
    });
  });
}

/** Which of HEAVY_PACKAGES (all CommonJS, so in require.cache) one run of `args` loaded. */
async function packagesLoaded(args: string[], env: NodeJS.ProcessEnv): Promise<string[]> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'backfill-bench-cli-'));
  const listFile = path.join(dir, 'loaded.json');
  const preload = `data:text/javascript,${encodeURIComponent(`
    import { createRequire } from 'node:module';
    import { writeFileSync } from 'node:fs';
    const cache = createRequire(${JSON.stringify(BIN)}).cache;
    process.on('exit', () => writeFileSync(${JSON.stringify(listFile)}, JSON.stringify(Object.keys(cache))));`)}`;
  try {
    await run(process.execPath, ['--import', preload, ...args], { env });
    const files = JSON.parse(await readFile(listFile, 'utf8')) as string[];
    return HEAVY_PACKAGES.filter((name) => files.some((file) => file.includes(`${path.sep}node_modules${path.sep}${name}${path.sep}`)));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The bench database, migrated and seeded, with one backfill started: the one `status` reports. */
async function seedStatusDatabase(databaseUrl: string, config: ReturnType<typeof loadConfig>): Promise<number> {
  await recreateDatabase(databaseUrl);
  const pool = createPool(databaseUrl, 'backfill-bot-bench-cli');
  try {
    await migrate(pool);
    await seedDemo(pool, { scenario: 'month-end' });
    const { backfill } = await startBackfill({ pool, config: { ...config, DATABASE_URL: databaseUrl } },
      { pipeline: 'orders', target: '2026-11-15', reason: 'bench: the report status prints', actor: 'U07ONCALL' });
    return backfill.id;
  } finally {
    await pool.end();
  }
}

/** Each command once untimed, then `runs` turns in which every command runs once, in a rotating order. */
async function measure(commands: { name: string; args: string[] }[], runs: number, env: NodeJS.ProcessEnv): Promise<Map<string, number[]>> {
  const times = new Map(commands.map((command) => [command.name, [] as number[]]));
  for (const command of commands) await timeRun(command.args, env);
  for (let turn = 0; turn < runs; turn += 1) {
    for (let i = 0; i < commands.length; i += 1) {
      const command = commands[(turn + i) % commands.length] as { name: string; args: string[] };
      times.get(command.name)?.push(await timeRun(command.args, env));
    }
  }
  return times;
}

function fmt(seconds: number): string {
  return `${seconds.toFixed(3)} s`;
}

function print(rows: Timed[], runs: number): void {
  console.log(`\nnpx backfill on the compiled build (node bin/backfill.mjs), median of ${runs} runs, taking turns:`);
  for (const row of rows) {
    const target = row.target === null ? '' : `  target ≤ ${row.target} s: ${row.met ? 'met' : 'MISSED'}`;
    const over = row.loaded === null ? '' : `  (+${fmt(row.overNodeSeconds)} over node)`;
    console.log(`  ${row.command.padEnd(22)} ${fmt(row.median)}  [${fmt(row.min)} – ${fmt(row.max)}]${over}${target}`);
  }
  for (const row of rows) {
    if (row.loaded !== null) console.log(`  ${row.command} loaded: ${row.loaded.length === 0 ? 'none' : row.loaded.join(', ')} (of ${HEAVY_PACKAGES.join(', ')})`);
  }
}

export async function benchCli(argv: string[], progress: (message: string) => void): Promise<void> {
  const parsed = parseCliArgs(argv);
  if (parsed === 'help') {
    console.log(CLI_USAGE);
    return;
  }
  progress('building dist/ (npm run build)');
  await run('npm', ['run', 'build'], { cwd: ROOT });
  const backends = await openBackends(loadConfig(), { log: progress, checkQueue: false });
  const url = new URL(backends.config.DATABASE_URL);
  url.pathname = `/${CLI_DATABASE}`;
  const databaseUrl = url.toString();
  try {
    const id = await seedStatusDatabase(databaseUrl, backends.config);
    progress(`${backends.databaseSummary}; status reports backfill #${id} of ${CLI_DATABASE}`);
    const env = { ...process.env, DATABASE_URL: databaseUrl };
    const commands = [
      { name: 'node -e 0', args: ['-e', '0'] },
      { name: 'backfill help', args: [BIN, 'help'] },
      { name: `backfill status ${id}`, args: [BIN, 'status', String(id)] },
    ];
    const times = await measure(commands, parsed.runs, env);
    const floor = spread(times.get('node -e 0') ?? []).median;
    const rows: Timed[] = [];
    for (const command of commands) {
      const figures = spread(times.get(command.name) ?? []);
      const target = command.name === 'backfill help' ? TARGETS.help : command.name.startsWith('backfill status') ? TARGETS.status : null;
      const loaded = command.name === 'node -e 0' ? null : await packagesLoaded(command.args, env);
      rows.push({ command: command.name, ...figures, overNodeSeconds: figures.median - floor, target, met: target === null ? null : figures.median <= target, loaded });
    }
    print(rows, parsed.runs);
    const key = `cli${backends.database === 'embedded' ? '-embedded' : ''}`;
    recordRun(RESULTS_FILE, RESULTS_NOTE, key, { at: new Date().toISOString(), runs: parsed.runs, node: process.version, nproc: os.availableParallelism(), loadAverage: os.loadavg(), commands: rows });
    progress(`wrote ${path.relative(process.cwd(), RESULTS_FILE)} (entry ${key})`);
  } finally {
    await dropDatabase(databaseUrl).catch((error: unknown) => console.error(`clean-up: could not drop ${CLI_DATABASE}: ${(error as Error).message}`));
    await backends.close();
  }
}
