// The GraphQL operations the dagster kind sends, each against Dagster's own schema (schemas/dagster/
// schema-excerpt.graphql, where test/support/orchestrators/dagsterStandIn.ts checks them). Every result is a
// union: a success type, or an error type that still comes with HTTP 200 (PythonError, InvalidSubsetError,
// UnauthorizedError, …), so each asks for __typename and the `message` every Error carries.

export interface Operation {
  name: string;
  query: string;
}

/** The tag on every backfill and run the bot launches, with the replay's key: how a retry finds what it started. */
export const REPLAY_KEY_TAG = 'backfill-bot/replay-key';
/** Dagster's own tag naming a run's partition (dagster._core.storage.tags.PARTITION_NAME_TAG). */
export const PARTITION_TAG = 'dagster/partition';

/** How many of the newest backfills a retry looks through for its own (the list cannot be filtered by tag). */
export const BACKFILLS_LOOKED_AT = 100;

export const LAUNCH_BACKFILL: Operation = {
  name: 'BackfillBotLaunchBackfill',
  query: `mutation BackfillBotLaunchBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
  }
}`,
};

export const FIND_BACKFILLS: Operation = {
  name: 'BackfillBotFindBackfills',
  query: `query BackfillBotFindBackfills($limit: Int) {
  partitionBackfillsOrError(limit: $limit) {
    __typename
    ... on PartitionBackfills { results { id tags { key value } } }
    ... on Error { message }
  }
}`,
};

export const BACKFILL_STATUS: Operation = {
  name: 'BackfillBotBackfillStatus',
  query: `query BackfillBotBackfillStatus($backfillId: String!) {
  partitionBackfillOrError(backfillId: $backfillId) {
    __typename
    ... on PartitionBackfill {
      id
      status
      error { message }
      assetBackfillData {
        assetBackfillStatuses {
          __typename
          ... on AssetPartitionsStatusCounts { numPartitionsFailed }
          ... on UnpartitionedAssetStatus { failed }
        }
      }
    }
    ... on Error { message }
  }
}`,
};

export const FIND_RUNS: Operation = {
  name: 'BackfillBotFindRuns',
  query: `query BackfillBotFindRuns($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs { results { runId status tags { key value } } }
    ... on Error { message }
  }
}`,
};

export const LAUNCH_RUN: Operation = {
  name: 'BackfillBotLaunchRun',
  query: `mutation BackfillBotLaunchRun($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on Error { message }
  }
}`,
};

export const RUN_STATUS: Operation = {
  name: 'BackfillBotRunStatus',
  query: `query BackfillBotRunStatus($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { runId status }
    ... on Error { message }
  }
}`,
};
