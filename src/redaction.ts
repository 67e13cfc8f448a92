// The one redaction every sink applies before outside text is stored or shown: a Slack message, a timeline
// event, a step's error, a backfill's failure, the incident package, a log line, a metric label. Outside text
// (an orchestrator's answer, a webhook's error, a URL from the catalog) can carry a credential in it: the bot's
// own (an echoed header) or its sender's (a URL with a password). Two nets, because neither alone is enough:
//   - the values: every configured secret is registered here when the configuration is loaded
//     (src/config.ts), so a signing secret, which has no recognisable shape, is caught by its value;
//   - the shapes: URL passwords, credential-carrying query parameters, Bearer and Basic values, Slack tokens,
//     whoever's they are.
// Redacting at the sink rather than at each source means a new source is covered without anyone remembering.

import { slackText, terminalText } from './markup.js';

export const REDACTED = '[redacted]';

/** A value shorter than this would blank ordinary words; such a secret is weak anyway, and the shapes still apply. */
const MIN_SECRET_LENGTH = 4;

const registered = new Set<string>();
/** The registered values longest first, so that a secret containing another is removed whole; kept sorted here, not on every call. */
let longestFirst: string[] = [];
const byLengthDescending = (values: string[]): string[] => values.sort((a, b) => b.length - a.length);

/**
 * Adds values never to show. Called by loadConfig with every configured secret, so each process knows its
 * own; never removes one (a secret a process once held stays a secret for as long as it runs).
 */
export function registerSecrets(values: Iterable<string | undefined>): void {
  for (const value of values) {
    if (typeof value !== 'string' || value.length < MIN_SECRET_LENGTH) continue;
    for (const form of formsOf(value)) registered.add(form);
  }
  longestFirst = byLengthDescending([...registered]);
}

/**
 * A secret as it can appear in text: as it is, JSON-escaped, percent-encoded, percent-decoded, and as Slack's
 * markup shows outside text (src/markup.ts: a secret with & < > ` in it is escaped before it is sent).
 */
function formsOf(value: string): string[] {
  const forms = new Set([value, JSON.stringify(value).slice(1, -1), encodeURIComponent(value), slackText(value)]);
  try {
    forms.add(decodeURIComponent(value));
  } catch {
    // Not percent-encoded text; the other forms stand.
  }
  return [...forms].filter((form) => form.length >= MIN_SECRET_LENGTH);
}

/** Query parameters whose value is a credential (`?api_key=…`, `&access_token=…`, a pre-signed URL's signature). */
const CREDENTIAL_PARAMETER = String.raw`(?:[a-z0-9_.-]*(?:token|secret|passw(?:or)?d|pwd|api[-_]?key|apikey|auth|credential|session|signature|sig)[a-z0-9_.-]*|key|code|x-amz-signature|x-amz-credential|x-goog-signature)`;
const CREDENTIAL_PARAMETER_NAME = new RegExp(`^${CREDENTIAL_PARAMETER}$`, 'i');

/** Whether a query parameter's name says it carries a credential: those whose values `redact` removes. */
export function isCredentialParameter(name: string): boolean {
  return CREDENTIAL_PARAMETER_NAME.test(name);
}

/** Shapes of credentials, whatever field or message carries them, and whoever's they are. */
const SHAPES: [RegExp, string][] = [
  // scheme://user:password@host: the password goes, the rest stays useful; https://token@host: the token goes.
  [/\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@"'\\<>]*):[^\s@/"'\\<>]+@/gi, `$1:${REDACTED}@`],
  [/\b(https?:\/\/)[^\s:/@"'\\<>]+@/gi, `$1${REDACTED}@`],
  [new RegExp(String.raw`([?&;]${CREDENTIAL_PARAMETER}=)[^&#\s"'<>\\]+`, 'gi'), `$1${REDACTED}`],
  [/\bxox[a-z]-[A-Za-z0-9-]+/g, REDACTED],
  [/\bxapp-[A-Za-z0-9-]+/g, REDACTED],
  [/\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{4,}/gi, `$1 ${REDACTED}`],
  // A credential header echoed as text: `"authorization": "…"`, `X-Api-Key: …`.
  [/(["']?\b(?:authorization|proxy-authorization|x-api-key|api[-_]?key|cookie|x-[a-z-]*token)["']?\s*[:=]\s*["']?)(?!\[redacted\]|(?:Bearer|Basic|Token)\s)[^"'\s,;}]+/gi, `$1${REDACTED}`],
];

/** `text` without credentials: every registered value (and `extra`) and anything shaped like a credential. */
export function redact(text: string, extra: readonly string[] = []): string {
  let out = text;
  const values = extra.length > 0 ? byLengthDescending([...registered, ...extra.flatMap(formsOf)]) : longestFirst;
  for (const value of values) {
    if (out.includes(value)) out = out.split(value).join(REDACTED);
  }
  for (const [pattern, replacement] of SHAPES) out = out.replace(pattern, replacement);
  return out;
}

/** A JSON-like value with every string in it redacted (a timeline event's detail, a step's result). */
export function redactDeep<T>(value: T): T {
  if (typeof value === 'string') return redact(value) as T;
  if (Array.isArray(value)) return value.map((item: unknown) => redactDeep(item)) as T;
  if (value !== null && typeof value === 'object' && !(value instanceof Date)) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, redactDeep(item)])) as T;
  }
  return value;
}

/** `text` at most `max` characters, saying how much was left out rather than ending mid-word unseen. */
export function bounded(text: string, max: number): string {
  if (text.length <= max) return text;
  return `${text.slice(0, max)}… (${text.length - max} more characters not shown)`;
}

/**
 * How an outside system's answer is quoted in an error, the timeline or Slack: redacted, on one line, without
 * control characters, and at most `max` characters. Redacted before it is cut, so a cut cannot split a secret
 * into a part no pattern knows.
 */
export function quoteOutside(text: string, max = 200): string {
  return bounded(terminalText(redact(text)).replace(/\s+/g, ' ').trim(), max);
}
