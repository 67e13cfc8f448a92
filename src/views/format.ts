import type { People } from '../db/people.js';
import { formatMoney, formatSignedMoney } from '../core/money.js';
import { formatHour, formatHourRange, formatTime } from '../core/time.js';
import { isSlackUserId } from '../slackUser.js';
import { slackText, terminalText } from '../markup.js';

// The one set of formatters the views share (Block Kit, terminal text, the incident package): money, hours and
// people, each with the dash a missing value shows as. The money and hour formats themselves are the core's
// (src/core/money.ts, src/core/time.ts), so that a refusal the core words reads exactly as every view does.

export { formatHour, formatHourRange, formatMoney, formatSignedMoney, formatTime };

/** What every view shows for a value that is not there (yet). */
export const NONE = '—';

export const moneyOrNone = (amount: string | null): string => (amount === null ? NONE : formatMoney(amount));
export const signedMoneyOrNone = (amount: string | null): string => (amount === null ? NONE : formatSignedMoney(amount));
export const timeOrNone = (at: Date | null): string => (at ? formatTime(at) : NONE);

/** A person in Slack: a mention, which Slack renders with their name; anything else (cli:…@host) as text, escaped. */
export function slackPerson(id: string): string {
  return isSlackUserId(id) ? `<@${id}>` : slackText(id);
}

/** Slack mentions (<@U…>, <@U…|name>) in text written in Slack's markup, each replaced by how a view names the person. */
export function nameMentions(text: string, name: (id: string) => string): string {
  return text.replace(/<@([UW][A-Z0-9]+)(?:\|[^>]*)?>/g, (_, id: string) => name(id));
}

/** A person on a terminal: the name they go by (Slack's, so outside text), else @U…; anything else as it is, without control characters. */
export function terminalPerson(id: string, people: People): string {
  if (!isSlackUserId(id)) return terminalText(id);
  return terminalText(people.get(id) ?? `@${id}`);
}

/** A person in a record (the incident package): name and id, "Settlement lead (U07SETTLE)", else the id. */
export function recordPerson(id: string, people: People): string {
  const name = people.get(id);
  return name === undefined ? id : `${name} (${id})`;
}
