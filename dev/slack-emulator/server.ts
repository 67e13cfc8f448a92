// The emulator's HTTP side, on node:http: the Web API under /api/<method> (each attempt recorded with the
// status and body it was answered with, scripted faults applied first), the upload URLs files.* hands out, and
// the response_url targets.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { handleMethod } from './methods/index.js';
import { isRec, str, type Rec } from './params.js';
import type { EmulatorState, RecordedCall } from './state.js';

/** Form fields web-api sends JSON-stringified that tests want as objects. */
const JSON_FIELDS = new Set([
  'blocks',
  'attachments',
  'view',
  'files',
  'metadata',
  'unfurls',
  'user_auth_blocks',
  'file_uploads',
]);

function parseJsonFields(params: Rec): Rec {
  for (const [key, value] of Object.entries(params)) {
    if (JSON_FIELDS.has(key) && typeof value === 'string') {
      try {
        params[key] = JSON.parse(value) as unknown;
      } catch {
        // left as sent: Slack would answer invalid_blocks_format or similar, the test can see the raw string
      }
    }
  }
  return params;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)));
  return Buffer.concat(chunks);
}

interface ParsedBody {
  fields: Rec;
  files: Buffer[];
  invalid: boolean;
}

async function parseBody(contentType: string, raw: Buffer): Promise<ParsedBody> {
  const type = (contentType.split(';')[0] ?? '').trim().toLowerCase();
  const fields: Rec = {};
  const files: Buffer[] = [];
  if (raw.length === 0) return { fields, files, invalid: false };
  if (type === 'application/json') {
    try {
      const parsed: unknown = JSON.parse(raw.toString('utf8'));
      if (!isRec(parsed)) return { fields, files, invalid: true };
      return { fields: { ...parsed }, files, invalid: false };
    } catch {
      return { fields, files, invalid: true };
    }
  }
  if (type === 'multipart/form-data') {
    try {
      const form = await new Response(new Uint8Array(raw), { headers: { 'content-type': contentType } }).formData();
      for (const [key, value] of form.entries()) {
        if (typeof value === 'string') {
          fields[key] = value;
        } else {
          const bytes = Buffer.from(await value.arrayBuffer());
          fields[key] = bytes;
          files.push(bytes);
        }
      }
      return { fields, files, invalid: false };
    } catch {
      return { fields, files, invalid: true };
    }
  }
  // application/x-www-form-urlencoded, or anything else web-api might send: treat as a form.
  for (const [key, value] of new URLSearchParams(raw.toString('utf8'))) fields[key] = value;
  return { fields, files, invalid: false };
}

function send(res: ServerResponse, status: number, body: Rec, headers: Record<string, string> = {}): void {
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(payload),
    ...headers,
  });
  res.end(payload);
}

function authorised(req: IncomingMessage, params: Rec): boolean {
  const header = req.headers.authorization ?? '';
  if (/^Bearer xoxb-\S+$/.test(header)) return true;
  const token = str(params.token);
  return token !== undefined && token.startsWith('xoxb-');
}

/** Records one attempt (and, when answered 200, one call) with the status and body it was answered with. */
type Recorder = (status: number, response: Rec) => RecordedCall;

async function handleApi(
  state: EmulatorState,
  req: IncomingMessage,
  res: ServerResponse,
  method: string,
  query: URLSearchParams,
): Promise<void> {
  const at = Date.now();
  const raw = await readBody(req);
  const parsed = await parseBody(req.headers['content-type'] ?? '', raw);
  const params: Rec = {};
  for (const [key, value] of query) params[key] = value;
  Object.assign(params, parsed.fields);
  parseJsonFields(params);

  const record: Recorder = (status, response) => {
    const call: RecordedCall = { method, params, at, status, response };
    state.attempts.push(call);
    if (status === 200) state.calls.push(call);
    return call;
  };

  if (parsed.invalid) {
    const json = (req.headers['content-type'] ?? '').toLowerCase().startsWith('application/json');
    const body = { ok: false, error: json ? 'invalid_json' : 'invalid_form_data' };
    record(200, body);
    send(res, 200, body);
    return;
  }
  if (!authorised(req, params)) {
    const body = { ok: false, error: 'not_authed' };
    record(200, body);
    send(res, 200, body);
    return;
  }
  answerApi(state, res, method, params, record);
}

/** Answers a well-formed, authenticated call: as the next pending fault for its method says, or by doing it. */
function answerApi(state: EmulatorState, res: ServerResponse, method: string, params: Rec, record: Recorder): void {
  const fault = state.faults.take(method, params);
  if (fault?.kind === 'rate') {
    const body = { ok: false, error: 'ratelimited' };
    record(429, body);
    send(res, 429, body, { 'retry-after': String(fault.retryAfterSeconds) });
    return;
  }
  if (fault?.kind === 'http') {
    const body = { ok: false, error: `http_${fault.status}` };
    record(fault.status, body);
    send(res, fault.status, body);
    return;
  }
  const body = fault?.kind === 'error' ? { ok: false, error: fault.error } : handleMethod(state, method, params);
  if (fault?.kind === 'drop') {
    // The work is done (a message posted); only the answer is lost.
    if (fault.answer === 'hangup') {
      record(0, body);
      res.socket?.destroy();
      return;
    }
    const lost = { ok: false, error: `http_${fault.answer}` };
    record(fault.answer, lost);
    send(res, fault.answer, lost);
    return;
  }
  record(200, body);
  send(res, 200, body);
}

async function handleUpload(
  state: EmulatorState,
  req: IncomingMessage,
  res: ServerResponse,
  fileId: string,
): Promise<void> {
  const raw = await readBody(req);
  if (!state.pendingFiles.has(fileId)) {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('file not found');
    return;
  }
  const contentType = req.headers['content-type'] ?? '';
  let bytes = raw;
  if (contentType.toLowerCase().startsWith('multipart/form-data')) {
    const parsed = await parseBody(contentType, raw);
    // web-api sends one multipart field, `body`, holding the bytes.
    const field = parsed.fields.body;
    bytes = Buffer.isBuffer(field) ? field : (parsed.files[0] ?? Buffer.from(str(field) ?? ''));
  }
  state.uploads.set(fileId, bytes);
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end(`OK - ${bytes.length}`);
}

async function handleResponseUrl(
  state: EmulatorState,
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<void> {
  const raw = (await readBody(req)).toString('utf8');
  let body: unknown = raw;
  try {
    body = JSON.parse(raw) as unknown;
  } catch {
    // not JSON: kept as the raw string
  }
  state.responses.push({ path, body });
  state.entries.push({ kind: 'response', id: decodeURIComponent(path.slice('/response/'.length)), body });
  send(res, 200, { ok: true });
}

export function createEmulatorServer(state: EmulatorState): Server {
  return createServer((req, res) => {
    const requestUrl = new URL(req.url ?? '/', 'http://127.0.0.1');
    const path = requestUrl.pathname;
    let work: Promise<void>;
    if (path.startsWith('/api/') && (req.method === 'POST' || req.method === 'GET')) {
      work = handleApi(state, req, res, decodeURIComponent(path.slice('/api/'.length)), requestUrl.searchParams);
    } else if (path.startsWith('/upload/') && req.method === 'POST') {
      work = handleUpload(state, req, res, decodeURIComponent(path.slice('/upload/'.length)));
    } else if (path.startsWith('/response/') && req.method === 'POST') {
      work = handleResponseUrl(state, req, res, path);
    } else {
      req.resume();
      send(res, 404, { ok: false, error: 'not_found' });
      return;
    }
    work.catch((error: unknown) => {
      if (!res.headersSent) send(res, 500, { ok: false, error: 'emulator_failure', detail: String(error) });
      else res.destroy();
    });
  });
}

/** Listens on an ephemeral port of 127.0.0.1; resolves with the port. */
export async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return (server.address() as AddressInfo).port;
}
