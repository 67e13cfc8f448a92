// The states of a backfill, as a vocabulary: what each is called and said, and which are finished. The moves
// between them, and who makes each, are src/core/lifecycle/stateMachine.ts.

export const BackfillState = {
  Announced: 'announced',
  Held: 'held',
  Approved: 'approved',
  Running: 'running',
  Paused: 'paused',
  Replaying: 'replaying',
  Comparing: 'comparing',
  Done: 'done',
  Failed: 'failed',
  Cancelled: 'cancelled',
  Stopped: 'stopped',
  RollingBack: 'rolling_back',
  RolledBack: 'rolled_back',
} as const;
export type BackfillState = (typeof BackfillState)[keyof typeof BackfillState];

export const ACTIVE_STATES: readonly BackfillState[] = ['announced', 'held', 'approved', 'running', 'paused', 'replaying', 'comparing', 'rolling_back'];

export function describeState(state: BackfillState): string {
  switch (state) {
    case 'announced': return 'announced, waiting for acknowledgements';
    case 'held': return 'held by an owner';
    case 'approved': return 'approved, about to run';
    case 'running': return 'recomputing partitions';
    case 'replaying': return 're-triggering consumers';
    case 'comparing': return 'comparing totals';
    case 'done': return 'done';
    case 'failed': return 'failed';
    case 'cancelled': return 'cancelled';
    case 'paused': return 'paused: the expansion stopped, waiting for an operator';
    case 'stopped': return 'stopped (fenced)';
    case 'rolling_back': return 'rolling back';
    case 'rolled_back': return 'rolled back';
    default: {
      const unreachable: never = state;
      return unreachable;
    }
  }
}

/** The states a backfill has finished in (cancelled, stopped, failed, done, rolled back): the ones not ACTIVE_STATES. */
export function isFinished(state: BackfillState): boolean {
  return !ACTIVE_STATES.includes(state);
}
