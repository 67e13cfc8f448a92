import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020, type ErrorObject } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

// The OpenLineage specification's JSON Schemas as schemas/openlineage holds them (copied with their licence,
// schemas/README.md), with the bot's own facets beside them, in one ajv registry keyed by each schema's $id: an
// event's `schemaURL` and every facet's `_schemaURL` resolve to the schema they name, or to nothing.

// ajv-formats is CommonJS with `exports.default`; under NodeNext the default import is the module object.
const addFormats = addFormatsModule.default;

const ROOT = fileURLToPath(new URL('../../schemas/openlineage/', import.meta.url));

/** The JSON files under schemas/openlineage that are JSON Schemas (a `$schema` and an `$id`), by $id. */
function schemaFiles(folder: string = ROOT): { id: string; file: string; schema: object }[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return schemaFiles(path);
    if (!entry.name.endsWith('.json')) return [];
    const schema = JSON.parse(readFileSync(path, 'utf8')) as { $schema?: unknown; $id?: unknown };
    return typeof schema.$schema === 'string' && typeof schema.$id === 'string' ? [{ id: schema.$id, file: path, schema }] : [];
  });
}

/** A facet or event problem as a line: where, what. */
const lines = (errors: readonly ErrorObject[] | null | undefined) => (errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? e.keyword}`);

export interface OpenLineageSchemas {
  /** The $ids registered, with the file each came from. */
  files: Map<string, string>;
  /**
   * What is wrong with `value` by the schema at `url` (an $id with an optional `#/$defs/…` pointer): empty when
   * it is valid; one line saying so when no schema here has that address.
   */
  problems(url: string, value: unknown): string[];
}

export function openLineageSchemas(): OpenLineageSchemas {
  // Unknown keywords stay errors (strictSchema), so a typo in the bot's own schema fails; the specification's
  // `example` annotation is declared. Its `not: { required: [...] }` and `anyOf` without a type on each branch are
  // valid JSON Schema that ajv's stricter checks (strictRequired, strictTypes) would refuse.
  const ajv = new Ajv2020({ strictSchema: true, strictRequired: false, strictTypes: false, allErrors: true });
  ajv.addKeyword('example');
  addFormats(ajv);
  const files = new Map<string, string>();
  for (const { id, file, schema } of schemaFiles()) {
    ajv.addSchema(schema);
    files.set(id, file);
  }
  return {
    files,
    problems(url, value) {
      const validate = files.has(url.split('#')[0] ?? '') ? ajv.getSchema(url) : undefined;
      if (!validate) return [`no schema in schemas/openlineage has the address ${url}`];
      return validate(value) ? [] : lines(validate.errors);
    },
  };
}

/** The $id of the specification's schema (schemas/openlineage/OpenLineage.json). */
export const OPENLINEAGE_SCHEMA_ID = 'https://openlineage.io/spec/2-0-2/OpenLineage.json';

/** A facet as every facet is: `_producer`, `_schemaURL` and its own fields. */
interface Facet {
  _schemaURL?: unknown;
}

/**
 * Every problem of an OpenLineage event: against the specification's schema its `schemaURL` names, and each
 * facet (the run's, the job's, and each input's and output's, of every kind) against the schema its own
 * `_schemaURL` names. Each line says where.
 */
export function eventProblems(schemas: OpenLineageSchemas, event: Record<string, unknown>): string[] {
  // The whole document (one of RunEvent, DatasetEvent, JobEvent, exactly) and the definition the event names.
  const problems = [...new Set([...schemas.problems(OPENLINEAGE_SCHEMA_ID, event), ...schemas.problems(String(event.schemaURL), event)])]
    .map((line) => `event: ${line}`);
  const facetsAt = (where: string, facets: unknown) => Object.entries((facets ?? {}) as Record<string, Facet>).flatMap(([name, facet]) =>
    schemas.problems(String(facet._schemaURL), facet).map((line) => `${where}.${name}: ${line}`));
  const run = event.run as { facets?: unknown } | undefined;
  const job = event.job as { facets?: unknown } | undefined;
  problems.push(...facetsAt('run.facets', run?.facets), ...facetsAt('job.facets', job?.facets));
  for (const side of ['inputs', 'outputs'] as const) {
    const datasets = (event[side] ?? []) as Record<string, unknown>[];
    datasets.forEach((dataset, index) => {
      for (const kind of ['facets', 'inputFacets', 'outputFacets']) problems.push(...facetsAt(`${side}[${index}].${kind}`, dataset[kind]));
    });
  }
  return problems;
}
