// The directions of imports ARCHITECTURE.md draws, checked on the source itself: a change that makes the core
// reach for Slack, the data layer reach for the core, or anything in src reach into the tests or into dev/ fails
// here.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

interface Import {
  file: string;
  /** Repository-relative path of what is imported, or the package name. */
  target: string;
  typeOnly: boolean;
}

function sourceFiles(folder: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(path.join(ROOT, folder))) {
    const relative = path.join(folder, entry);
    if (statSync(path.join(ROOT, relative)).isDirectory()) found.push(...sourceFiles(relative));
    else if (entry.endsWith('.ts')) found.push(relative);
  }
  return found;
}

function importsOf(file: string): Import[] {
  const text = readFileSync(path.join(ROOT, file), 'utf8');
  const found: Import[] = [];
  for (const match of text.matchAll(/^import\s+(type\s+)?[^'"]*?from\s+'([^']+)'|import\('([^']+)'\)/gm)) {
    const specifier = match[2] ?? match[3] ?? '';
    const target = specifier.startsWith('.') ? path.normalize(path.join(path.dirname(file), specifier)).replace(/\.js$/, '.ts') : specifier;
    found.push({ file, target, typeOnly: match[1] !== undefined });
  }
  return found;
}

function violations(folders: string[], forbidden: (target: string, typeOnly: boolean) => boolean): string[] {
  return folders.flatMap(sourceFiles).flatMap(importsOf).filter((i) => forbidden(i.target, i.typeOnly)).map((i) => `${i.file} imports ${i.target}`);
}

const under = (target: string, ...folders: string[]) => folders.some((folder) => target.startsWith(`${folder}/`));

describe('the direction of imports', () => {
  it('nothing the product runs imports from the tests', () => {
    // The reading of imports itself works: every file of src imports something, several hundred in all.
    const all = sourceFiles('src').flatMap(importsOf);
    expect(all.length).toBeGreaterThan(300);
    expect(all.some((i) => i.file === 'src/worker.ts' && i.target === 'jobs/stepProcessor.ts')).toBe(true);
    expect(violations(['src', 'handlers', 'jobs', 'dev', 'bench'], (target) => under(target, 'test'))).toEqual([]);
  });

  it('the product never imports dev/ (the Slack emulator, the demo), which the build leaves out', () => {
    // dev/ is read as src is: its files import the product by repository-relative paths the check resolves.
    expect(sourceFiles('dev').flatMap(importsOf).some((i) => i.file === 'dev/demo/seed.ts' && i.target === 'src/db/migrate.ts')).toBe(true);
    expect(violations(['src', 'handlers', 'jobs'], (target) => under(target, 'dev'))).toEqual([]);
  });

  it('the core knows no Slack, no queue and no views: it takes a Messenger and returns facts', () => {
    expect(violations(['src/core'], (target, typeOnly) => !typeOnly && (['@slack/bolt', 'bullmq', 'ioredis'].includes(target) ||
      under(target, 'src/slack', 'src/queue', 'src/views', 'src/cli', 'src/commands', 'handlers', 'jobs')))).toEqual([]);
  });

  it('the data layer calls no core logic, and nothing above it', () => {
    // Types, and the step graph's tables (STEP_GRAPH, PHASE_EXITS, STEP_KINDS, SETTLED, ROLLBACK_SUFFIX) that
    // src/db/steps.ts builds its SQL from, are the data layer's vocabulary; no core function runs from here.
    const allowed = new Set(['src/core/lifecycle/stepGraph.ts']);
    expect(violations(['src/db'], (target, typeOnly) => !typeOnly && !allowed.has(target) &&
      under(target, 'src/core', 'src/slack', 'src/queue', 'src/views', 'src/cli', 'handlers', 'jobs'))).toEqual([]);
  });

  it('views are pure: no database, no Slack client, no queue', () => {
    expect(violations(['src/views'], (target, typeOnly) => !typeOnly && (['pg', 'bullmq', 'ioredis'].includes(target) ||
      under(target, 'src/db', 'src/slack', 'src/queue')))).toEqual([]);
  });

  it('the queue plumbing never reaches up into the processors; only the worker wires them in', () => {
    expect(violations(['src/queue', 'src/core', 'src/db', 'src/slack', 'src/views'], (target) => under(target, 'jobs'))).toEqual([]);
    expect(sourceFiles('src').filter((file) => importsOf(file).some((i) => under(i.target, 'jobs')))).toEqual(['src/worker.ts']);
  });

  it('the front ends parse, call the use cases and render: neither the Slack listeners nor the CLI reach the database or the queue', () => {
    // src/commands holds the use cases (run.ts, questions.ts); src/app.ts composes the processes; src/slack/delivery
    // holds the Slack side of the core's Messenger (intent rows, uploads), which records what it sends.
    const frontEnds = ['src/cli', 'handlers', ...sourceFiles('src/slack').filter((file) => !file.startsWith('src/slack/delivery/'))];
    const files = frontEnds.flatMap((entry) => (entry.endsWith('.ts') ? [entry] : sourceFiles(entry)));
    expect(files).toContain('src/slack/commands.ts');
    expect(files.flatMap(importsOf).filter((i) => ['pg', 'bullmq', 'ioredis'].includes(i.target) || under(i.target, 'src/db', 'src/queue'))
      .map((i) => `${i.file} imports ${i.target}`)).toEqual([]);
  });

  it('the HTTP edge (POST /lineage) reaches only the core: no SQL, no Slack, no queue', () => {
    expect(sourceFiles('src/http').length).toBeGreaterThan(0);
    expect(violations(['src/http'], (target, typeOnly) => !typeOnly && (['pg', 'bullmq', 'ioredis'].includes(target) ||
      under(target, 'src/db', 'src/slack', 'src/queue', 'src/views', 'src/cli', 'handlers', 'jobs')))).toEqual([]);
  });

  it('one logger and one metrics module: pino only in src/log.ts, prom-client only in src/metrics.ts, and the core counts through what its context gives it', () => {
    const importing = (name: string) => ['src', 'handlers', 'jobs'].flatMap(sourceFiles).filter((file) => importsOf(file).some((i) => i.target === name));
    expect(importing('pino')).toEqual(['src/log.ts']);
    expect(importing('prom-client')).toEqual(['src/metrics.ts']);
    expect(violations(['src/core'], (target) => target === 'src/metrics.ts' || under(target, 'src/http'))).toEqual([]);
  });

  it('the Bolt listeners are a thin shell over src/slack', () => {
    expect(violations(['handlers'], (target) => under(target, 'src/db', 'src/queue', 'src/core/lifecycle', 'src/core/recompute'))).toEqual([]);
  });
});
