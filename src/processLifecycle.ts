import { isBackfillError } from './errors.js';

/**
 * Runs a long-lived entry point: a refusal at start (bad configuration, say) prints its message and exits 1;
 * SIGINT / SIGTERM run `stop` once, then exit 0.
 */
export function runService(start: () => Promise<() => Promise<void>>): void {
  start().then((stop) => {
    let stopping = false;
    const shutdown = () => {
      if (stopping) return;
      stopping = true;
      stop().then(() => process.exit(0), (error: unknown) => {
        console.error(error);
        process.exit(1);
      });
    };
    process.once('SIGINT', shutdown);
    process.once('SIGTERM', shutdown);
  }, (error: unknown) => {
    console.error(isBackfillError(error) ? error.message : error);
    process.exit(1);
  });
}
