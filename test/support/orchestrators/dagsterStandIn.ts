import { randomBytes, randomUUID } from 'node:crypto';
import { serveStandIn } from './standInServer.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GraphqlSchema, parseOperation, type Selection } from './graphqlSchema.js';

// A Dagster webserver's GraphQL endpoint (POST /graphql) as Dagster's published schema defines it
// (schemas/dagster/schema-excerpt.graphql, vendored with its licence), on loopback, for the dagster re-trigger's
// tests. It answers as dagster_webserver/graphql.py does:
//   - a body that is not JSON, or has no query: 400, plain text;
//   - an operation that does not parse or validate against the schema, or variables that do not fit their
//     types: 400 with {data: null, errors: [...]};
//   - a resolver that raises: 500 with `errors`;
//   - otherwise 200 with {data}: the root field's result shaped by the operation's selections, an error type
//     (PythonError, InvalidSubsetError, UnauthorizedError, BackfillNotFoundError, …) being a result like any other.
// Behind it: backfills and runs that carry their tags, and end after `pollsToEnd` looks.

interface StandInBackfill {
  id: string;
  partitionNames: string[];
  assets: string[][];
  tags: Map<string, string>;
  polls: number;
}

interface StandInRun {
  runId: string;
  job: string;
  tags: Map<string, string>;
  polls: number;
}

type Refusal = { __typename: 'PythonError' | 'InvalidSubsetError' | 'UnauthorizedError'; message: string };

export interface DagsterStandInOptions {
  /** The partition keys the assets and the job have: a key outside them is refused as Dagster refuses one. */
  partitionKeys: string[];
  /** The jobs the code location has. */
  jobs?: string[];
  /** How a backfill or run ends after `pollsToEnd` looks (REQUESTED / STARTED until then). */
  end?: 'success' | 'failure';
  pollsToEnd?: number;
  /** The first launch is made and its answer lost (the connection drops), as a worker dying would see it. */
  loseFirstLaunchAnswer?: boolean;
  /** Every launch is refused with this result. */
  refuseLaunches?: Refusal;
  /**
   * Every launch's resolver raises this: the webserver answers 500 with `errors`. With status 200, the same
   * answer with 200, which a client must take as the failure it is too (the status is not what says so).
   */
  launchFault?: { message: string; status: 200 | 500 };
}

export interface DagsterStandIn {
  url: string;
  backfills: StandInBackfill[];
  runs: StandInRun[];
  /** Every request: the operation's name, its variables, the status answered, and the API token header. */
  requests: { operationName: unknown; variables: unknown; status: number; token: string | undefined }[];
  close(): Promise<void>;
}

const tagList = (tags: Map<string, string>) => [...tags].map(([key, value]) => ({ __typename: 'PipelineTag', key, value }));

export async function startDagsterStandIn(options: DagsterStandInOptions): Promise<DagsterStandIn> {
  const schema = GraphqlSchema.vendoredDagster();
  const backfills: StandInBackfill[] = [];
  const runs: StandInRun[] = [];
  const requests: DagsterStandIn['requests'] = [];
  let launches = 0;
  const finished = (polls: number) => polls >= (options.pollsToEnd ?? 3);

  const pythonError = (message: string) => ({ __typename: 'PythonError', message, className: 'DagsterError', stack: [], cause: null, causes: [], errorChain: [] });

  const backfillObject = (backfill: StandInBackfill) => {
    const failed = finished(backfill.polls) && options.end === 'failure';
    return {
      __typename: 'PartitionBackfill', id: backfill.id, tags: tagList(backfill.tags),
      // Older Dagster ends an asset backfill COMPLETED whether or not partitions failed; the counts tell.
      status: finished(backfill.polls) ? 'COMPLETED' : 'REQUESTED',
      error: null,
      assetBackfillData: {
        __typename: 'AssetBackfillData',
        assetBackfillStatuses: backfill.assets.map((path) => ({
          __typename: 'AssetPartitionsStatusCounts', assetKey: { __typename: 'AssetKey', path },
          numPartitionsTargeted: backfill.partitionNames.length, numPartitionsInProgress: finished(backfill.polls) ? 0 : backfill.partitionNames.length,
          numPartitionsMaterialized: finished(backfill.polls) && !failed ? backfill.partitionNames.length : 0, numPartitionsFailed: failed ? 1 : 0,
        })),
      },
    };
  };
  const runObject = (run: StandInRun) => ({
    __typename: 'Run', runId: run.runId, jobName: run.job, tags: tagList(run.tags),
    status: finished(run.polls) ? (options.end === 'failure' ? 'FAILURE' : 'SUCCESS') : run.polls <= 1 ? 'QUEUED' : 'STARTED',
  });

  /** The root field's result: the stand-in's objects, each with its __typename, before the selections shape them. */
  const resolve = (field: string, variables: Record<string, unknown>, lose: () => void): unknown => {
    switch (field) {
      case 'launchPartitionBackfill': {
        const params = variables.backfillParams as { partitionNames?: string[]; assetSelection?: { path: string[] }[]; tags?: { key: string; value: string }[] };
        if (options.refuseLaunches) return options.refuseLaunches;
        const unknown = (params.partitionNames ?? []).filter((key) => !options.partitionKeys.includes(key));
        if (unknown.length > 0) return pythonError(`dagster._core.errors.DagsterInvariantViolationError: partition keys ${unknown.join(', ')} are not in the asset's partitions definition`);
        const backfill = { id: randomBytes(4).toString('hex'), partitionNames: params.partitionNames ?? [], assets: (params.assetSelection ?? []).map((key) => key.path), tags: new Map((params.tags ?? []).map((tag) => [tag.key, tag.value])), polls: 0 };
        backfills.unshift(backfill);
        if (++launches === 1 && options.loseFirstLaunchAnswer) lose();
        return { __typename: 'LaunchBackfillSuccess', backfillId: backfill.id, launchedRunIds: [] };
      }
      case 'partitionBackfillsOrError': {
        const limit = typeof variables.limit === 'number' ? variables.limit : backfills.length;
        return { __typename: 'PartitionBackfills', results: backfills.slice(0, limit).map(backfillObject) };
      }
      case 'partitionBackfillOrError': {
        const backfill = backfills.find((candidate) => candidate.id === variables.backfillId);
        if (!backfill) return { __typename: 'BackfillNotFoundError', message: `Backfill ${String(variables.backfillId)} could not be found.`, backfillId: variables.backfillId };
        backfill.polls += 1;
        return backfillObject(backfill);
      }
      case 'launchRun': {
        const params = variables.executionParams as { selector: { jobName?: string }; executionMetadata?: { tags?: { key: string; value: string }[] } };
        if (options.refuseLaunches) return options.refuseLaunches;
        const job = params.selector.jobName ?? '';
        if (!(options.jobs ?? []).includes(job)) return { __typename: 'PipelineNotFoundError', message: `Could not find Pipeline analytics.__repository__.${job}`, pipelineName: job, repositoryName: '__repository__', repositoryLocationName: 'analytics' };
        const tags = new Map((params.executionMetadata?.tags ?? []).map((tag) => [tag.key, tag.value]));
        const partition = tags.get('dagster/partition');
        if (partition === undefined || !options.partitionKeys.includes(partition)) return pythonError(`dagster._core.errors.DagsterUnknownPartitionError: Could not find a partition with key \`${partition ?? ''}\`.`);
        const run = { runId: randomUUID(), job, tags, polls: 0 };
        runs.unshift(run);
        if (++launches === 1 && options.loseFirstLaunchAnswer) lose();
        return { __typename: 'LaunchRunSuccess', run: runObject(run) };
      }
      case 'runsOrError': {
        const wanted = ((variables.filter as { tags?: { key: string; value: string }[] } | undefined)?.tags ?? []);
        const found = runs.filter((run) => wanted.every((tag) => run.tags.get(tag.key) === tag.value));
        return { __typename: 'Runs', results: found.map(runObject), count: found.length };
      }
      case 'runOrError': {
        const run = runs.find((candidate) => candidate.runId === variables.runId);
        if (!run) return { __typename: 'RunNotFoundError', runId: variables.runId, message: `Run ${String(variables.runId)} could not be found.` };
        run.polls += 1;
        return runObject(run);
      }
      default:
        throw new Error(`the stand-in does not serve ${field}`);
    }
  };

  const handle = (req: IncomingMessage, res: ServerResponse, text: string): void => {
    const token = typeof req.headers['dagster-cloud-api-token'] === 'string' ? req.headers['dagster-cloud-api-token'] : undefined;
    const reply = (status: number, body: unknown, operationName?: unknown, variables?: unknown) => {
      requests.push({ operationName, variables, status, token });
      if (typeof body === 'string') res.writeHead(status, { 'content-type': 'text/plain' }).end(body);
      else res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    };
    if (req.method !== 'POST' || new URL(req.url ?? '/', 'http://stand-in').pathname !== '/graphql') return reply(404, 'Not Found');
    let data: { query?: unknown; variables?: unknown; operationName?: unknown };
    try {
      data = JSON.parse(text) as typeof data;
    } catch {
      return reply(400, `GraphQL request is invalid JSON:\n${text}`);
    }
    if (typeof data.query !== 'string') return reply(400, 'No GraphQL query found in the request');
    const variables = (data.variables ?? {}) as Record<string, unknown>;
    const problems = schema.check(data.query, variables);
    if (problems.length > 0) return reply(400, { data: null, errors: problems.map((message) => ({ message })) }, data.operationName, variables);
    const operation = parseOperation(data.query);
    if (data.operationName !== undefined && data.operationName !== operation.name) {
      return reply(400, { data: null, errors: [{ message: `Unknown operation named '${String(data.operationName)}'.` }] }, data.operationName, variables);
    }
    const [root] = operation.selections;
    if (root?.kind !== 'field' || operation.selections.length !== 1) throw new Error('the stand-in serves one root field per operation');
    if (options.launchFault && root.name.startsWith('launch')) {
      const errors = [{ message: options.launchFault.message, locations: [{ line: 2, column: 3 }], path: [root.name] }];
      return reply(options.launchFault.status, { data: null, errors }, data.operationName, variables);
    }
    let lost = false;
    const value = resolve(root.name, variables, () => { lost = true; });
    if (lost) {
      requests.push({ operationName: data.operationName, variables, status: 0, token });
      req.socket.destroy();
      return;
    }
    reply(200, { data: { [root.name]: schema.project(root.selections as Selection[], value) } }, data.operationName, variables);
  };

  const served = await serveStandIn(handle, (res, message) => res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ data: null, errors: [{ message }] })));
  return {
    url: served.url,
    backfills, runs, requests,
    close: served.close,
  };
}
