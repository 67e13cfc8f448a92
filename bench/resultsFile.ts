import { existsSync, readFileSync, writeFileSync } from 'node:fs';

/**
 * Keeps the latest run of each kind in a results file ({note, runs: {<key>: result}}): a run replaces only its own
 * kind's entry, so one file holds the figures the docs quote for every kind. A file that is not readable JSON is
 * started over, and says so.
 */
export function recordRun(file: string, note: string, key: string, result: Record<string, unknown>): void {
  let runs: Record<string, unknown> = {};
  if (existsSync(file)) {
    try {
      runs = (JSON.parse(readFileSync(file, 'utf8')) as { runs?: Record<string, unknown> }).runs ?? {};
    } catch (error) {
      console.error(`${file} was not readable JSON (${(error as Error).message}); starting it over`);
    }
  }
  runs[key] = result;
  writeFileSync(file, `${JSON.stringify({ note, runs }, null, 2)}\n`);
}
