import type { Queue } from 'bullmq';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { EngineMetrics } from './core/context.js';
import { BackfillState } from './core/states.js';
import { countBackfillsByState, findOutstandingAcknowledgements, type OutstandingAcknowledgements } from './db/metrics.js';
import { listAcknowledgementWaits } from './db/escalations.js';
import type { Pool } from './db/pool.js';
import { logger, type Logger } from './log.js';
import { redact } from './redaction.js';

// The Prometheus metrics of one app (GET /metrics). Each app has a registry of its own, not prom-client's
// global one: the tests run several apps in one process, and two registrations of one name in one registry throw.
//
// Two kinds of series. Read from the rows when scraped (collect callbacks): backfills by state, the
// acknowledgements outstanding and how long each given one took, which the database knows whichever process did
// the work, and the queue's depth. Counted where they happen, in this process: step durations, rows published, Slack API errors and 429s.

/**
 * The series' names, as the dashboard (ops/grafana/backfill-bot.json) and docs/operating.md list them; exported
 * for the test that holds the dashboard to a panel for each.
 */
export const METRIC_NAMES = {
  backfills: 'backfill_backfills',
  stepDuration: 'backfill_step_duration_seconds',
  acksOutstanding: 'backfill_acknowledgements_outstanding',
  oldestAckAge: 'backfill_acknowledgement_oldest_age_seconds',
  ackWait: 'backfill_acknowledgement_wait_seconds',
  slackErrors: 'backfill_slack_api_errors_total',
  slackRateLimited: 'backfill_slack_api_rate_limited_total',
  queueJobs: 'backfill_queue_jobs',
  rowsPublished: 'backfill_rows_published_total',
  collectErrors: 'backfill_metrics_collect_errors_total',
} as const;

/** A label value from outside (Slack's error string, a method from a URL) is cut to this many characters. */
const LABEL_MAX = 64;
/** Distinct outside values a label takes before the rest count as `other`: each value is a series kept for ever. */
const LABEL_VALUES_MAX = 50;

/**
 * A label value that came from outside, fit to be scraped: redacted (a Slack error can quote what it was
 * sent), reduced to Prometheus-friendly characters, bounded in length, and, past LABEL_VALUES_MAX distinct
 * values, `other`, so an answer cannot grow the registry without end.
 */
function outsideLabel(value: string, seen: Set<string>): string {
  const label = redact(value).replace(/[^A-Za-z0-9_.:-]/g, '_').slice(0, LABEL_MAX) || 'unknown';
  if (seen.has(label)) return label;
  if (seen.size >= LABEL_VALUES_MAX) return 'other';
  seen.add(label);
  return label;
}

/** The backfill states a gate waits in: their acknowledgements are the outstanding ones. */
const GATE_STATES = [BackfillState.Announced, BackfillState.Held];
/** The queue's job states worth watching (completed jobs are kept a while, and say nothing about depth). */
const QUEUE_STATES = ['waiting', 'active', 'delayed', 'prioritized', 'waiting-children', 'failed'] as const;
/** Step bodies run from milliseconds (a message) to many minutes (a large partition's stage). */
const STEP_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800];

/** An owner answers in minutes, after an escalation in hours, over a weekend in days. */
const ACK_WAIT_BUCKETS = [60, 300, 600, 1800, 3600, 7200, 14_400, 28_800, 86_400, 259_200];

/** Default Node series that are gauges despite their `_total` (see the constructor). */
const GAUGES_NAMED_TOTAL = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

/** The Web API's address when SLACK_API_URL is unset (the client's own default). */
const SLACK_API_URL = 'https://slack.com/api/';

/** A fetch for the Slack Web API clients (their `fetch` option). */
export type SlackFetch = (url: string | URL, init?: RequestInit) => Promise<Response>;

type Collector = (source: string, collect: () => Promise<void>, reset: () => void) => Promise<void>;

export class Metrics implements EngineMetrics {
  readonly registry = new Registry();
  private queue: Queue | undefined;
  private readonly stepDuration: Histogram<'kind' | 'outcome'>;
  private readonly rows: Counter<'pipeline'>;
  private readonly slackErrors: Counter<'method' | 'error'>;
  private readonly slackRateLimited: Counter<'method'>;
  /** The outside label values counted so far, per label (outsideLabel). */
  private readonly methodLabels = new Set<string>();
  private readonly errorLabels = new Set<string>();
  private readonly pipelineLabels = new Set<string>();

  constructor(private readonly pool: Pool, private readonly log: Logger = logger()) {
    const registers = [this.registry];
    this.stepDuration = new Histogram({ name: METRIC_NAMES.stepDuration, help: 'How long claimed steps ran, by kind and outcome (error: failed, retried or final).', labelNames: ['kind', 'outcome'], buckets: STEP_BUCKETS, registers });
    this.rows = new Counter({ name: METRIC_NAMES.rowsPublished, help: 'Rows put live by committed partition publishes.', labelNames: ['pipeline'], registers });
    this.slackErrors = new Counter({ name: METRIC_NAMES.slackErrors, help: 'Slack Web API calls that failed: ok:false with Slack\'s error, http_<status>, or request_failed (no answer). 429s are counted apart.', labelNames: ['method', 'error'], registers });
    this.slackRateLimited = new Counter({ name: METRIC_NAMES.slackRateLimited, help: 'Slack Web API calls answered 429 (rate limited).', labelNames: ['method'], registers });
    const collectErrors = new Counter({ name: METRIC_NAMES.collectErrors, help: 'Scrape-time reads that failed (their series are left out of that scrape).', labelNames: ['source'], registers });
    const guarded: Collector = async (source, collect, reset) => {
      try {
        await collect();
      } catch (error) {
        // A scrape still answers with what this process counted; a stale figure would mislead, so none is shown.
        reset();
        collectErrors.inc({ source });
        this.log.warn({ err: error, source }, 'metrics: a scrape-time read failed');
      }
    };
    this.registerRowGauges(guarded);
    this.registerQueueGauge(guarded);
    collectDefaultMetrics({ register: this.registry });
    // prom-client's defaults include three gauges named *_total, a suffix Prometheus keeps for counters
    // (`promtool check metrics` fails the scrape on them, and a rate() over a gauge misleads). Each is the sum of
    // its sibling without the suffix, which is kept and labelled by type: sum(nodejs_active_handles) is the same
    // figure, so they are left out rather than renamed.
    for (const name of GAUGES_NAMED_TOTAL) this.registry.removeSingleMetric(name);
  }

  /** The step queue whose depth is reported (set once the workers run; a Slack-only process has none). */
  watchQueue(queue: Queue | undefined): void {
    this.queue = queue;
  }

  stepFinished(kind: string, outcome: string, seconds: number): void {
    this.stepDuration.observe({ kind, outcome }, seconds);
  }

  rowsPublished(pipeline: string, rows: number): void {
    this.rows.inc({ pipeline: outsideLabel(pipeline, this.pipelineLabels) }, rows);
  }

  /**
   * A fetch that counts the Web API's failures from its answers: every client built with it is covered (Bolt's,
   * and the posting client, which turns a 429 into an error of its own instead of waiting). Calls outside
   * `apiUrl` (response_url, file uploads) pass through uncounted.
   */
  slackFetch(apiUrl: string = SLACK_API_URL): SlackFetch {
    const base = apiUrl.endsWith('/') ? apiUrl : `${apiUrl}/`;
    return async (url, init) => {
      const href = url instanceof URL ? url.href : url;
      if (!href.startsWith(base)) return globalThis.fetch(url, init);
      const method = outsideLabel(href.slice(base.length).split('?')[0] ?? '', this.methodLabels);
      let response: Response;
      try {
        response = await globalThis.fetch(url, init);
      } catch (error) {
        this.slackErrors.inc({ method, error: 'request_failed' });
        throw error;
      }
      await this.countAnswer(method, response);
      return response;
    };
  }

  /** The text Prometheus scrapes, and its content type. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  private async countAnswer(method: string, response: Response): Promise<void> {
    if (response.status === 429) {
      this.slackRateLimited.inc({ method });
      return;
    }
    if (response.status !== 200) {
      this.slackErrors.inc({ method, error: `http_${response.status}` });
      return;
    }
    if (!(response.headers.get('content-type') ?? '').includes('json')) return;
    // A copy: the client reads the answer itself.
    const body: unknown = await response.clone().json().catch(() => undefined);
    if (typeof body === 'object' && body !== null && 'ok' in body && body.ok === false) {
      const error = 'error' in body && typeof body.error === 'string' ? body.error : 'unknown';
      this.slackErrors.inc({ method, error: outsideLabel(error, this.errorLabels) });
    }
  }

  private registerRowGauges(guarded: Collector): void {
    const registers = [this.registry];
    const pool = this.pool;
    new Gauge({
      name: METRIC_NAMES.backfills, help: 'Backfills in each state (read from the database when scraped).', labelNames: ['state'], registers,
      async collect() {
        await guarded('backfills', async () => {
          const counts = new Map((await countBackfillsByState(pool)).map((row) => [row.state, row.count]));
          // Every state, zeros included: a panel shows a state emptying instead of its line vanishing.
          for (const state of Object.values(BackfillState)) this.set({ state }, counts.get(state) ?? 0);
        }, () => this.reset());
      },
    });
    // One read answers both gauges. The registry collects its metrics concurrently, so the two collects of a
    // scrape share the read in flight.
    let inFlight: Promise<OutstandingAcknowledgements> | undefined;
    const read = () => (inFlight ??= findOutstandingAcknowledgements(pool, GATE_STATES).finally(() => {
      inFlight = undefined;
    }));
    new Gauge({
      name: METRIC_NAMES.acksOutstanding, help: 'Acknowledgements the gates still wait for (read from the database when scraped).', registers,
      async collect() {
        await guarded('acknowledgements', async () => this.set((await read()).count), () => this.reset());
      },
    });
    // From the rows, like the gauges: the acknowledgement is pressed in whichever process Slack reached, and the
    // record keeps every one. Labels from the catalog's fixed sets only (the consumer's kind; the last escalation
    // step sent before it, or none), never a consumer's name.
    new Histogram({
      name: METRIC_NAMES.ackWait, help: 'Time from an announcement going out to its acknowledgement, by consumer kind and how far its escalation had gone (read from the database when scraped).',
      labelNames: ['kind', 'escalated_to'], buckets: ACK_WAIT_BUCKETS, registers,
      async collect() {
        await guarded('acknowledgement_waits', async () => {
          const waits = await listAcknowledgementWaits(pool);
          this.reset();
          for (const wait of waits) this.observe({ kind: wait.kind, escalated_to: wait.escalatedTo }, wait.seconds);
        }, () => this.reset());
      },
    });
    new Gauge({
      name: METRIC_NAMES.oldestAckAge, help: 'Age of the oldest acknowledgement a gate still waits for, in seconds (0: none).', registers,
      async collect() {
        // The same failure is logged and counted once, by the gauge above.
        await read().then((outstanding) => this.set(outstanding.oldestSeconds), () => this.reset());
      },
    });
  }

  private registerQueueGauge(guarded: Collector): void {
    const watched = () => this.queue;
    new Gauge({
      name: METRIC_NAMES.queueJobs, help: 'Jobs in the step queue, by state (waiting, active, delayed, …).', labelNames: ['queue', 'state'], registers: [this.registry],
      async collect() {
        const queue = watched();
        if (!queue) return;
        await guarded('queue', async () => {
          const counts = await queue.getJobCounts(...QUEUE_STATES);
          for (const state of QUEUE_STATES) this.set({ queue: queue.name, state }, counts[state] ?? 0);
        }, () => this.reset());
      },
    });
  }
}
