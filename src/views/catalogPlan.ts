import type { CatalogChange, CatalogPlan, FieldChange } from '../core/catalog/plan.js';
import { terminalText } from '../markup.js';

// The catalog's plan as the terminal shows it, Terraform's way: `+` added, `~` changed (each field before →
// after), `-` removed, then what apply refuses. Long SQL is shown by its first differing line, not whole.

const LONG = 72;

// The file's values are outside text on a terminal: JSON escapes C0 controls, not C1 nor the bidi overrides, and
// a name or a refusal is not JSON at all; so every line leaves without control characters.

function shown(value: unknown): string {
  if (value === null || value === undefined) return '(none)';
  if (Array.isArray(value)) return `[${value.map((item) => (typeof item === 'string' ? item : JSON.stringify(item))).join(', ')}]`;
  if (typeof value === 'string') return JSON.stringify(value.length > LONG ? `${value.slice(0, LONG - 1)}…` : value);
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** A multi-line text (a step's SQL): where it first differs, as that line before and after. */
function textChange(before: string, after: string): string {
  const was = before.split('\n');
  const now = after.split('\n');
  let line = 0;
  while (line < was.length && line < now.length && was[line] === now[line]) line += 1;
  return `line ${line + 1} of ${now.length}: ${shown(was[line] ?? '') } → ${shown(now[line] ?? '')}`;
}

function fieldLine(change: FieldChange): string {
  const multiLine = typeof change.before === 'string' && typeof change.after === 'string' && (change.before.includes('\n') || change.after.includes('\n'));
  const what = multiLine ? textChange(String(change.before), String(change.after)) : `${shown(change.before)} → ${shown(change.after)}`;
  return `    ${change.field}: ${what}`;
}

const SIGN: Record<CatalogChange['action'], string> = { add: '+', change: '~', remove: '-' };

function changeLines(change: CatalogChange): string[] {
  const head = `${SIGN[change.action]} ${change.entity} ${change.name}`;
  return change.action === 'change' ? [head, ...change.fields.map(fieldLine)] : [head];
}

function counts(plan: CatalogPlan): string {
  const count = (action: CatalogChange['action']) => plan.changes.filter((change) => change.action === action).length;
  return `${count('add')} to add, ${count('change')} to change, ${count('remove')} to remove`;
}

/** `catalog plan`: what apply would do, and what it would refuse. */
export function renderCatalogPlan(plan: CatalogPlan): string {
  if (plan.changes.length === 0) return terminalText(`Catalog ${plan.source}: no changes; the database holds what the file declares.`);
  const lines = [`Catalog ${plan.source} against the database: ${counts(plan)}.`, ...plan.changes.flatMap(changeLines)];
  if (plan.refusals.length > 0) {
    lines.push('', `Apply would refuse all of it (nothing changes) because:`, ...plan.refusals.map((refusal) => `  ! ${refusal}`));
  } else {
    lines.push('', `\`backfill catalog apply ${plan.source}\` makes these changes in one transaction.`);
  }
  return terminalText(lines.join('\n'));
}

/** `catalog apply`: what was applied. */
export function renderCatalogApplied(plan: CatalogPlan): string {
  if (plan.changes.length === 0) return terminalText(`Catalog ${plan.source}: nothing to apply; the database already holds what the file declares.`);
  const applied = counts(plan).replace('to add', 'added').replace('to change', 'changed').replace('to remove', 'removed');
  return terminalText([`Applied ${plan.source}: ${applied}.`, ...plan.changes.flatMap(changeLines)].join('\n'));
}
