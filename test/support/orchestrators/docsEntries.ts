import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { catalogConsumerSchema } from '../../../src/core/catalog/schema.js';
import type { Retrigger } from '../../../src/core/retrigger/definition.js';

// The catalog entries docs/catalog.md gives to paste, read from the page itself: a test that runs one holds the
// documentation to a configuration that works.

/** The consumer entry in the first yaml block under `### {heading}`, checked as the catalog checks a consumer; its retrigger. */
export function docsEntry(heading: string): Retrigger {
  const page = readFileSync(new URL('../../../docs/catalog.md', import.meta.url), 'utf8');
  const section = page.split(`\n### ${heading}\n`)[1] ?? '';
  const block = /```yaml\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error(`docs/catalog.md has no yaml block under ### ${heading}`);
  const [entry] = parse(block) as unknown[];
  return catalogConsumerSchema.parse(entry).retrigger;
}
