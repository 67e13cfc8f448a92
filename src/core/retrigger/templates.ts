// The placeholders of a REST re-trigger's URL and body ({{partitions}}, {{backfill_id}}, …): an orchestrator
// wants the replay's facts in its own shape (Airflow's {conf: …}, Prefect's {parameters: …}), so the catalog
// says where they go. Values are filled in as JSON values, never spliced into JSON text.

export const TEMPLATE_NAMES = ['partitions', 'backfill_id', 'consumer', 'idempotency_key', 'first_partition', 'last_partition'] as const;

export type TemplateValues = Record<string, string | number | string[]>;

const PLACEHOLDER = /\{\{\s*([a-z_]+)\s*\}\}/g;
const WHOLE = /^\{\{\s*([a-z_]+)\s*\}\}$/;

/** Every placeholder name used anywhere in a template (a string, or JSON holding strings). */
export function templateNamesIn(value: unknown): string[] {
  if (typeof value === 'string') return [...value.matchAll(PLACEHOLDER)].map((match) => match[1] ?? '');
  if (Array.isArray(value)) return value.flatMap(templateNamesIn);
  if (value !== null && typeof value === 'object') return Object.values(value).flatMap(templateNamesIn);
  return [];
}

/**
 * The template with its placeholders filled: a string that is one placeholder alone becomes the value itself
 * (the partitions stay a list, the backfill id a number); inside a longer string the value is written as text,
 * URL-encoded when `encode` says so (a URL's path or query).
 */
export function fillTemplate(template: unknown, values: TemplateValues, encode = false): unknown {
  if (typeof template === 'string') {
    const whole = WHOLE.exec(template);
    if (whole && !encode) return values[whole[1] ?? ''] ?? template;
    return template.replace(PLACEHOLDER, (match, name: string) => {
      const value = values[name];
      if (value === undefined) return match;
      const text = Array.isArray(value) ? value.join(',') : String(value);
      return encode ? encodeURIComponent(text) : text;
    });
  }
  if (Array.isArray(template)) return template.map((item) => fillTemplate(item, values, encode));
  if (template !== null && typeof template === 'object') {
    return Object.fromEntries(Object.entries(template).map(([key, item]) => [key, fillTemplate(item, values, encode)]));
  }
  return template;
}

/** The value at a dotted path of a JSON answer (`state`, `data.run.status`), or undefined. */
export function valueAt(document: unknown, path: string): unknown {
  let current: unknown = document;
  for (const part of path.split('.')) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string, unknown>)[part];
  }
  return current;
}
