import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Payload } from '@temporalio/common';
import { sendProblem } from '../http/problem.js';
import { bearerToken } from '../http/bearer-token.js';
import { strictJsonBodyParser } from '../http/json-body.js';
import { codecSessionTtlMs, codecSessionValid, codecSessionValue, codecTokenMatches } from './codec-token.js';
import { EncryptionCodec, PayloadDecryptionError } from './encryption-codec.js';
import type { PayloadKeyRing } from './key-ring.js';
import { payloadProtectionFromSettings, type PayloadSettings } from './payload-protection.js';

/**
 * Temporal's remote codec protocol, so the Web UI and `temporal workflow show --codec-endpoint`
 * can show encrypted payloads in clear: POST <base>/encode and <base>/decode, each taking and
 * answering `{"payloads": [...]}`, Payload messages in protobuf's JSON form (metadata values and
 * data in base64). Served by the API under /codec: it is the process that already holds the key
 * ring, listens where operators reach it and answers problem documents; a separate server would
 * be one more port and one more copy of the keys.
 */
export const codecPrefix = '/codec';

/** A history's worth of payloads per request: the UI decodes a page of events at once. */
export const codecBodyLimitBytes = 8 * 1024 * 1024;
/** Browsers may cache a preflight's answer this long. */
const preflightMaxAgeSeconds = 600;
/** The session form's body: one token field, far below any real form's size. */
const sessionFormLimitBytes = 4 * 1024;

/**
 * The cookie that carries an operator's codec session (codec-token.ts) on the Web UI's decode calls.
 * The UI cannot send the codec token itself: it sends an Authorization header only with its own
 * single sign-on access token, and only to https endpoints. It can send cookies (its codec setting
 * `includeCredentials`), so the operator presents the token once at GET /codec/session and the
 * browser carries a session from then on. HttpOnly: no page script reads it; SameSite=Strict: only
 * pages of the same site (the UI beside the API, e.g. 127.0.0.1 on another port) send it; Path:
 * only to /codec.
 */
export const codecSessionCookie = 'chargeguard_codec_session';

export interface CodecRouteOptions {
  ring: PayloadKeyRing;
  /** The bearer token callers must present (CHARGEGUARD_CODEC_TOKEN). */
  token: string;
  /** Origins (scheme://host:port) whose browsers may call the endpoint: the Web UI's. */
  corsOrigins: readonly string[];
  /** Defaults to Date.now; sessions expire against it. */
  nowMs?: () => number;
}

/** The origins of a Web UI listening on loopback at `port`: the printed 127.0.0.1 and localhost. */
export function loopbackUiOrigins(port: number): string[] {
  return [`http://127.0.0.1:${port}`, `http://localhost:${port}`];
}

/**
 * Where a browser on this machine calls the codec endpoint of an API listening on host:port: an API
 * listening on every address (0.0.0.0, ::) is reached on loopback.
 */
export function codecEndpointUrl(host: string, port: number): string {
  const reachable = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${reachable.includes(':') ? `[${reachable}]` : reachable}:${port}${codecPrefix}`;
}

/** CHARGEGUARD_CODEC_CORS_ORIGINS with `origins` added (a UI the stack started), each once. */
export function withCodecCorsOrigins(configured: string, origins: readonly string[]): string {
  const listed = configured.split(',').map((origin) => origin.trim()).filter((origin) => origin !== '');
  return [...new Set([...listed, ...origins])].join(',');
}

/** A cookie's value from a Cookie header, or null. */
function cookieValue(header: string | undefined, name: string): string | null {
  for (const part of (header ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return null;
}

const sessionPage = (body: string): string =>
  `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>chargeguard codec session</title></head><body>${body}</body></html>`;

const sessionForm = sessionPage(
  '<h1>Decode payloads in the Temporal Web UI</h1>' +
    '<p>Enter the codec token (CHARGEGUARD_CODEC_TOKEN). This browser then carries a session cookie on the Web UI\'s decode calls; the token itself is not stored.</p>' +
    '<form method="post" action="session"><label>Codec token <input name="token" type="password" autocomplete="off" required></label> <button type="submit">Start session</button></form>',
);

interface JsonPayload {
  metadata?: Record<string, string>;
  data?: string;
}

/** Proto3 JSON writes bytes as base64 and accepts the URL-safe alphabet, padded or not. */
const base64Pattern = /^[A-Za-z0-9+/_-]*={0,2}$/;

class CodecRequestError extends Error {
  constructor(readonly errors: { field: string; message: string }[]) {
    super(errors.map((e) => `${e.field} ${e.message}`).join('; '));
  }
}

function bytesOf(value: unknown, field: string, errors: { field: string; message: string }[]): Uint8Array | undefined {
  if (typeof value !== 'string' || !base64Pattern.test(value)) {
    errors.push({ field, message: 'is not base64' });
    return undefined;
  }
  return Buffer.from(value, 'base64');
}

/** The request's payloads, or every field that is wrong with it. */
function payloadsOf(body: unknown): Payload[] {
  if (typeof body !== 'object' || body === null || !Array.isArray((body as { payloads?: unknown }).payloads)) {
    throw new CodecRequestError([{ field: 'payloads', message: 'must be an array of payloads' }]);
  }
  const errors: { field: string; message: string }[] = [];
  const payloads = ((body as { payloads: unknown[] }).payloads).map((raw, index): Payload => {
    const at = `payloads[${index}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      errors.push({ field: at, message: 'must be an object with metadata and data' });
      return {};
    }
    const { metadata, data } = raw as { metadata?: unknown; data?: unknown };
    const payload: Payload = { metadata: {} };
    if (metadata !== undefined && metadata !== null) {
      if (typeof metadata !== 'object' || Array.isArray(metadata)) {
        errors.push({ field: `${at}.metadata`, message: 'must be an object of base64 values' });
      } else {
        for (const [name, value] of Object.entries(metadata)) {
          const bytes = bytesOf(value, `${at}.metadata.${name}`, errors);
          if (bytes) payload.metadata![name] = bytes;
        }
      }
    }
    if (data !== undefined && data !== null) payload.data = bytesOf(data, `${at}.data`, errors);
    return payload;
  });
  if (errors.length > 0) throw new CodecRequestError(errors);
  return payloads;
}

function toJson(payload: Payload): JsonPayload {
  const base64 = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');
  const metadata = Object.fromEntries(Object.entries(payload.metadata ?? {}).flatMap(([name, value]) => (value ? [[name, base64(value)]] : [])));
  return { metadata, ...(payload.data ? { data: base64(payload.data) } : {}) };
}

function refuse(reply: FastifyReply, status: number, type: string, title: string, detail: string, extra: object = {}, headers: Record<string, string> = {}) {
  return sendProblem(reply, { body: { type, title, status, detail, instance: reply.request.url, ...extra }, headers });
}

export async function registerCodecRoutes(app: FastifyInstance, options: CodecRouteOptions): Promise<void> {
  // The UI sends every payload of a history, plaintext ones too (older histories): shown as they are.
  const codec = new EncryptionCodec(options.ring, { onUndecodable: 'throw', plaintext: 'accept' });
  const allowedOrigins = new Set(options.corsOrigins);
  const nowMs = options.nowMs ?? Date.now;

  await app.register(
    async (scope) => {
      // Bodies far larger than the API's own limit, read here by the same strict decoder as every
      // other JSON body (src/http/json-body.ts).
      scope.removeContentTypeParser('application/json');
      scope.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: codecBodyLimitBytes }, strictJsonBodyParser);

      // CORS for the Web UI: only listed origins get the headers a browser needs to read the answer.
      scope.addHook('onRequest', async (request, reply) => {
        const origin = request.headers.origin;
        reply.header('vary', 'Origin');
        if (origin !== undefined && allowedOrigins.has(origin)) {
          reply.header('access-control-allow-origin', origin);
          reply.header('access-control-allow-credentials', 'true');
        }
      });

      const preflight = async (request: FastifyRequest, reply: FastifyReply) => {
        const origin = request.headers.origin;
        if (origin === undefined || !allowedOrigins.has(origin)) {
          return refuse(reply, 403, 'origin_not_allowed', 'Origin not allowed', `origin ${origin ?? '(none)'} may not call the codec endpoint; allowed: ${[...allowedOrigins].join(', ') || 'none'} (CHARGEGUARD_CODEC_CORS_ORIGINS)`);
        }
        return reply
          .code(204)
          .header('access-control-allow-methods', 'POST, OPTIONS')
          .header('access-control-allow-headers', 'Authorization, Content-Type, X-Namespace')
          .header('access-control-max-age', String(preflightMaxAgeSeconds))
          .send();
      };

      // Checked before the body is read: a caller without the token costs no parsing. The session
      // cookie is the token presented earlier (GET /codec/session), for the Web UI.
      const authenticate = async (request: FastifyRequest, reply: FastifyReply) => {
        if (codecTokenMatches(options.token, bearerToken(request.headers.authorization))) return;
        if (codecSessionValid(options.token, cookieValue(request.headers.cookie, codecSessionCookie), nowMs())) return;
        return refuse(
          reply,
          401,
          'unauthorized',
          'Unauthenticated',
          `the codec endpoint needs Authorization: Bearer <CHARGEGUARD_CODEC_TOKEN>, or a session cookie from ${codecPrefix}/session (the Web UI's, with its codec setting includeCredentials)`,
          {},
          { 'www-authenticate': 'Bearer realm="chargeguard-codec"' },
        );
      };

      // The session form: the only HTML this API serves, so it gets a policy that allows nothing
      // but its own form post.
      const htmlHeaders = (reply: FastifyReply): FastifyReply =>
        reply
          .type('text/html; charset=utf-8')
          .header('cache-control', 'no-store')
          .header('content-security-policy', "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
          .header('x-content-type-options', 'nosniff');
      scope.get('/session', { schema: { hide: true } }, async (_request, reply) => htmlHeaders(reply).code(200).send(sessionForm));
      scope.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string', bodyLimit: sessionFormLimitBytes }, (_request, body, done) =>
        done(null, new URLSearchParams(body as string)),
      );
      scope.post('/session', { bodyLimit: sessionFormLimitBytes, schema: { hide: true } }, async (request, reply) => {
        const form = request.body instanceof URLSearchParams ? request.body : null;
        const presented = form?.get('token') ?? null;
        if (presented === null) {
          return refuse(reply, 400, 'validation_error', 'Invalid request', 'token is required: a form (application/x-www-form-urlencoded) with the codec token', {
            errors: [{ field: 'token', message: 'is required' }],
          });
        }
        if (!codecTokenMatches(options.token, presented.trim())) {
          return refuse(reply, 401, 'unauthorized', 'Unauthenticated', 'token is not the codec token (CHARGEGUARD_CODEC_TOKEN)');
        }
        const session = codecSessionValue(options.token, nowMs());
        const secure = request.protocol === 'https' ? '; Secure' : '';
        return htmlHeaders(reply)
          .code(200)
          .header(
            'set-cookie',
            `${codecSessionCookie}=${session.value}; Path=${codecPrefix}; Max-Age=${Math.floor(codecSessionTtlMs / 1000)}; HttpOnly; SameSite=Strict${secure}`,
          )
          .send(
            sessionPage(
              `<h1>Codec session started</h1><p id="codec-session-expires">This browser's Web UI decodes payloads until ${new Date(session.expiresAtMs).toISOString()}. Go back to the Web UI and reload the page.</p>`,
            ),
          );
      });

      const handle = (operation: 'encode' | 'decode') => async (request: FastifyRequest, reply: FastifyReply) => {
        let payloads: Payload[];
        try {
          payloads = payloadsOf(request.body);
        } catch (error) {
          if (!(error instanceof CodecRequestError)) throw error;
          return refuse(reply, 400, 'validation_error', 'Invalid request', error.message, { errors: error.errors });
        }
        try {
          const result = operation === 'encode' ? await codec.encode(payloads) : await codec.decode(payloads);
          return reply.code(200).type('application/json').send({ payloads: result.map(toJson) });
        } catch (error) {
          // The protocol's answer to a payload that cannot be decoded: 400, naming why.
          if (!(error instanceof PayloadDecryptionError)) throw error;
          return refuse(reply, 400, 'payload_not_decodable', 'Payload not decodable', error.message);
        }
      };

      for (const operation of ['encode', 'decode'] as const) {
        scope.options(`/${operation}`, preflight);
        scope.post(`/${operation}`, { onRequest: authenticate, bodyLimit: codecBodyLimitBytes, schema: { hide: true } }, handle(operation));
      }
    },
    { prefix: codecPrefix },
  );
}

/**
 * Serves the endpoint when the configuration has both keys (CHARGEGUARD_PAYLOAD_KEYS or its file)
 * and a codec token; otherwise /codec is a 404.
 */
export async function registerCodecRoutesFromConfig(
  app: FastifyInstance,
  config: PayloadSettings & { CHARGEGUARD_CODEC_TOKEN?: string | undefined; CHARGEGUARD_CODEC_CORS_ORIGINS: string },
): Promise<void> {
  if (config.CHARGEGUARD_CODEC_TOKEN === undefined) return;
  const { ring } = payloadProtectionFromSettings(config);
  if (ring === null) return;
  const corsOrigins = config.CHARGEGUARD_CODEC_CORS_ORIGINS.split(',').map((origin) => origin.trim()).filter((origin) => origin !== '');
  await registerCodecRoutes(app, { ring, token: config.CHARGEGUARD_CODEC_TOKEN, corsOrigins });
}
