import type { webApi } from '@slack/bolt';
import { redact, redactDeep } from '../../redaction.js';

type FetchFunction = webApi.FetchFunction;
type FetchRequestInit = NonNullable<Parameters<FetchFunction>[1]>;

// Everything the bot sends to Slack leaves through one fetch: Bolt's client, the posting client, `respond()`
// (Bolt posts to response_url with the app's fetch) and the file uploads all take the `fetch` of the client
// options (src/slack/app.ts, src/workerMain.ts). Redacting there, rather than in each message builder, means
// no call can leave with a secret in it, whichever view, listener or notice built it: a message's `text`, every
// string of its `blocks`, a view published to the Home tab, an ephemeral reply.
//
// NOTE: the bytes of an uploaded file go out as they are (a PNG is not text); the incident package, the one
// text file, is redacted where it is rendered (src/views/incidentPackage.ts).

/** The body fields never rewritten: the bot's own token is its credential to Slack, sent to Slack. */
const KEPT_FIELDS = new Set(['token']);

const isJsonContainer = (value: unknown): value is object => typeof value === 'object' && value !== null;

/** One form field redacted: a JSON field (blocks, attachments, a view) string by string, so it stays JSON. */
function redactField(value: string): string {
  const plain = redact(value);
  if (plain === value) return value;
  const first = value.trimStart()[0];
  if (first === '{' || first === '[') {
    try {
      const parsed: unknown = JSON.parse(value);
      if (isJsonContainer(parsed)) return JSON.stringify(redactDeep(parsed));
    } catch {
      // Text that only looks like JSON: redacted as text.
    }
  }
  return plain;
}

/** A url-encoded Web API body, each field redacted; the same string when nothing in it needed it. */
function redactForm(body: string): string {
  const fields = new URLSearchParams(body);
  let changed = false;
  const out = new URLSearchParams();
  for (const [key, value] of fields) {
    const redacted = KEPT_FIELDS.has(key) ? value : redactField(value);
    if (redacted !== value) changed = true;
    out.append(key, redacted);
  }
  return changed ? out.toString() : body;
}

/** A JSON body (`respond()`'s), every string in it redacted but the token. */
function redactJson(body: string): string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return redact(body);
  }
  if (!isJsonContainer(parsed) || Array.isArray(parsed)) return JSON.stringify(redactDeep(parsed));
  const out = Object.fromEntries(Object.entries(parsed).map(([key, value]) => [key, KEPT_FIELDS.has(key) ? value : redactDeep(value)]));
  return JSON.stringify(out);
}

function contentTypeOf(headers: FetchRequestInit['headers']): string {
  const entry = Object.entries(headers ?? {}).find(([name]) => name.toLowerCase() === 'content-type');
  return (entry?.[1] ?? '').toLowerCase();
}

/** `init` with its text body redacted; a FormData's text fields too; its files as they are. */
function redactRequest(init: FetchRequestInit | undefined): FetchRequestInit | undefined {
  const body = init?.body;
  if (!init || body === undefined) return init;
  if (typeof body === 'string') {
    const type = contentTypeOf(init.headers);
    const redacted = type.includes('json') ? redactJson(body) : type.includes('x-www-form-urlencoded') ? redactForm(body) : redact(body);
    return redacted === body ? init : { ...init, body: redacted };
  }
  const form = new FormData();
  for (const [key, value] of body) {
    if (typeof value === 'string') form.append(key, KEPT_FIELDS.has(key) ? value : redactField(value));
    else form.append(key, value, value.name);
  }
  return { ...init, body: form };
}

/** `inner` with every request body redacted first: the one door the bot's words take to Slack. */
export function redactingFetch(inner: FetchFunction): FetchFunction {
  return (url, init) => inner(url, redactRequest(init));
}
