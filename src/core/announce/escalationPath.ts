import { z } from 'zod';

// What an escalation path is: whom the bot tells, and when, while a consumer's owner has not acknowledged an
// announcement. The catalog declares it per consumer (src/core/catalog/schema.ts), a backfill copies it when it
// is started (src/core/announce/escalation.ts), and this one schema reads both the file and the copy, so neither
// can hold a step the other would refuse. Pure: the step's due time is computed here from instants the
// database gave, never from this process's clock.
//
//   escalation:
//     - {after: 30m, to: delegates}                     # the owner's delegates (backfill.delegates), by DM
//     - {after: 1h, to: channel, channel: C0FINANCE}    # a post in the team's channel
//     - after: 2h                                       # the on-call: a user group's members, or one user, by DM
//       to: oncall
//       usergroup: S0FINOPS
//       hours: {days: mon-fri, from: "09:00", to: "18:00", tz: Europe/Berlin}

/** The longest wait a step may declare: a gate left unanswered for a week needs an operator, not a later step. */
const AFTER_MAX_MINUTES = 7 * 24 * 60;
/** A path longer than this is a list of everyone, not an escalation. */
const STEPS_MAX = 10;

const DURATION = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?$/;

/** "30m", "1h", "1h30m", "2d": the minutes it says, or undefined when it is not such a duration. */
function durationMinutes(text: string): number | undefined {
  const match = DURATION.exec(text);
  if (!match || text === '') return undefined;
  const [, days = '0', hours = '0', minutes = '0'] = match;
  return Number(days) * 1440 + Number(hours) * 60 + Number(minutes);
}

const duration = z.string({ error: 'is not a duration: write it as minutes, hours or days, e.g. 30m, 1h, 1h30m or 2d' }).superRefine((text, issue) => {
  const minutes = durationMinutes(text);
  if (minutes === undefined) issue.addIssue({ code: 'custom', message: `"${text}" is not a duration: write it as minutes, hours or days, e.g. 30m, 1h, 1h30m or 2d` });
  else if (minutes === 0) issue.addIssue({ code: 'custom', message: 'is zero: a step comes some time after the announcement, e.g. 30m' });
  else if (minutes > AFTER_MAX_MINUTES) issue.addIssue({ code: 'custom', message: `"${text}" is more than 7 days: a gate unanswered that long needs an operator (override or cancel)` });
});

const WEEKDAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;

/**
 * "mon-fri", "mon,wed,fri", "sat-sun", "fri-mon" (a range may wrap): the working days as ISO weekday numbers
 * (Monday 1 … Sunday 7), or undefined when it names no days.
 */
function workingDays(text: string): Set<number> | undefined {
  const days = new Set<number>();
  for (const part of text.toLowerCase().split(',').map((item) => item.trim())) {
    const [first, last, extra] = part.split('-').map((item) => WEEKDAYS.indexOf(item.trim() as (typeof WEEKDAYS)[number]));
    if (first === undefined || first < 0 || extra !== undefined || (last !== undefined && last < 0)) return undefined;
    const end = last ?? first;
    for (let day = first; ; day = (day + 1) % 7) {
      days.add(day + 1);
      if (day === end) break;
    }
  }
  return days;
}

const CLOCK = /^([01]\d|2[0-3]):([0-5]\d)$|^24:00$/;
const clockMinutes = (text: string): number => Number(text.slice(0, 2)) * 60 + Number(text.slice(3, 5));

function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

const workingHoursSchema = z.strictObject({
  days: z.string().refine((text) => workingDays(text) !== undefined, 'names no working days: write a range or a list of mon, tue, wed, thu, fri, sat, sun, e.g. mon-fri'),
  from: z.string().regex(CLOCK, 'is not a time of day: write it as "HH:MM" (24-hour, quoted), e.g. "09:00"'),
  to: z.string().regex(CLOCK, 'is not a time of day: write it as "HH:MM" (24-hour, quoted), e.g. "18:00"; "24:00" is the end of the day'),
  tz: z.string().refine(isTimeZone, 'is not a time zone: write an IANA name, e.g. Europe/Berlin or UTC'),
}).refine((hours) => !CLOCK.test(hours.from) || !CLOCK.test(hours.to) || clockMinutes(hours.from) < clockMinutes(hours.to),
  { message: 'ends before it starts: from must be earlier than to on the same day (for a night shift, declare the on-call as user or user group whose members cover it)', path: ['to'] });

export type WorkingHours = z.output<typeof workingHoursSchema>;

const ESCALATION_TARGETS = ['delegates', 'channel', 'oncall'] as const;
export type EscalationTarget = (typeof ESCALATION_TARGETS)[number];

const SLACK_CHANNEL = /^[CG][A-Z0-9]{2,}$/;
const SLACK_USERGROUP = /^S[A-Z0-9]{2,}$/;
const SLACK_USER = /^[UW][A-Z0-9]{2,}$/;

/**
 * One step. `to` says who: `delegates` (the owner's, as backfill.delegates holds them when the step is due),
 * `channel` (with `channel: C…`), `oncall` (with `usergroup: S…`, its members when the step is due, or `user: U…`).
 */
const escalationStepSchema = z.strictObject({
  after: duration,
  to: z.enum(ESCALATION_TARGETS, { error: 'is not whom a step can tell: write delegates, channel or oncall' }),
  channel: z.string().regex(SLACK_CHANNEL, 'is not a Slack channel id: write C… (in Slack: the channel\'s details, at the bottom)').optional(),
  usergroup: z.string().regex(SLACK_USERGROUP, 'is not a Slack user group id: write S… (in Slack: the group\'s page, ⋯, Copy group ID)').optional(),
  user: z.string().regex(SLACK_USER, 'is not a Slack user id: write a Slack member id, U… or W…').optional(),
  /** When the step may go out; one due outside them waits for the next working minute. Unset: any time. */
  hours: workingHoursSchema.optional(),
}).superRefine((step, issue) => {
  const named = (['channel', 'usergroup', 'user'] as const).filter((field) => step[field] !== undefined);
  const wanted = step.to === 'channel' ? ['channel'] : step.to === 'oncall' ? ['usergroup', 'user'] : [];
  for (const field of named.filter((item) => !wanted.includes(item))) {
    issue.addIssue({ code: 'custom', path: [field], message: `is not for a step to ${step.to}: ${wanted.length ? `it takes ${wanted.join(' or ')}` : 'it names nobody, the owner\'s delegates are read when it is due'}` });
  }
  const given = named.filter((field) => wanted.includes(field));
  if (step.to === 'channel' && given.length === 0) issue.addIssue({ code: 'custom', path: ['channel'], message: 'is missing: a step to channel names it, e.g. channel: C0FINANCE' });
  if (step.to === 'oncall' && given.length !== 1) {
    issue.addIssue({ code: 'custom', path: given.length ? ['user'] : ['usergroup'], message: given.length ? 'is given with usergroup: name the on-call as one of them' : 'is missing: a step to oncall names a user group (usergroup: S…) or one person (user: U…)' });
  }
});

export type EscalationStep = z.output<typeof escalationStepSchema>;

/**
 * A consumer's whole path: at most STEPS_MAX steps, each later than the one before. The order is checked even
 * when a step has other problems (`when`), so that the file's every problem is reported at once; only the waits
 * that parse are compared.
 */
export const escalationPathSchema = z.array(escalationStepSchema).max(STEPS_MAX, `has more than ${STEPS_MAX} steps: keep the few that reach someone who can answer`)
  .check(z.superRefine((steps: unknown, issue) => {
    if (!Array.isArray(steps)) return;
    const waits = steps.map((step: unknown) => {
      const after = step !== null && typeof step === 'object' ? (step as { after?: unknown }).after : undefined;
      return typeof after === 'string' ? { after, minutes: durationMinutes(after) } : undefined;
    });
    waits.forEach((wait, index) => {
      const previous = waits[index - 1];
      if (wait?.minutes !== undefined && previous?.minutes !== undefined && wait.minutes <= previous.minutes) {
        issue.addIssue({ code: 'custom', path: [index, 'after'], message: `is not later than the step before it (${previous.after}): list the steps in the order they go out, each after a longer wait` });
      }
    });
  }, { when: () => true }));

export type EscalationPath = z.output<typeof escalationPathSchema>;

/** A step as the stored copy holds it: the same schema as the file, so a copy that no longer parses is a fault. */
export function parseEscalationStep(stored: unknown): EscalationStep {
  return escalationStepSchema.parse(stored);
}

// ---- when a step is due ------------------------------------------------------------------------------------

interface WallClock {
  year: number;
  month: number;
  day: number;
  minutes: number;
}

function wallClockOf(at: Date, timeZone: string): WallClock {
  const parts = new Intl.DateTimeFormat('en-US', { timeZone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric' })
    .formatToParts(at);
  const part = (type: Intl.DateTimeFormatPartTypes) => Number(parts.find((item) => item.type === type)?.value);
  return { year: part('year'), month: part('month'), day: part('day'), minutes: part('hour') * 60 + part('minute') };
}

/** How far the zone's clock is ahead of UTC at this instant, in milliseconds (to the minute). */
function offsetAt(at: number, timeZone: string): number {
  const wall = wallClockOf(new Date(at), timeZone);
  const asUtc = Date.UTC(wall.year, wall.month - 1, wall.day) + wall.minutes * 60_000;
  return asUtc - Math.floor(at / 60_000) * 60_000;
}

/**
 * The instant the zone's clock shows `minutes` after midnight of the calendar day (year, month, day). A time the
 * clock skips (the hour a spring change leaves out) is read with the offset from before the change, as a clock
 * that was not put forward would show it: 02:30 on that day is 03:30.
 */
function instantAt(year: number, month: number, day: number, minutes: number, timeZone: string): number {
  const wall = Date.UTC(year, month - 1, day) + minutes * 60_000;
  const first = wall - offsetAt(wall, timeZone);
  const second = wall - offsetAt(first, timeZone);
  return offsetAt(second, timeZone) === offsetAt(first, timeZone) ? second : Math.max(first, second);
}

/**
 * The first instant at or after `at` inside the working hours: `at` itself when it is inside, else the start of
 * the next working day's hours. `to` is the first minute that is no longer working time. No hours: `at`.
 */
export function nextWorkingMinute(at: Date, hours: WorkingHours | undefined): Date {
  if (!hours) return at;
  const days = workingDays(hours.days);
  if (!days || days.size === 0) return at;
  const local = wallClockOf(at, hours.tz);
  for (let offset = 0; offset <= 7; offset += 1) {
    const date = new Date(Date.UTC(local.year, local.month - 1, local.day + offset));
    const weekday = date.getUTCDay() === 0 ? 7 : date.getUTCDay();
    if (!days.has(weekday)) continue;
    const [year, month, day] = [date.getUTCFullYear(), date.getUTCMonth() + 1, date.getUTCDate()];
    const start = instantAt(year, month, day, clockMinutes(hours.from), hours.tz);
    const end = instantAt(year, month, day, clockMinutes(hours.to), hours.tz);
    if (at.getTime() < end) return new Date(Math.max(at.getTime(), start));
  }
  // Unreachable with a working day in the set: within eight days one of them comes round.
  return at;
}

/**
 * When a step is due: its wait after the announcement went out (by the database's clock), moved to the next
 * working minute when it falls outside the step's hours.
 */
export function escalationDueAt(announcedAt: Date, step: EscalationStep): Date {
  const minutes = durationMinutes(step.after) ?? 0;
  return nextWorkingMinute(new Date(announcedAt.getTime() + minutes * 60_000), step.hours);
}
