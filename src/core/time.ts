import { BackfillError, ErrorCode } from '../errors.js';
import { typedText } from '../markup.js';

export const HOUR_MS = 3_600_000;

/** What was asked for: a night (the flagged partitions of one UTC date) or an explicit inclusive hour range. */
export type TargetSpec =
  | { kind: 'night'; date: string }
  | { kind: 'range'; from: Date; to: Date };

const RANGE_HELP = 'Use a night as YYYY-MM-DD (e.g. 2026-11-15) or an hour range as from..to (e.g. 2026-11-15T05:00..2026-11-15T10:00, both ends included, UTC).';

export function parseTargetSpec(text: string): TargetSpec {
  const trimmed = text.trim();
  if (/^\d{4}-\d{2}-\d{2}$/.test(trimmed)) {
    parseDate(trimmed);
    return { kind: 'night', date: trimmed };
  }
  const parts = trimmed.split('..');
  if (parts.length !== 2 || !parts[0] || !parts[1]) {
    throw new BackfillError(ErrorCode.BadInput, `"${typedText(text)}" is neither a night nor an hour range. ${RANGE_HELP}`);
  }
  const from = parseHour(parts[0]);
  const to = parseHour(parts[1]);
  if (from > to) {
    throw new BackfillError(ErrorCode.BadInput,
      `The range ${typedText(text)} runs backwards: ${formatHour(from)} is after ${formatHour(to)}. Put the earlier hour first.`);
  }
  return { kind: 'range', from, to };
}

export function parseDate(text: string): Date {
  const match = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
  const date = match ? new Date(Date.UTC(Number(match[1]), Number(match[2]) - 1, Number(match[3]))) : undefined;
  if (!date || Number.isNaN(date.getTime()) || date.toISOString().slice(0, 10) !== text) {
    throw new BackfillError(ErrorCode.BadInput, `"${typedText(text)}" is not a calendar date. Write it as YYYY-MM-DD, e.g. 2026-11-15.`);
  }
  return date;
}

/** An hour as 2026-11-15T05, 2026-11-15T05:00, 2026-11-15T05:00Z or 2026-11-15 05:00; always UTC, always on the hour. */
export function parseHour(text: string): Date {
  const match = /^(\d{4}-\d{2}-\d{2})[T ](\d{2})(?::(\d{2}))?(?::00)?Z?$/.exec(text.trim());
  if (!match?.[1] || !match[2]) {
    throw new BackfillError(ErrorCode.BadInput, `"${typedText(text)}" is not an hour. ${RANGE_HELP}`);
  }
  const day = parseDate(match[1]);
  const hour = Number(match[2]);
  if (hour > 23 || (match[3] !== undefined && match[3] !== '00')) {
    throw new BackfillError(ErrorCode.BadInput, `"${typedText(text)}" is not the start of an hour: partitions are hourly, e.g. 2026-11-15T05:00.`);
  }
  return new Date(day.getTime() + hour * HOUR_MS);
}

/**
 * The hours a command names before its reason (`continue 7 2026-11-15T07:00 2026-11-15T10:00 <reason>`): every
 * leading word that looks like an hour is parsed as one (and refused if it is not a whole hour).
 */
export function leadingHours(words: readonly string[]): { hours: Date[]; rest: string[] } {
  const count = words.findIndex((word) => !/^\d{4}-\d{2}-\d{2}T\d/.test(word));
  const split = count === -1 ? words.length : count;
  return { hours: words.slice(0, split).map(parseHour), rest: words.slice(split) };
}

export function hoursBetween(from: Date, to: Date): Date[] {
  const hours: Date[] = [];
  for (let t = from.getTime(); t <= to.getTime(); t += HOUR_MS) hours.push(new Date(t));
  return hours;
}

/** 2026-11-15 05:00 (UTC implied everywhere in the product). */
export function formatHour(hour: Date): string {
  return `${hour.toISOString().slice(0, 10)} ${hour.toISOString().slice(11, 16)}`;
}

export function formatTime(at: Date): string {
  return `${formatHour(at)} UTC`;
}

/** 05:00–10:00 on 2026-11-15, or the two full hours when the range spans days. */
export function formatHourRange(first: Date, last: Date): string {
  const sameDay = first.toISOString().slice(0, 10) === last.toISOString().slice(0, 10);
  if (sameDay) return `${first.toISOString().slice(11, 16)}–${last.toISOString().slice(11, 16)} on ${first.toISOString().slice(0, 10)}`;
  return `${formatHour(first)} – ${formatHour(last)}`;
}

function utcDay(hour: Date): string {
  return hour.toISOString().slice(0, 10);
}

export function distinctDays(hours: Date[]): string[] {
  return [...new Set(hours.map(utcDay))].sort();
}
