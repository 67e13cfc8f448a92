import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { Config } from '../../config.js';
import { BackfillError, ErrorCode } from '../../errors.js';
import { isCredentialParameter, quoteOutside, REDACTED } from '../../redaction.js';

// Where a webhook or REST re-trigger may send the bot's requests. Whoever may apply the catalog chooses the URL,
// and the worker calls it from inside the network with the RETRIGGER_SECRET_* headers attached: an open URL is
// a way to reach the cloud's metadata service, a loopback admin port or a file, and to have the answer posted to
// the incident channel. So a URL is:
//   - http or https, nothing else (no file:, data:, gopher:);
//   - without credentials (no user:password@, no ?api_key=): they come from RETRIGGER_SECRET_* headers, so the
//     catalog never holds one and no message can repeat one;
//   - to a host RETRIGGER_ALLOWED_HOSTS allows (unset: none), with the scheme, host and port written out (no
//     placeholder before the path), so that the catalog check sees the host the call will reach;
//   - never to a loopback, link-local, unspecified or metadata address unless the operator named that address
//     (or metadata name) itself: a wildcard does not name it, and neither does an allowed name that resolves
//     there (DNS can change after the catalog was checked).
// The catalog checks the first three when it is applied; the worker checks everything again when it calls,
// after resolving the host, and connects to the addresses it checked (outboundHttp.ts).

const ALLOWED_HOSTS_VARIABLE = 'RETRIGGER_ALLOWED_HOSTS';
const ALLOWED_HOSTS_EXAMPLE = 'airflow.internal,*.orchestrator.example.com,10.0.4.12';

interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** Every address a host name resolves to. Injectable: it stands for DNS, whose answer may change between calls. */
export type HostResolver = (host: string) => Promise<ResolvedAddress[]>;

/** The system's resolver (getaddrinfo: /etc/hosts, then DNS), every address it gives. */
export const systemResolver: HostResolver = async (host) =>
  (await lookup(host, { all: true, order: 'verbatim' })).map((found) => ({ address: found.address, family: found.family === 6 ? 6 : 4 }));

export interface UrlPolicy {
  /** RETRIGGER_ALLOWED_HOSTS as parsed: lowercase names, `*.` wildcards and canonical IP literals. */
  allowedHosts: readonly string[];
  resolve: HostResolver;
}

export function urlPolicyOf(config: Pick<Config, 'RETRIGGER_ALLOWED_HOSTS'>, resolve: HostResolver = systemResolver): UrlPolicy {
  return { allowedHosts: config.RETRIGGER_ALLOWED_HOSTS ?? [], resolve };
}

// ---- RETRIGGER_ALLOWED_HOSTS entries ---------------------------------------------------------------------

const LABEL = '[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?';
const HOST_NAME = new RegExp(`^${LABEL}(?:\\.${LABEL})*$`);
// A wildcard covers the names under at least two labels (*.example.com): `*` or `*.com` would allow the world.
const WILDCARD = new RegExp(`^\\*\\.${LABEL}(?:\\.${LABEL})+$`);

/** An IP address as one spelling (IPv6 compressed, lowercase, no brackets), whatever way it was written. */
function canonicalAddress(address: string): string {
  const bare = address.replace(/^\[|\]$/g, '');
  if (isIP(bare) !== 6) return bare;
  return new URL(`http://[${bare}]/`).hostname.slice(1, -1);
}

/** One entry of RETRIGGER_ALLOWED_HOSTS in its canonical spelling, or undefined when it is none of the three forms. */
export function canonicalHostEntry(entry: string): string | undefined {
  const text = entry.trim().toLowerCase().replace(/\.$/, '');
  if (isIP(text.replace(/^\[|\]$/g, '')) !== 0) return canonicalAddress(text);
  if (HOST_NAME.test(text) || WILDCARD.test(text)) return text;
  return undefined;
}

export const ALLOWED_HOST_ENTRY_RULE = `a host name, a *.wildcard of at least two labels or an IP address, comma-separated, e.g. ${ALLOWED_HOSTS_EXAMPLE}`;

// ---- addresses and names that are never reached unless named -------------------------------------------------

type SpecialKind = 'loopback' | 'link-local' | 'metadata' | 'unspecified';

const KIND_WORDS: Record<SpecialKind, string> = {
  loopback: 'a loopback address (127.0.0.0/8, ::1)',
  'link-local': 'a link-local address (169.254.0.0/16, fe80::/10)',
  metadata: "a cloud metadata service's address",
  unspecified: 'an unspecified address (0.0.0.0/8, ::), which reaches this machine',
};

/** Cloud instance metadata services: AWS, GCP, Azure and OpenStack on 169.254.169.254, AWS on IPv6, Alibaba. */
const METADATA_ADDRESSES = new Set(['169.254.169.254', 'fd00:ec2::254', '100.100.100.200']);
const METADATA_NAMES = new Set(['metadata.google.internal', 'metadata', 'instance-data', 'instance-data.ec2.internal']);

function ipv4Octets(address: string): number[] | undefined {
  if (isIP(address) !== 4) return undefined;
  return address.split('.').map(Number);
}

/** The eight 16-bit groups of an IPv6 address in canonical form (no embedded dotted quad: URL writes hex). */
function ipv6Groups(canonical: string): number[] {
  const [head = '', tail] = canonical.split('::');
  const part = (text: string) => (text === '' ? [] : text.split(':').map((group) => Number.parseInt(group, 16)));
  const front = part(head);
  const back = tail === undefined ? [] : part(tail);
  return [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back];
}

/** The IPv4 address inside an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) IPv6 address. */
function embeddedIpv4(groups: number[]): string | undefined {
  const high = groups.slice(0, 6).join(':');
  if (high !== '0:0:0:0:0:65535' && high !== '100:65435:0:0:0:0') return undefined;
  const [a = 0, b = 0] = groups.slice(6);
  return [a >> 8, a & 255, b >> 8, b & 255].join('.');
}

function specialKindOf(address: string): SpecialKind | undefined {
  const canonical = canonicalAddress(address);
  if (METADATA_ADDRESSES.has(canonical)) return 'metadata';
  const v4 = ipv4Octets(canonical);
  if (v4) {
    const [first, second] = v4;
    if (first === 127) return 'loopback';
    if (first === 0) return 'unspecified';
    if (first === 169 && second === 254) return 'link-local';
    return undefined;
  }
  if (isIP(canonical) !== 6) return undefined;
  const groups = ipv6Groups(canonical);
  const inner = embeddedIpv4(groups);
  if (inner) return specialKindOf(inner);
  if (canonical === '::1') return 'loopback';
  if (canonical === '::') return 'unspecified';
  if (((groups[0] ?? 0) & 0xffc0) === 0xfe80) return 'link-local';
  return undefined;
}

function specialNameKind(name: string): SpecialKind | undefined {
  if (METADATA_NAMES.has(name)) return 'metadata';
  if (name === 'localhost' || name.endsWith('.localhost')) return 'loopback';
  return undefined;
}

// ---- the URL's shape, without the policy (the catalog schema's refinement) ------------------------------------

const PLACEHOLDER = /\{\{[^}]*\}\}/;
const AUTHORITY = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i;
const HEADER_INSTEAD = 'send it in a header whose value is {env: RETRIGGER_SECRET_…} instead (a rest re-trigger\'s headers), so that the catalog never holds a secret';

/**
 * What is wrong with a re-trigger URL's shape, as a sentence that never repeats the URL (it may hold the very
 * credential it is refused for), or undefined when it is an http(s) URL without credentials or placeholders before
 * its path.
 */
export function urlShapeProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be an http:// or https:// URL, e.g. https://orchestrator.example.com/api/v1/dags/settlement/dagRuns';
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return `uses ${quoteOutside(url.protocol, 20)}, which a re-trigger never calls: only http:// and https:// URLs are allowed`;
  }
  if (PLACEHOLDER.test(AUTHORITY.exec(text)?.[0] ?? '')) {
    return 'has a placeholder before its path: write the scheme, host and port out, so that the host it reaches can be checked against RETRIGGER_ALLOWED_HOSTS';
  }
  if (url.username !== '' || url.password !== '') {
    return `carries credentials in the URL (user:password@): ${HEADER_INSTEAD}`;
  }
  for (const name of new Set(url.searchParams.keys())) {
    if (isCredentialParameter(name)) return `carries a credential in its query (${quoteOutside(name, 40)}=${REDACTED}): ${HEADER_INSTEAD}`;
  }
  return undefined;
}

// ---- the host against RETRIGGER_ALLOWED_HOSTS ---------------------------------------------------------------

/** The host a URL reaches, lowercase, without an IPv6 literal's brackets or a trailing dot. */
function hostOf(url: URL): string {
  const host = url.hostname.toLowerCase().replace(/\.$/, '');
  return isIP(host.replace(/^\[|\]$/g, '')) !== 0 ? canonicalAddress(host) : host;
}

function coveredByWildcard(host: string, entries: readonly string[]): boolean {
  return entries.some((entry) => entry.startsWith('*.') && host.endsWith(entry.slice(1)) && host.length > entry.length - 1);
}

/** Why the host may not be reached, as a sentence naming the host and what to set, or undefined when it may. */
function hostProblem(host: string, allowedHosts: readonly string[]): string | undefined {
  if (allowedHosts.length === 0) {
    return `reaches ${host}, and ${ALLOWED_HOSTS_VARIABLE} is not set, so no remote re-trigger host is allowed: set ${ALLOWED_HOSTS_VARIABLE}=${host} (comma-separated; *.example.com covers the names under it) where the catalog is applied and on every worker`;
  }
  const named = allowedHosts.includes(host);
  const special = isIP(host) !== 0 ? specialKindOf(host) : specialNameKind(host);
  if (special && !named) {
    return `reaches ${host}, ${KIND_WORDS[special]}, which a re-trigger reaches only when ${ALLOWED_HOSTS_VARIABLE} names it exactly (a wildcard does not)`;
  }
  if (named || (isIP(host) === 0 && coveredByWildcard(host, allowedHosts))) return undefined;
  return `reaches ${host}, which ${ALLOWED_HOSTS_VARIABLE} does not allow (it allows ${allowedHosts.join(', ')}): add ${host} to it where the catalog is applied and on every worker, or correct the URL`;
}

/** The URL's problem under the policy (its shape, then its host), or undefined when the catalog may hold it. */
export function urlProblem(text: string, allowedHosts: readonly string[]): string | undefined {
  const shape = urlShapeProblem(text);
  if (shape) return shape;
  return hostProblem(hostOf(new URL(text)), allowedHosts);
}

// ---- at call time ---------------------------------------------------------------------------------------------

/** A call as a sentence names it, around its URL already quoted: (url) => `webhook ${url} for settlement_report`. */
export type NameOfCall = (quotedUrl: string) => string;

/** A URL that passed every check, with the addresses its host resolved to when it did: the ones to connect to. */
export interface CheckedUrl {
  url: URL;
  addresses: ResolvedAddress[];
}

/**
 * Checks the URL as it is about to be called (after its placeholders are filled): its shape, its host, and every
 * address the host resolves to now. Refusals are not retryable (a retry would meet the same policy); a host that
 * does not resolve is, since DNS may be briefly away. `what` names the call around its URL, quoted redacted.
 */
export async function checkUrlForCall(text: string, policy: UrlPolicy, what: NameOfCall): Promise<CheckedUrl> {
  const named = what(quoteOutside(text));
  const refuse = (problem: string) => new BackfillError(ErrorCode.Config, `${named} was not called: it ${problem}`, { retryable: false });
  const problem = urlProblem(text, policy.allowedHosts);
  if (problem) throw refuse(problem);
  const url = new URL(text);
  return { url, addresses: await checkedAddresses(hostOf(url), policy, `${named} was not called`, refuse) };
}

/**
 * The host of a consumer's own queue (a redis:// or postgres:// connection, literal or from a RETRIGGER_SECRET_*),
 * checked as a re-trigger URL's host is, just before the queue is used. The queue's client resolves the name
 * again itself when it connects, so here the window between check and connection remains (milliseconds): what
 * this stops is a name or a secret that points at a metadata, link-local or loopback address now.
 */
export async function checkQueueHost(connection: string, policy: UrlPolicy, what: NameOfCall): Promise<void> {
  const named = what(quoteOutside(connection));
  const refuse = (problem: string) => new BackfillError(ErrorCode.Config, `${named} was not used: it ${problem}`, { retryable: false });
  let host: string;
  try {
    host = hostOf(new URL(connection));
  } catch {
    throw refuse('is not a redis:// or postgres:// URL');
  }
  const problem = hostProblem(host, policy.allowedHosts);
  if (problem) throw refuse(problem);
  await checkedAddresses(host, policy, `${named} was not used`, refuse);
}

/** The addresses to connect to: an IP literal as it is, a name's every address now, none of them special unless named. */
async function checkedAddresses(host: string, policy: UrlPolicy, notDone: string, refuse: (problem: string) => BackfillError): Promise<ResolvedAddress[]> {
  if (isIP(host) !== 0) return [{ address: host, family: isIP(host) === 6 ? 6 : 4 }];
  let addresses: ResolvedAddress[];
  try {
    addresses = await policy.resolve(host);
  } catch (error) {
    throw new BackfillError(ErrorCode.StepFailed, `${notDone}: ${host} did not resolve (${quoteOutside((error as Error).message, 120)})`, { cause: error, retryable: true });
  }
  if (addresses.length === 0) {
    throw new BackfillError(ErrorCode.StepFailed, `${notDone}: ${host} resolved to no address`, { retryable: true });
  }
  for (const { address } of addresses) {
    const special = specialKindOf(address);
    if (special && !policy.allowedHosts.includes(canonicalAddress(address))) {
      throw refuse(`reaches ${host}, which resolves to ${canonicalAddress(address)}, ${KIND_WORDS[special]}: a re-trigger reaches one only when ${ALLOWED_HOSTS_VARIABLE} names that address itself`);
    }
  }
  return addresses;
}

/** The host a consumer's queue connection reaches, for the catalog's check of a literal one. */
export function queueHostProblem(connection: string, allowedHosts: readonly string[]): string | undefined {
  try {
    return hostProblem(hostOf(new URL(connection)), allowedHosts);
  } catch {
    return undefined; // The schema refuses a connection that is not a URL.
  }
}
