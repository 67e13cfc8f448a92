// npm run bench:table [-- --check] [--print [--results FILE] [--suite NAME]]: makes the benchmark's table in
// docs/benchmark.md and its short version in README.md again from bench/results.json (bench/resultsTable.ts).
// With --check it changes nothing and exits 1 when a page differs, saying how to fix it. --print writes the two
// blocks to the terminal instead, from another results file or suite if asked (e.g. the quick suite's, which
// `npm run bench -- --suite quick` writes to a temporary file): the pages quote bench/results.json's full suite only.

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { readResults } from '../bench/report.js';
import { benchmarkBlock, BENCHMARK_MARKERS, README_MARKERS, readmeBlock, withBlock } from '../bench/resultsTable.js';
import { SUITE_NAMES } from '../bench/suite.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const RESULTS = path.join(ROOT, 'bench/results.json');

const { values } = parseArgs({
  options: { check: { type: 'boolean', default: false }, print: { type: 'boolean', default: false }, results: { type: 'string' }, suite: { type: 'string' } },
});
const suite = SUITE_NAMES.find((name) => name === (values.suite ?? 'full'));
if (!suite) throw new Error(`--suite must be ${SUITE_NAMES.join(' or ')}, not "${values.suite}"`);
if (!values.print && (values.results !== undefined || suite !== 'full')) {
  throw new Error('--results and --suite go with --print: the pages quote bench/results.json\'s full suite');
}
const file = values.results === undefined ? RESULTS : path.resolve(values.results);
if (!existsSync(file)) throw new Error(`${file} does not exist: run the bench first, or name the results file it wrote`);
const results = readResults(file);

if (values.print) {
  console.log(`${benchmarkBlock(results, suite)}\n\n${readmeBlock(results, suite)}`);
} else {
  const pages = [
    { file: 'docs/benchmark.md', markers: BENCHMARK_MARKERS, block: benchmarkBlock(results) },
    { file: 'README.md', markers: README_MARKERS, block: readmeBlock(results) },
  ];
  let stale = false;
  for (const { file, markers, block } of pages) {
    const page = readFileSync(path.join(ROOT, file), 'utf8');
    const made = withBlock(page, markers, block, file);
    if (made === page) {
      console.log(`${file}: the benchmark table is up to date`);
    } else if (values.check) {
      console.error(`${file} differs from what bench/results.json makes: run \`npm run bench:table\``);
      stale = true;
    } else {
      writeFileSync(path.join(ROOT, file), made);
      console.log(`${file}: the benchmark table made again from bench/results.json`);
    }
  }
  if (stale) process.exit(1);
}
