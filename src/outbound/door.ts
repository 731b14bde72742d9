import { lookup as dnsLookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { addressRefusal, type AddressPolicy } from './address-rules.js';
import type { DoorConnections } from './door-connections.js';

/**
 * The outbound door (docs/webhook-endpoints.md): every request the service makes to a URL a tenant
 * chose goes through here. https only unless the operator allows http; no credentials in the URL;
 * every address the host resolves to is checked (address-rules.ts) and the connection goes to the
 * address that was checked (the lookup hands the socket that very address, so a second DNS answer
 * cannot slip in between: no rebinding gap); no redirect is followed (a 3xx is a failed attempt);
 * connect time, response time and response bytes are bounded. Nothing here logs a header.
 */
export interface DoorSettings extends AddressPolicy {
  /** Allow `http:` URLs (development, tests); https only otherwise. */
  allowHttp: boolean;
  /** From the start of the request to the connection (and TLS) being up, milliseconds. */
  connectTimeoutMs: number;
  /** From the connection to the whole response (status, headers, body up to the byte bound), milliseconds. */
  responseTimeoutMs: number;
  /** Response body bytes read at most; the rest is not read (the status still counts). */
  responseMaxBytes: number;
  /** Host name resolution (tests may substitute one); default the system resolver, every address. */
  resolve?: (host: string) => Promise<Array<{ address: string; family: number }>>;
}

/** A URL longest allowed, in characters. */
export const webhookUrlMaxLength = 2048;

export class DoorRefusal extends Error {}

/** Null when the URL's form is acceptable; else what is wrong with it, in words (for a 400 naming `url`). */
export function urlFormProblem(url: string, settings: Pick<DoorSettings, 'allowHttp'>): string | null {
  const form = parsedUrl(url, settings);
  return form instanceof URL ? null : form;
}

/** The URL parsed, when its form is acceptable; else what is wrong with it, in words. */
function parsedUrl(url: string, settings: Pick<DoorSettings, 'allowHttp'>): URL | string {
  if (url.length > webhookUrlMaxLength) return `is longer than ${webhookUrlMaxLength} characters`;
  if (!/^[\x21-\x7e]+$/.test(url)) return 'must be an absolute URL of visible ASCII characters (percent-encode the rest)';
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'is not an absolute URL';
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return 'must be an https URL';
  if (parsed.protocol === 'http:' && !settings.allowHttp) return 'must be an https URL (http is not allowed by this server)';
  if (parsed.username !== '' || parsed.password !== '') return 'must not carry credentials (user:password@): the signature authenticates deliveries';
  if (parsed.hostname === '') return 'has no host';
  if (parsed.hash !== '') return 'must not have a fragment (#…)';
  return parsed;
}

/** The host of a URL as a resolver or an address check takes it (IPv6 literals without brackets). */
function bareHost(parsed: URL): string {
  return parsed.hostname.replace(/^\[(.*)\]$/, '$1');
}

const systemResolve = async (host: string) => dnsLookup(host, { all: true, verbatim: true });

/**
 * The address a delivery to this URL connects to, after checking every address its host resolves
 * to (one refused address refuses the URL: a host answering both a public and a private address
 * would otherwise be a coin toss). Throws DoorRefusal saying why.
 */
export async function checkedAddress(url: string, settings: DoorSettings): Promise<{ address: string; family: number }> {
  return (await checkedTarget(url, settings)).target;
}

/** checkedAddress, with the URL as parsed for the check (a delivery needs both). */
async function checkedTarget(url: string, settings: DoorSettings): Promise<{ parsed: URL; target: { address: string; family: number } }> {
  const parsed = parsedUrl(url, settings);
  if (!(parsed instanceof URL)) throw new DoorRefusal(`url ${parsed}`);
  const target = await checkedHostAddress(bareHost(parsed), settings);
  return { parsed, target };
}

async function checkedHostAddress(host: string, settings: DoorSettings): Promise<{ address: string; family: number }> {
  const family = isIP(host);
  if (family !== 0) {
    const refusal = addressRefusal(host, settings);
    if (refusal !== null) throw new DoorRefusal(refusal);
    return { address: host, family };
  }
  let addresses: Array<{ address: string; family: number }>;
  try {
    addresses = await withTimeout((settings.resolve ?? systemResolve)(host), settings.connectTimeoutMs, `resolving ${host} took longer than ${settings.connectTimeoutMs} ms`);
  } catch (error) {
    if (error instanceof DoorRefusal) throw error;
    throw new DoorRefusal(`${host} does not resolve (${(error as { code?: string }).code ?? (error as Error).message})`);
  }
  if (addresses.length === 0) throw new DoorRefusal(`${host} resolves to no address`);
  for (const { address } of addresses) {
    const refusal = addressRefusal(address, settings);
    if (refusal !== null) throw new DoorRefusal(`${host} resolves to ${refusal}`);
  }
  return addresses[0]!;
}

async function withTimeout<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new DoorRefusal(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export interface DoorResponse {
  /** The response's status, or null when none came (refused address, connect failure, timeout). */
  statusCode: number | null;
  /** Why there is no usable response, or what else went wrong (body too large); null when nothing did. */
  error: string | null;
  durationMs: number;
  /** Body bytes read (at most responseMaxBytes). */
  bodyBytes: number;
}

/**
 * POSTs `body` to `url` through the door. Never throws: a refusal or failure is an answer without a
 * status. With `connections`, the request may go on a kept-alive connection to the address just
 * checked (door-connections.ts); without, on a connection of its own.
 */
export async function postThroughDoor(url: string, headers: Record<string, string>, body: string, settings: DoorSettings, connections?: DoorConnections): Promise<DoorResponse> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  let parsed: URL;
  let target: { address: string; family: number };
  try {
    ({ parsed, target } = await checkedTarget(url, settings));
  } catch (error) {
    return { statusCode: null, error: (error as Error).message, durationMs: elapsed(), bodyBytes: 0 };
  }
  const protocol = parsed.protocol === 'https:' ? 'https:' : 'http:';
  const agent = connections?.agentFor(protocol, parsed.origin, target.address) ?? false;
  const first = await sendOnce(parsed, target, headers, body, settings, agent, settings.responseTimeoutMs);
  // A kept-alive connection the receiver closed while it sat idle fails before any answer: that is
  // the pool's doing, not the receiver's, so the request goes once more, on a new connection, within
  // what is left of the attempt's time (connect + response timeouts, which the lease outlasts).
  const left = settings.responseTimeoutMs - first.durationMs;
  if (first.staleSocket && left > 0) {
    const second = await sendOnce(parsed, target, headers, body, settings, agent, left);
    return { statusCode: second.statusCode, error: second.error, durationMs: elapsed(), bodyBytes: second.bodyBytes };
  }
  return { statusCode: first.statusCode, error: first.error, durationMs: elapsed(), bodyBytes: first.bodyBytes };
}

/** One request on one connection; `staleSocket` when it failed on a reused connection before any response. */
function sendOnce(
  parsed: URL,
  target: { address: string; family: number },
  headers: Record<string, string>,
  body: string,
  settings: DoorSettings,
  agent: http.Agent | false,
  responseTimeoutMs: number,
): Promise<DoorResponse & { staleSocket: boolean }> {
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  // The socket connects to the checked address: the lookup answers it whatever the host's name.
  const pinned: LookupFunction = (_hostname, options, callback) => {
    if ((options as { all?: boolean }).all) (callback as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [target]);
    else callback(null, target.address, target.family);
  };
  const transport = parsed.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    let settled = false;
    let bodyBytes = 0;
    let answered = false;
    const finish = (statusCode: number | null, error: string | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(connectTimer);
      clearTimeout(responseTimer);
      resolve({ statusCode, error, durationMs: elapsed(), bodyBytes, staleSocket: error !== null && !answered && request.reusedSocket && !timedOut });
    };
    let timedOut = false;
    const request = transport.request(
      {
        protocol: parsed.protocol,
        hostname: bareHost(parsed),
        port: parsed.port === '' ? undefined : Number(parsed.port),
        path: `${parsed.pathname}${parsed.search}`,
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        lookup: pinned,
        // false: a connection of its own. An agent: a pool whose sockets all went to this checked address.
        agent,
      },
      (response) => {
        answered = true;
        const statusCode = response.statusCode ?? null;
        response.on('data', (chunk: Buffer) => {
          bodyBytes += chunk.length;
          if (bodyBytes > settings.responseMaxBytes) {
            bodyBytes = settings.responseMaxBytes;
            response.destroy();
            finish(statusCode, `response body longer than ${settings.responseMaxBytes} bytes: the rest was not read`);
          }
        });
        response.on('end', () => finish(statusCode, null));
        response.on('error', (error) => finish(statusCode, `reading the response failed: ${error.message}`));
        response.on('close', () => finish(statusCode, null));
      },
    );
    let responseTimer: NodeJS.Timeout | undefined;
    const startResponseTimer = () => {
      clearTimeout(connectTimer);
      responseTimer = setTimeout(() => {
        timedOut = true;
        request.destroy(new Error(`no complete response within ${responseTimeoutMs} ms`));
      }, responseTimeoutMs);
    };
    const connectTimer = setTimeout(() => {
      timedOut = true;
      request.destroy(new Error(`no connection within ${settings.connectTimeoutMs} ms`));
    }, settings.connectTimeoutMs);
    request.on('socket', (socket) => {
      // A pooled socket is connected already: its response time starts now.
      if (request.reusedSocket) startResponseTimer();
      else socket.once(parsed.protocol === 'https:' ? 'secureConnect' : 'connect', startResponseTimer);
    });
    request.on('error', (error) => finish(null, error.message));
    request.end(body);
  });
}
