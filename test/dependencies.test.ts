// The layering of ARCHITECTURE.md, held by dependency-cruiser's rules (.dependency-cruiser.cjs) over the whole
// import graph: re-exports, dynamic imports and type-only imports are told apart, which a reading of import lines
// could not do. The rules are shown to fire on a fixture that breaks two of them, so a rule that stopped matching
// (a renamed folder, a typo in a path) fails here instead of passing for ever.

import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { cruise, type ICruiseOptions, type IReporterOutput } from 'dependency-cruiser';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const FIXTURE = fileURLToPath(new URL('fixtures/layering/', import.meta.url));
const config = createRequire(import.meta.url)('../.dependency-cruiser.cjs') as { forbidden: NonNullable<ICruiseOptions['ruleSet']>['forbidden']; options: ICruiseOptions };

async function violationsIn(baseDir: string, folders: string[]): Promise<{ rule: string; from: string; to: string }[]> {
  // Paths in the rules are relative to baseDir, as they are to the folder `npx depcruise` runs in.
  const result: IReporterOutput = await cruise(folders, { ...config.options, baseDir, ruleSet: { forbidden: config.forbidden }, validate: true },
    undefined, { tsConfig: { fileName: `${ROOT}tsconfig.json` } });
  if (typeof result.output === 'string') throw new Error('dependency-cruiser answered text, not a result');
  return result.output.summary.violations.map((v) => ({ rule: v.rule.name, from: v.from, to: v.to }));
}

describe('the layering', () => {
  it('holds across src, handlers, jobs, dev, bench and scripts', async () => {
    expect(await violationsIn(ROOT, ['src', 'handlers', 'jobs', 'dev', 'bench', 'scripts'])).toEqual([]);
  }, 60_000);

  it('is enforced: the core importing Slack, the product importing dev/ and two modules importing each other are named, a type-only import is not', async () => {
    const found = await violationsIn(FIXTURE, ['src', 'dev']);
    expect(found).toEqual(expect.arrayContaining([
      { rule: 'core-knows-no-edges', from: 'src/core/reachesSlack.ts', to: 'src/slack/deps.ts' },
      { rule: 'no-dev-in-the-product', from: 'src/usesDev.ts', to: 'dev/tool.ts' },
      expect.objectContaining({ rule: 'no-circular', from: 'src/db/a.ts' }),
    ]));
    expect(found.filter((v) => v.from === 'src/core/typeOnly.ts')).toEqual([]);
  }, 60_000);
});
