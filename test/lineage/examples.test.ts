// Every example event the OpenLineage producers keep (test/fixtures/openlineage, with where each came from)
// through the real endpoint, each validated against the vendored specification first: a valid event is
// accepted (200, 202) or ignored with a reason, never refused. Once as they are, naming tables no pipeline
// writes; then again with a pipeline behind every table they read, which is what a team adopting the bot sees.

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPENLINEAGE_SCHEMA_ID, openLineageSchemas } from '../support/openLineageSchemas.js';
import { createSlackHarness, type SlackHarness } from '../support/slackApp.js';

const TOKEN = 'lineage-examples-token-0123456789abcdef';
const FIXTURES = fileURLToPath(new URL('../fixtures/openlineage/', import.meta.url));
const SCHEMAS = openLineageSchemas();

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** The producer each folder's templates name, as the integration's client sends it. */
const PRODUCERS: Record<string, string> = {
  dbt: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/dbt',
  spark: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/spark',
  flink: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/flink',
  airflow: 'https://github.com/OpenLineage/OpenLineage/tree/1.40.0/integration/airflow',
};
/**
 * Every example file, in the order sent: a run's START before its COMPLETE (Spark's are two files). The first
 * test holds this list to the folder, so a file added there is sent too.
 */
const FILES = [
  'spec/example_full_event.json',
  'python-client/example_full_event.json', 'python-client/serde_example_run_event.json',
  'marquez/event_full.json', 'marquez/event_required_only.json', 'marquez/null_nominal_end_time.json', 'marquez/event_dataset_event.json', 'marquez/event_job_event.json',
  'dbt/successful_run_ol_events.json',
  'spark/pysparkV2AppendDataStartEvent.json', 'spark/pysparkV2AppendDataCompleteEvent.json',
  'flink/expected_jdbc.json', 'flink/expected_sql_kafka.json',
  'airflow/postgres.json',
];
/** Folders of complete events, sent as they are; the others hold templates. */
const COMPLETE_EVENTS = ['spec', 'python-client', 'marquez'];
/** Shown invalid by the schema and refused by the bot: the Python client's serialization example (eventTime without a zone). */
const NOT_VALID = new Set(['python-client/serde_example_run_event.json']);

// json-unit's `${json-unit.any-string}` / `${json-unit.regex}…`, and the Jinja checks of dbt's and Airflow's tests.
const PLACEHOLDER = /^\$\{json-unit\.[a-z-]+\}|^\{\{.*\}\}$/;

/** A UUID (version 4 layout) made from the text, so the same run is named alike wherever a template names it. */
function uuidOf(text: string): string {
  const hex = createHash('sha256').update(text).digest('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-8${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

const isObject = (value: Json | undefined): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);
const text = (value: Json | undefined) => (typeof value === 'string' ? value : '');

/** A placeholder as a value of its kind (README.md, "Templates"). */
function filled(value: string, key: string, path: string): Json {
  if (value.startsWith('${json-unit.regex}')) return value.slice('${json-unit.regex}'.length);
  if (value.includes('result is number')) return 1;
  if (value.includes('result == true')) return true;
  if (value.includes('is_uuid') || key === 'runId') return uuidOf(path);
  if (key === 'nominalEndTime') return '2026-12-02T06:00:00Z';
  if (value.includes('is_datetime') || /(Time|time|date)$/.test(key)) return '2026-12-02T05:00:00Z';
  return 'example';
}

/** The template with its placeholders filled; a run next to its job gets the job's run id (its parent facet's too). */
function withPlaceholdersFilled(value: Json, group: string, key = '', path = ''): Json {
  if (typeof value === 'string') return PLACEHOLDER.test(value) ? filled(value, key, `${group}${path}`) : value;
  if (Array.isArray(value)) return value.map((item, i) => withPlaceholdersFilled(item, group, key, `${path}[${i}]`));
  if (!isObject(value)) return value;
  const out: JsonObject = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withPlaceholdersFilled(v, group, k, `${path}.${k}`)]));
  // A run event's run (the run of a parent facet too) whose id the template leaves out: the client always sends it.
  const { run, job, eventType } = value;
  const isRun = isObject(run) || (path === '' && typeof eventType === 'string');
  if (isRun && isObject(job) && (!isObject(run) || run.runId === undefined || PLACEHOLDER.test(text(run.runId)))) {
    out.run = { ...(isObject(out.run) ? out.run : {}), runId: uuidOf(`${group}:${text(job.namespace)}:${text(job.name)}`) };
  }
  return out;
}

/** Facets as a client sends them: each with `_producer` and `_schemaURL`. */
function withFacetFields(facets: Json | undefined, kind: string, producer: string): Json | undefined {
  if (!isObject(facets)) return facets;
  return Object.fromEntries(Object.entries(facets).map(([name, facet]) =>
    [name, isObject(facet) ? { _producer: producer, _schemaURL: `https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/${kind}`, ...facet } : facet]));
}

/** An integration's expected event as its client would have sent it (README.md, "Templates"). */
function completed(template: JsonObject, group: string): JsonObject {
  const producer = PRODUCERS[group] ?? 'https://github.com/OpenLineage/OpenLineage';
  const event = withPlaceholdersFilled(template, group) as JsonObject;
  const datasets = (list: Json | undefined, facetsKey: string, kind: string) => (Array.isArray(list) ? list.map((dataset) => (isObject(dataset)
    ? { ...dataset, ...(dataset.facets ? { facets: withFacetFields(dataset.facets, 'DatasetFacet', producer) ?? null } : {}), ...(dataset[facetsKey] ? { [facetsKey]: withFacetFields(dataset[facetsKey], kind, producer) ?? null } : {}) }
    : dataset)) : list);
  return {
    eventTime: '2026-12-02T05:00:00Z',
    producer,
    schemaURL: 'https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent',
    ...event,
    ...(isObject(event.run) ? { run: { ...event.run, ...(event.run.facets ? { facets: withFacetFields(event.run.facets, 'RunFacet', producer) ?? null } : {}) } } : {}),
    ...(isObject(event.job) ? { job: { ...event.job, ...(event.job.facets ? { facets: withFacetFields(event.job.facets, 'JobFacet', producer) ?? null } : {}) } } : {}),
    ...(event.inputs ? { inputs: datasets(event.inputs, 'inputFacets', 'InputDatasetFacet') ?? [] } : {}),
    ...(event.outputs ? { outputs: datasets(event.outputs, 'outputFacets', 'OutputDatasetFacet') ?? [] } : {}),
  };
}

interface Example {
  /** `dbt/successful_run_ol_events.json#3`. */
  name: string;
  file: string;
  event: JsonObject;
}

/** The example files in the folder: every JSON file but the subset facet examples (facets, not events). */
function exampleFiles(): string[] {
  return readdirSync(FIXTURES, { withFileTypes: true }).filter((entry) => entry.isDirectory()).flatMap((folder) =>
    readdirSync(join(FIXTURES, folder.name)).filter((name) => name.endsWith('.json') && !name.startsWith('BaseSubsetDatasetFacet')).map((name) => `${folder.name}/${name}`));
}

/** Every example event, in FILES' order and each file's own. */
function examples(): Example[] {
  return FILES.flatMap((file) => {
    const group = file.split('/')[0] ?? '';
    const content = JSON.parse(readFileSync(join(FIXTURES, file), 'utf8')) as Json;
    const events = (Array.isArray(content) ? content : [content]).filter(isObject);
    return events.map((event, i) => ({ name: `${file}#${i}`, file, event: COMPLETE_EVENTS.includes(group) ? event : completed(event, group) }));
  });
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

describe('the OpenLineage example events, through POST /api/v1/lineage', () => {
  let h: SlackHarness;
  let url: string;
  const all = examples();
  const valid = all.filter((example) => !NOT_VALID.has(example.file));

  const post = async (event: JsonObject): Promise<Answer> => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: JSON.stringify(event) });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  /** An answer the specification allows for a valid event: accepted, or ignored with a reason; never refused. */
  const expectAccepted = (example: Example, sent: Answer) => {
    expect([200, 202], `${example.name}: ${JSON.stringify(sent.body)}`).toContain(sent.status);
    expect(['recorded', 'noted', 'pending', 'duplicate', 'ignored'], example.name).toContain(sent.body.outcome);
    if (sent.body.outcome === 'ignored') expect(String(sent.body.reason), example.name).not.toBe('');
  };

  beforeAll(async () => {
    h = await createSlackHarness({ LINEAGE_TOKEN: TOKEN, LINEAGE_MAX_OPEN_PROPOSALS: '1000', LINEAGE_READS_PER_HOUR: '100000' });
    url = h.eventsUrl.replace('/slack/events', '/api/v1/lineage');
  });
  afterAll(async () => h.close());

  it('has every file of the folder: dbt, Spark, Flink, Airflow, Python client, Marquez and the specification, run, job and dataset events', () => {
    expect([...FILES].sort()).toEqual(exampleFiles().sort());
    expect(new Set(all.map((example) => example.file.split('/')[0]))).toEqual(new Set(['airflow', 'dbt', 'flink', 'marquez', 'python-client', 'spark', 'spec']));
    expect(all.length).toBeGreaterThan(80);
    expect(valid.some((example) => 'dataset' in example.event)).toBe(true);
    expect(valid.some((example) => !('run' in example.event) && 'job' in example.event)).toBe(true);
  });

  it('holds every one of them valid by the vendored OpenLineage.json, but the one kept because it is not', () => {
    for (const example of valid) expect(SCHEMAS.problems(OPENLINEAGE_SCHEMA_ID, example.event), example.name).toEqual([]);
    const invalid = all.filter((example) => NOT_VALID.has(example.file));
    expect(invalid).toHaveLength(1);
    for (const example of invalid) expect(SCHEMAS.problems(OPENLINEAGE_SCHEMA_ID, example.event).join('; ')).toMatch(/\/eventTime must match format "date-time"/);
  });

  it('accepts or ignores with a reason every valid one, refusing none; refuses the invalid one naming what the schema does', async () => {
    for (const example of valid) expectAccepted(example, await post(example.event));
    for (const example of all.filter((e) => NOT_VALID.has(e.file))) {
      const sent = await post(example.event);
      expect(sent.status).toBe(400);
      expect(sent.body.error).toMatch(/eventTime must be an ISO 8601 time with a zone/);
    }
    // None of them read a pipeline's table yet: nothing was written.
    expect(await h.engine.ctx.pool.query('SELECT 1 FROM backfill.lineage_events').then((r) => r.rowCount)).toBe(0);
  });

  it('with a pipeline behind every table they read, takes each run that read one as a proposal, its START-named inputs included', async () => {
    const tables = [...new Set(valid.flatMap((example) => (Array.isArray(example.event.inputs) ? example.event.inputs : []).filter(isObject).map((input) => text(input.name))))]
      .filter((name) => name !== '');
    expect(tables.length).toBeGreaterThan(5);
    await h.engine.ctx.pool.query(
      `INSERT INTO backfill.pipelines (name, target_table, key_columns, measure_column, step_sql, source_shards_sql)
       SELECT 'example_' || n, t, '{id}', 'amount', 'SELECT 1', 'SELECT 1' FROM unnest($1::text[]) WITH ORDINALITY AS x(t, n)`, [tables]);
    const answers = new Map<string, Answer>();
    for (const example of valid) {
      const sent = await post(example.event);
      expectAccepted(example, sent);
      answers.set(example.name, sent);
    }
    const pending = [...answers.entries()].filter(([, sent]) => sent.body.outcome === 'pending');
    // dbt's models, the Airflow task, Marquez's COMPLETE and Spark's append.
    expect(pending.length).toBeGreaterThan(5);
    expect(answers.get('airflow/postgres.json#3')).toMatchObject({ status: 202, body: { outcome: 'pending', withoutHours: 1 } });
    // Spark names its inputs on START and sends COMPLETE with `inputs: []`: the COMPLETE still has its two reads,
    // kept without hours (Spark sends no nominal time) for an operator's read rule.
    const sparkStart = answers.get('spark/pysparkV2AppendDataStartEvent.json#0');
    const sparkComplete = answers.get('spark/pysparkV2AppendDataCompleteEvent.json#0');
    expect(sparkStart?.body).toMatchObject({ outcome: 'noted', inputs: 2 });
    expect(sparkComplete).toMatchObject({ status: 202, body: { outcome: 'pending', reads: 0, withoutHours: 2 } });
    // The Python client's full example has a nominal time (03:00:00.001 to 04:00:00.001): its read has the two
    // hours it touches. Marquez's is the same run's COMPLETE (one run id, one job), sent second: a duplicate.
    expect(answers.get('python-client/example_full_event.json#0')).toMatchObject({ status: 202, body: { outcome: 'pending', reads: 2 } });
    expect(answers.get('marquez/event_full.json#0')?.body).toMatchObject({ outcome: 'duplicate' });
    // Flink's job only started: its inputs wait for a COMPLETE.
    expect(answers.get('flink/expected_jdbc.json#0')?.body).toMatchObject({ outcome: 'noted', inputs: 1 });
  });
});
