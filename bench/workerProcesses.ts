// Worker processes for the benchmark: each one is bench/worker.ts in a node of its own, against the bench's
// database and queue backend. Memory is read from /proc/<pid>/status: VmRSS (resident now) and VmHWM (the
// peak resident size since the process started), in kB.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The application_name of the worker processes' connections. */
export const WORKER_APPLICATION = 'backfill-bench-worker';
const WORKER_SCRIPT = fileURLToPath(new URL('./worker.ts', import.meta.url));
const READY_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 15_000;

export interface Memory {
  rssMb: number;
  peakMb: number;
}

export interface WorkerProcess {
  pid: number;
  /** The queue backend it took from its environment: redis:<prefix> or postgres:<schema>. */
  queue: string;
  /** Memory once it was ready, before any backfill ran. */
  idle: Memory;
  child: ChildProcess;
}

export function readMemory(pid: number): Memory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
    if (!match?.[1]) throw new Error(`/proc/${pid}/status has no ${field}`);
    return Number(match[1]);
  };
  return { rssMb: kb('VmRSS') / 1024, peakMb: kb('VmHWM') / 1024 };
}

/**
 * The environment of a worker process: the bench's own, with `env` over it; a variable `env` gives as
 * undefined is taken out (REDIS_URL, for workers whose queues are in PostgreSQL: src/backends.ts puts them on
 * Redis whenever it is set).
 */
export type WorkerEnv = Record<string, string | undefined>;

function childEnv(env: WorkerEnv): NodeJS.ProcessEnv {
  const merged: NodeJS.ProcessEnv = { ...process.env };
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) delete merged[name];
    else merged[name] = value;
  }
  return merged;
}

export async function startWorkerProcesses(count: number, env: WorkerEnv, extraArgs: string[] = []): Promise<WorkerProcess[]> {
  const started: WorkerProcess[] = [];
  try {
    for (let n = 0; n < count; n += 1) started.push(await startOne(env, extraArgs));
  } catch (error) {
    await stopWorkerProcesses(started);
    throw error;
  }
  return started;
}

async function startOne(env: WorkerEnv, extraArgs: string[]): Promise<WorkerProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER_SCRIPT, ...extraArgs], {
    env: childEnv(env),
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const { pid, queue } = await new Promise<{ pid: number; queue: string }>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`a bench worker did not start within ${READY_TIMEOUT_MS / 1000} s`)), READY_TIMEOUT_MS);
    child.once('message', (message: { ready?: boolean; pid?: number; queue?: string }) => {
      clearTimeout(timer);
      if (message.ready && message.pid && message.queue) resolve({ pid: message.pid, queue: message.queue });
      else reject(new Error(`a bench worker said ${JSON.stringify(message)}`));
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`a bench worker exited with ${code} before it was ready`));
    });
  });
  return { pid, queue, idle: readMemory(pid), child };
}

/** SIGTERM each (it closes its worker and pool), SIGKILL whatever has not exited in time. */
export async function stopWorkerProcesses(workers: WorkerProcess[]): Promise<void> {
  await Promise.all(workers.map(async ({ child }) => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<boolean>((resolve) => child.once('exit', () => resolve(true)));
    child.kill('SIGTERM');
    const timedOut = new Promise<boolean>((resolve) => setTimeout(() => resolve(false), STOP_TIMEOUT_MS).unref());
    if (!(await Promise.race([exited, timedOut]))) {
      child.kill('SIGKILL');
      await exited;
    }
  }));
}
