import { listAcknowledgingOwners, listOverrideTimes } from '../../db/acknowledgements.js';
import { listEvents } from '../../db/events.js';
import type { Queryable } from '../../db/pool.js';
import { loadPeople, type People } from '../../db/people.js';
import { subtractMoney } from '../money.js';
import type { BackfillState } from '../states.js';
import { loadBackfillReport, type BackfillReport } from './status.js';
import { storedAnnouncement, type Notice } from '../notices.js';
import { loadBackfillCost, type BackfillCost } from './costs.js';
import type { EscalationStepFacts } from '../announce/escalation.js';

// The incident package of one backfill: the record finance and the incident review keep, built from the
// database and nothing else, as facts; src/views/incidentPackage.ts renders it as JSON (the record) and as
// Markdown (the same record for people to read).
// Times are ISO strings, money the decimal strings the database gives ('1284310.55', '-12408.45').

export const INCIDENT_PACKAGE_FORMAT = 'backfill-incident-package/1';

export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };

interface IncidentLogRow {
  id: number;
  pipeline: string;
  reason: string;
  requestedBy: string;
  partitions: { firstHour: string; lastHour: string; count: number };
  watermarkBefore: string | null;
  watermarkResetTo: string;
  totalBefore: string;
  totalAfter: string | null;
  diff: string | null;
  announcedAt: string;
  ranAt: string | null;
  ranBy: string | null;
  finishedAt: string | null;
  state: BackfillState;
  failure: string | null;
  limitOverride: string | null;
}

interface IncidentSignedFigure {
  report: string;
  /** The report's period, YYYY-MM-DD. */
  period: string;
  signedTotal: string;
  signedBy: string;
  signedAt: string;
  /** The table's total over the period when the backfill was announced. */
  tableTotalBefore: string;
  /** What the rebuilt report showed after the run; null until the compare step ran. */
  reportAfter: string | null;
  /** reportAfter − signedTotal. */
  diff: string | null;
}

interface IncidentPartition {
  hour: string;
  rowsBefore: number;
  rowsAfter: number | null;
  totalBefore: string;
  totalAfter: string | null;
  /** totalAfter − totalBefore. */
  diff: string | null;
  checksumBefore: string;
  checksumAfter: string | null;
  recomputedAt: string | null;
}

type ConsumerGate = 'acknowledged' | 'overridden' | 'waiting' | 'told_after';

interface IncidentConsumer {
  name: string;
  kind: 'report' | 'export' | 'model';
  owner: string;
  rule: 'before' | 'after';
  dependencyRank: number;
  dependsOn: string[];
  readDirectly: boolean;
  partitionsRead: number;
  gate: ConsumerGate;
  acknowledgedAt: string | null;
  /** Who pressed the button: the owner, or a delegate acting for them. */
  acknowledgedBy: string | null;
  overriddenBy: string | null;
  overriddenAt: string | null;
  overrideReason: string | null;
  /** What the owner was told before anything ran: the announcement's facts as stored with the backfill. */
  told: Notice;
  /** When their announcement went out (its step finished); null while it had not. */
  announcementSentAt: string | null;
  /** Seconds from then (or from the backfill's announcement, while it had not) to the acknowledgement; null without one. */
  acknowledgedAfterSeconds: number | null;
  /** Their escalation path as frozen with the backfill, step by step. */
  escalation: IncidentEscalationStep[];
}

interface IncidentEscalationStep {
  step: number;
  /** The wait after the announcement, as the catalog wrote it. */
  after: string;
  to: EscalationStepFacts['to'];
  /** The channel, user group or user it names; null for the delegates. */
  names: string | null;
  dueAt: string | null;
  status: EscalationStepFacts['status'];
  sentAt: string | null;
  reached: string[];
  stoppedAt: string | null;
  stopReason: EscalationStepFacts['stopReason'];
  note: string | null;
}

interface IncidentStep {
  kind: string;
  key: string;
  status: string;
  attempts: number;
  startedAt: string | null;
  finishedAt: string | null;
  error: string | null;
}

export interface IncidentEvent {
  id: number;
  at: string;
  /** Who did it: a Slack user id, or cli:<os user>@<host>. */
  actor: string;
  /** The person whose rights the actor used, when it was someone else, and why (the CLI's --as). */
  onBehalfOf: string | null;
  onBehalfReason: string | null;
  kind: string;
  detail: { [key: string]: JsonValue };
}

/** What the backfill cost (src/core/file/costs.ts), as filed with its log row; durations in milliseconds. */
type IncidentCost = Omit<BackfillCost, 'filedAt'> & { filedAt: string };

export interface IncidentPackage {
  format: typeof INCIDENT_PACKAGE_FORMAT;
  generatedAt: string;
  backfill: IncidentLogRow;
  /** null until the backfill finishes: a cost is filed with the finished log row. */
  cost: IncidentCost | null;
  signedFigures: IncidentSignedFigure[];
  partitions: IncidentPartition[];
  /** In dependency order: what a consumer reads is re-triggered before it. */
  consumers: IncidentConsumer[];
  steps: IncidentStep[];
  /** Every event recorded against the backfill, in the order it was written. */
  timeline: IncidentEvent[];
  /** The names of the people named above, as the bot knows them (backfill.people), by Slack user id. */
  people: { [slackId: string]: string };
}

const iso = (at: Date): string => at.toISOString();
const isoOrNull = (at: Date | null): string | null => (at ? at.toISOString() : null);

/** Reads one backfill's whole record. Read-only; throws BackfillError unknown_backfill for a missing id. */
export async function buildIncidentPackage(db: Queryable, backfillId: number): Promise<IncidentPackage> {
  const report = await loadBackfillReport(db, backfillId);
  const events = await listEvents(db, backfillId);
  // Who acknowledged (an owner or a delegate) and when an override was given: listBackfillConsumers has neither.
  const acks = await listAcknowledgingOwners(db, backfillId);
  const overrides = await listOverrideTimes(db, backfillId);
  const gates = { ackedBy: new Map(acks.map((a) => [a.consumer, a.owner])), overriddenAt: new Map(overrides.map((o) => [o.consumer, o.at])) };
  const pkg: Omit<IncidentPackage, 'people'> = {
    format: INCIDENT_PACKAGE_FORMAT,
    generatedAt: new Date().toISOString(),
    backfill: logRow(report.backfill),
    cost: costOf(await loadBackfillCost(db, backfillId)),
    signedFigures: report.signed.map((s) => ({
      report: s.report, period: s.period, signedTotal: s.signedTotal, signedBy: s.signedBy, signedAt: iso(s.signedAt),
      tableTotalBefore: s.totalBefore, reportAfter: s.reportAfter, diff: s.diff,
    })),
    partitions: report.targets.map((t) => ({
      hour: iso(t.partitionHour), rowsBefore: t.rowsBefore, rowsAfter: t.rowsAfter, totalBefore: t.totalBefore, totalAfter: t.totalAfter,
      diff: t.totalAfter === null ? null : subtractMoney(t.totalAfter, t.totalBefore),
      checksumBefore: t.checksumBefore, checksumAfter: t.checksumAfter, recomputedAt: isoOrNull(t.recomputedAt),
    })),
    consumers: report.consumers.map((c) => consumer(c, gates, waitOf(report, c))),
    steps: report.steps.map((s) => ({
      kind: s.kind, key: s.key, status: s.status, attempts: s.attempts, startedAt: isoOrNull(s.startedAt), finishedAt: isoOrNull(s.finishedAt), error: s.error,
    })),
    timeline: events.map((e) => ({
      id: Number(e.id), at: iso(e.at), actor: e.actor, onBehalfOf: e.onBehalfOf, onBehalfReason: e.onBehalfReason, kind: e.kind,
      // jsonb from the database: JSON already, round-tripped so the package holds no shared references.
      detail: JSON.parse(JSON.stringify(e.detail)) as { [key: string]: JsonValue },
    })),
  };
  return { ...pkg, people: namesOf(pkg, await loadPeople(db)) };
}

function logRow(b: BackfillReport['backfill']): IncidentLogRow {
  return {
    id: Number(b.id), pipeline: b.pipeline, reason: b.reason, requestedBy: b.requestedBy,
    partitions: { firstHour: iso(b.firstHour), lastHour: iso(b.lastHour), count: b.partitionCount },
    watermarkBefore: isoOrNull(b.watermarkBefore), watermarkResetTo: iso(b.watermarkResetTo),
    totalBefore: b.totalBefore, totalAfter: b.totalAfter, diff: b.diff,
    announcedAt: iso(b.announcedAt), ranAt: isoOrNull(b.ranAt), ranBy: b.ranBy, finishedAt: isoOrNull(b.finishedAt),
    state: b.state, failure: b.failure, limitOverride: b.limitOverride,
  };
}

function costOf(cost: BackfillCost | undefined): IncidentCost | null {
  return cost === undefined ? null : { ...cost, filedAt: iso(cost.filedAt) };
}

/** When the consumer's announcement went out, how long its acknowledgement took, and its escalation steps. */
function waitOf(report: BackfillReport, c: BackfillReport['consumers'][number]): Pick<IncidentConsumer, 'announcementSentAt' | 'acknowledgedAfterSeconds' | 'escalation'> {
  const sent = report.steps.find((s) => s.kind === 'announce' && s.key === c.consumer && (s.status === 'done' || s.status === 'undeliverable'))?.finishedAt ?? null;
  return {
    announcementSentAt: isoOrNull(sent),
    // From the backfill's announcement when the step has no time (an acknowledgement given before it went out), as the metric counts it.
    acknowledgedAfterSeconds: c.ackedAt ? Math.max(0, Math.round((c.ackedAt.getTime() - (sent ?? report.backfill.announcedAt).getTime()) / 1000)) : null,
    escalation: report.escalations.filter((e) => e.consumer === c.consumer).map((e) => ({
      step: e.step, after: e.after, to: e.to,
      names: e.names === null ? null : 'channel' in e.names ? e.names.channel : 'usergroup' in e.names ? e.names.usergroup : e.names.user,
      dueAt: isoOrNull(e.dueAt), status: e.status, sentAt: isoOrNull(e.sentAt), reached: [...e.reached], stoppedAt: isoOrNull(e.stoppedAt), stopReason: e.stopReason,
      note: e.note,
    })),
  };
}

function consumer(c: BackfillReport['consumers'][number], gates: { ackedBy: Map<string, string>; overriddenAt: Map<string, Date> },
  wait: Pick<IncidentConsumer, 'announcementSentAt' | 'acknowledgedAfterSeconds' | 'escalation'>): IncidentConsumer {
  return {
    name: c.consumer, kind: c.kind, owner: c.owner, rule: c.notifyRule, dependencyRank: c.dependencyRank, dependsOn: [...c.dependsOn],
    readDirectly: c.readDirectly, partitionsRead: c.partitionsRead,
    gate: c.notifyRule === 'after' ? 'told_after' : c.ackedAt ? 'acknowledged' : c.overriddenBy ? 'overridden' : 'waiting',
    acknowledgedAt: isoOrNull(c.ackedAt), acknowledgedBy: gates.ackedBy.get(c.consumer) ?? null,
    overriddenBy: c.overriddenBy, overriddenAt: isoOrNull(gates.overriddenAt.get(c.consumer) ?? null), overrideReason: c.overrideReason,
    told: storedAnnouncement(c),
    ...wait,
  };
}

/** The names of everyone the package names, for a reader who does not know the ids. */
function namesOf(pkg: Omit<IncidentPackage, 'people'>, people: People): { [slackId: string]: string } {
  const ids = new Set<string | null>([
    pkg.backfill.requestedBy, pkg.backfill.ranBy, ...pkg.signedFigures.map((s) => s.signedBy),
    ...pkg.consumers.flatMap((c) => [c.owner, c.acknowledgedBy, c.overriddenBy, ...c.escalation.flatMap((e) => e.reached)]),
    ...pkg.timeline.flatMap((e) => [e.actor, e.onBehalfOf]),
  ]);
  return Object.fromEntries([...ids].flatMap((id) => {
    const name = id === null ? undefined : people.get(id);
    return id !== null && name !== undefined ? [[id, name]] : [];
  }).sort(([a], [b]) => String(a).localeCompare(String(b))));
}
