// npm run faults [-- --faults redis-emptied,worker-killed --runs N --lease-ms MS --margin-ms MS]: how long an
// in-flight backfill takes to make progress again after each fault, against the bound docs/operating.md states
// ("Recovery bound": STEP_LEASE_MS + the 5 s dispatcher sweep + a margin for the step itself). bench/faultRun.ts
// runs them; this prints the table, writes bench/faults-results.json and exits 1 when a recovery missed its bound
// or a backfill did not end done with night 15's exact figures.
//
// DATABASE_URL's server (or, unset, the project's embedded PostgreSQL) holds the runs' databases, each made anew
// and dropped after; REDIS_URL's Redis (unset: BullMQ's PostgreSQL backend) carries the queues, each run under a
// prefix of its own. A Redis restart needs a redis-server binary: the script starts a Redis of its own for it. A
// PostgreSQL restart runs on an embedded PostgreSQL the script starts for it in a data folder of its own (the one
// server it restarts); on the shared server the PostgreSQL fault ends the run's sessions instead.

import { recordRun } from './resultsFile.js';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openBackends } from '../src/backends.js';
import { loadConfig } from '../src/config.js';
import { isBackfillError } from '../src/errors.js';
import { boundMs, FAULTS, fmt, runFaults, SWEEP_MS, type Fault, type FaultOptions, type FaultSummary } from './faultRun.js';

const RESULTS_NOTE = 'npm run faults: the latest run of each kind, keyed <queue backend>-<server>; times in ms from the fault';
const RESULTS_FILE = fileURLToPath(new URL('./faults-results.json', import.meta.url));

export const USAGE = `npm run faults -- [options]
  --faults a,b      which faults, comma-separated (default all): ${FAULTS.join(', ')}
  --runs N          repetitions per fault (default 3)
  --lease-ms MS     STEP_LEASE_MS of the runs' workers (default 3000)
  --margin-ms MS    the bound's allowance for the step itself, on top of lease + sweep (default 2000)
  --timeout-s S     a run whose backfill is not done S seconds after the fault fails (default 120)
  --concurrency C   WORKER_CONCURRENCY of each of the two worker processes (default 2)`;

function positive(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a whole number of at least 1, not "${text}"\n\n${USAGE}`);
  return value;
}

export function parseFaultArgs(argv: string[]): Omit<FaultOptions, 'serverUrl' | 'redisUrl' | 'log'> | 'help' {
  const { values } = parseArgs({
    args: argv,
    options: {
      faults: { type: 'string' }, runs: { type: 'string' }, 'lease-ms': { type: 'string' }, 'margin-ms': { type: 'string' },
      'timeout-s': { type: 'string' }, concurrency: { type: 'string' }, help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) return 'help';
  const faults: Fault[] = [];
  for (const part of (values.faults ?? FAULTS.join(',')).split(',').map((p) => p.trim()).filter(Boolean)) {
    const fault = FAULTS.find((known) => known === part);
    if (!fault) throw new Error(`--faults takes ${FAULTS.join(', ')}, not "${part}"\n\n${USAGE}`);
    if (!faults.includes(fault)) faults.push(fault);
  }
  if (faults.length === 0) throw new Error(`--faults needs at least one fault\n\n${USAGE}`);
  return {
    faults, runs: positive('runs', values.runs, 3), leaseMs: positive('lease-ms', values['lease-ms'], 3000),
    marginMs: positive('margin-ms', values['margin-ms'], 2000), timeoutMs: positive('timeout-s', values['timeout-s'], 120) * 1000,
    workerConcurrency: positive('concurrency', values.concurrency, 2),
  };
}

export function faultsTable(summaries: FaultSummary[]): string {
  const header = ['fault', 'runs', 'recovery max', 'median', 'bound', 'met', 'done exactly', 'each run (held steps done / first pending done, from the fault\'s end; how long the server was down)'];
  const rows = summaries.map((s) => s.skipped
    ? [s.fault, '0', '—', '—', fmt(s.boundMs), 'skipped', '—', s.skipped]
    : [s.fault, String(s.runs.length), fmt(s.maxMs), fmt(s.medianMs), fmt(s.boundMs), s.runs.every((r) => r.withinBound) ? 'yes' : 'NO',
      s.runs.every((r) => r.exact) ? 'yes' : 'NO',
      s.runs.map((r) => (r.error ? `error: ${r.error}` : `${fmt(r.heldDoneMs)} / ${fmt(r.pendingDoneMs)}${r.outageMs >= 10 ? ` (down ${fmt(r.outageMs)})` : ''}`)).join(', ')]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i] ?? 0)).join(' | ')} |`;
  return [line(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

const started = performance.now();
function progress(line: string): void {
  console.log(`[${((performance.now() - started) / 1000).toFixed(1).padStart(6)} s] ${line}`);
}

async function main(): Promise<void> {
  const parsed = parseFaultArgs(process.argv.slice(2));
  if (parsed === 'help') {
    console.log(USAGE);
    return;
  }
  const config = loadConfig();
  // The server as every entry point decides it (DATABASE_URL's, or the embedded one); the runs make their own databases on it.
  const backends = await openBackends(config, { log: progress, checkQueue: false });
  progress(backends.databaseSummary);
  let summaries: FaultSummary[];
  try {
    const options: FaultOptions = { ...parsed, serverUrl: backends.config.DATABASE_URL, redisUrl: config.REDIS_URL, log: progress };
    progress(`faults ${parsed.faults.join(', ')}, ${parsed.runs} run(s) each; STEP_LEASE_MS ${parsed.leaseMs}, sweep ${SWEEP_MS} ms, ` +
      `margin ${parsed.marginMs} ms: bound ${fmt(boundMs(options))}`);
    summaries = await runFaults(options);
  } finally {
    await backends.close();
  }
  console.log('');
  console.log(faultsTable(summaries));
  for (const s of summaries) console.log(`  ${s.fault}: ${s.how}`);
  const key = `${config.REDIS_URL ? 'redis' : 'postgres'}-${backends.database}`;
  recordRun(RESULTS_FILE, RESULTS_NOTE, key, {
    at: new Date().toISOString(),
    machine: { nproc: os.availableParallelism(), cpuModel: os.cpus()[0]?.model ?? 'unknown', node: process.version, platform: `${os.platform()} ${os.release()}` },
    args: parsed, sweepMs: SWEEP_MS, boundMs: boundMs(parsed), server: backends.database,
    faults: summaries.map((s) => ({ ...s, runs: s.runs.map((r) => ({ ...r, recoveryMs: Number.isFinite(r.recoveryMs) ? r.recoveryMs : null })) })),
  });
  progress(`wrote ${path.relative(process.cwd(), RESULTS_FILE)} (entry ${key})`);
  const failed = summaries.filter((s) => !s.ok);
  if (failed.length > 0) {
    console.error(`recovery missed its bound or the backfill did not end done exactly: ${failed.map((s) => s.fault).join(', ')}`);
    process.exitCode = 1;
  }
}

main().then(() => process.exit(process.exitCode ?? 0), (error: unknown) => {
  console.error(`faults failed: ${isBackfillError(error) ? error.message : error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  process.exit(1);
});
