import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { httpbis } from 'http-message-signatures';
import { isInnerList, parseDictionary, serializeInnerList, serializeItem, type Dictionary, type InnerList, type Item } from 'structured-headers';
import { consumeSignatureNonce } from '../ledger/signature-nonces.js';
import type { LedgerPool } from '../ledger/pool.js';
import { UnauthorizedError } from '../domain/errors.js';

/**
 * Signed requests: RFC 9421 HTTP Message Signatures with hmac-sha256, for API keys created with
 * `--require-signature`. The bearer key still names the key; the signature proves the caller also
 * holds the key's signing secret, and binds method, URL, body (through its RFC 9530
 * Content-Digest) and Idempotency-Key, so a captured request cannot be altered or replayed.
 *
 * The signature base (RFC 9421 §2.5) is built by the `http-message-signatures` library and the
 * structured fields (RFC 8941) are parsed by `structured-headers`; what this module decides is the
 * policy: which components must be covered, the algorithm, the clock skew, the nonce.
 */

export const signatureLimits = {
  /** How far a signature's `created` may be from the verifier's clock, either way, in seconds. */
  signatureMaxSkewSeconds: 300,
  /**
   * How much longer than the skew window a used nonce is remembered, in seconds: API instances'
   * clocks differ a little, and a row must outlive every instance's window, not only its own.
   */
  signatureNonceRetentionMarginSeconds: 60,
  /** A nonce is 1 to this many visible ASCII characters. */
  signatureNonceMaxLength: 128,
} as const;

/** The only algorithm accepted (RFC 9421 §3.3.3). */
export const signatureAlgorithm = 'hmac-sha256';

/** Signing secrets start with this, so a leaked one is recognisable; the rest is 256 random bits. */
export const signingSecretPrefix = 'cgsig_';
const signingSecretBytes = 32;

export function newSigningSecret(): string {
  return signingSecretPrefix + randomBytes(signingSecretBytes).toString('base64url');
}

/**
 * The HMAC key is the secret's UTF-8 text as printed (prefix included), not its decoded bytes: a
 * shell can sign with `openssl dgst -sha256 -hmac "$SECRET"` without any decoding step.
 */
function macOf(secret: string, signatureBase: string): Buffer {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(signatureBase, 'utf8').digest();
}

/** Content-Digest (RFC 9530) of a body: `sha-256=:<base64>:`. An absent body digests as empty. */
export function contentDigestOf(body: Uint8Array | string | undefined): string {
  return `sha-256=:${createHash('sha256').update(body ?? '').digest('base64')}:`;
}

/** The request as the verifier sees it. */
export interface SignedRequest {
  method: string;
  /** Scheme, authority and the request target exactly as received: what `@target-uri` covers. */
  targetUri: string;
  /** Field names in lower case (as Node delivers them). */
  headers: Record<string, string | string[] | undefined>;
  /** The body's bytes as received; undefined or empty when there is none. */
  body: Uint8Array | undefined;
}

export interface SignatureKey {
  /** The API key the bearer token named (key_…): the signature's `keyid` must be this. */
  keyId: string;
  secret: string;
}

/** A signature that verified: its nonce still has to be consumed before the request may act. */
export interface VerifiedSignature {
  label: string;
  nonce: string;
  createdSeconds: number;
  /** Until when the nonce must be remembered (the end of the skew window plus the margin). */
  nonceExpiresAt: Date;
}

/** Components every signature must cover. */
export const requiredComponents = ['@method', '@target-uri', 'content-digest'] as const;
/** Headers a signature must cover whenever the request has them: they choose which charge a request makes. */
export const idempotencyComponents = ['idempotency-key', 'idempotency-token'] as const;

const noncePattern = new RegExp(`^[\\x21-\\x7e]{1,${signatureLimits.signatureNonceMaxLength}}$`);

function refuse(reason: string): never {
  throw new UnauthorizedError(`request signature refused: ${reason}`);
}

function headerText(headers: SignedRequest['headers'], name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

function dictionaryOf(field: string, text: string): Dictionary {
  try {
    return parseDictionary(text);
  } catch (error) {
    return refuse(`${field} is not a structured-field dictionary (RFC 8941): ${(error as Error).message}`);
  }
}

/** The Signature-Input member signed with this key (by its keyid); others (a proxy's) are ignored. */
function inputFor(inputs: Dictionary, keyId: string): [string, InnerList] {
  const mine: Array<[string, InnerList]> = [];
  const others: string[] = [];
  for (const [label, member] of inputs) {
    if (!isInnerList(member)) refuse(`Signature-Input ${label} is not an inner list of covered components`);
    const keyid = member[1].get('keyid');
    if (keyid === keyId) mine.push([label, member]);
    else others.push(typeof keyid === 'string' ? `"${keyid}"` : 'none');
  }
  if (mine.length > 1) refuse(`more than one Signature-Input member has keyid "${keyId}" (${mine.map(([l]) => l).join(', ')}); send one`);
  const found = mine[0];
  if (found === undefined) {
    refuse(`no Signature-Input member has keyid "${keyId}" (this API key's id); found keyid ${others.join(', ') || 'none'}`);
  }
  return found;
}

function coveredNames(label: string, input: InnerList): string[] {
  const names: string[] = [];
  for (const [name, params] of input[0]) {
    if (typeof name !== 'string') refuse(`Signature-Input ${label} lists a component that is not a string`);
    const id = serializeItem([name, params]);
    if (names.includes(id)) refuse(`Signature-Input ${label} covers ${id} twice`);
    names.push(id);
  }
  return names;
}

/**
 * Verifies the request's signature for this key and returns it, or throws UnauthorizedError whose
 * message names what failed. Pure apart from reading the clock given: the nonce is not consumed
 * here (acceptSignedRequest does it, once everything else holds).
 */
export function verifyRequestSignature(request: SignedRequest, key: SignatureKey, nowMs: number): VerifiedSignature {
  const inputText = headerText(request.headers, 'signature-input');
  const signatureText = headerText(request.headers, 'signature');
  if (inputText === undefined && signatureText === undefined) {
    refuse('this API key requires signed requests (RFC 9421, hmac-sha256): send Signature-Input and Signature headers');
  }
  if (inputText === undefined) refuse('missing Signature-Input header');
  if (signatureText === undefined) refuse('missing Signature header');

  const [label, input] = inputFor(dictionaryOf('Signature-Input', inputText), key.keyId);
  const signatureMember = dictionaryOf('Signature', signatureText).get(label);
  if (signatureMember === undefined) refuse(`Signature has no member ${label} (Signature-Input has)`);
  if (isInnerList(signatureMember) || !(signatureMember[0] instanceof ArrayBuffer)) {
    refuse(`Signature ${label} is not a byte sequence (:base64:)`);
  }
  const presented = Buffer.from(signatureMember[0]);

  const params = input[1];
  const alg = params.get('alg');
  if (alg !== signatureAlgorithm) {
    refuse(alg === undefined ? `Signature-Input ${label} has no alg; it must be alg="${signatureAlgorithm}"` : `alg must be "${signatureAlgorithm}", not ${String(alg)}`);
  }
  const created = params.get('created');
  if (typeof created !== 'number' || !Number.isSafeInteger(created)) refuse(`Signature-Input ${label} has no created (an integer, seconds since the epoch)`);
  const nonce = params.get('nonce');
  if (typeof nonce !== 'string') refuse(`Signature-Input ${label} has no nonce (a string, single-use per key)`);
  if (!noncePattern.test(nonce)) refuse(`nonce must be 1-${signatureLimits.signatureNonceMaxLength} visible ASCII characters`);

  const maxSkew = signatureLimits.signatureMaxSkewSeconds;
  const ageSeconds = nowMs / 1000 - created;
  if (ageSeconds > maxSkew) {
    refuse(`created is ${Math.floor(ageSeconds)} s old; a signature is accepted for ${maxSkew} s (signatureMaxSkewSeconds)`);
  }
  if (-ageSeconds > maxSkew) {
    refuse(`created is ${Math.ceil(-ageSeconds)} s in the future; clocks may differ by at most ${maxSkew} s (signatureMaxSkewSeconds)`);
  }
  const expires = params.get('expires');
  if (expires !== undefined) {
    if (typeof expires !== 'number' || !Number.isSafeInteger(expires)) refuse(`Signature-Input ${label} expires must be an integer`);
    if (nowMs / 1000 > expires) refuse(`the signature expired ${Math.floor(nowMs / 1000 - expires)} s ago (its expires parameter)`);
  }

  const covered = coveredNames(label, input);
  const required: string[] = [...requiredComponents];
  // Uncovered, an Idempotency-Key (or token) could be swapped for another and the same signed charge made twice.
  for (const name of idempotencyComponents) if (headerText(request.headers, name) !== undefined) required.push(name);
  const missing = required.filter((name) => !covered.includes(`"${name}"`));
  if (missing.length > 0) {
    refuse(`the signature does not cover ${missing.join(', ')}; it must cover ${required.join(', ')}`);
  }

  const digestText = headerText(request.headers, 'content-digest');
  if (digestText === undefined) refuse('missing Content-Digest header (RFC 9530, sha-256=:<base64 of SHA-256 of the body>:)');
  const sha256 = dictionaryOf('Content-Digest', digestText).get('sha-256');
  if (sha256 === undefined || isInnerList(sha256) || !(sha256[0] instanceof ArrayBuffer)) {
    refuse('Content-Digest has no sha-256 byte sequence (sha-256=:<base64>:)');
  }
  const bodyDigest = createHash('sha256').update(request.body ?? new Uint8Array()).digest();
  if (!bodyDigest.equals(Buffer.from((sha256 as Item)[0] as ArrayBuffer))) refuse('Content-Digest sha-256 does not match the body');

  let base: string;
  try {
    base = signatureBaseOf(request, input);
  } catch (error) {
    refuse(`cannot build the signature base: ${(error as Error).message}`);
  }
  const expected = macOf(key.secret, base);
  if (presented.length !== expected.length || !timingSafeEqual(presented, expected)) {
    refuse('the signature does not match: signed with another secret, or the request changed after it was signed');
  }
  return {
    label,
    nonce,
    createdSeconds: created,
    nonceExpiresAt: new Date((created + maxSkew + signatureLimits.signatureNonceRetentionMarginSeconds) * 1000),
  };
}

/**
 * The signature base (RFC 9421 §2.5) of a request for one Signature-Input member: one line per
 * covered component, then "@signature-params" with the member re-serialized. Throws when a
 * component cannot be derived (a covered header the request lacks, an unknown derived component).
 */
export function signatureBaseOf(request: Omit<SignedRequest, 'body'>, input: InnerList): string {
  const fields = input[0].map((item) => serializeItem(item));
  const lines = httpbis.createSignatureBase({ fields }, { method: request.method, url: request.targetUri, headers: stringHeaders(request.headers) });
  lines.push(['"@signature-params"', [serializeInnerList(input)]]);
  return httpbis.formatSignatureBase(lines);
}

function stringHeaders(headers: SignedRequest['headers']): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) out[name] = value;
  return out;
}

/**
 * Verifies the signature, then consumes its nonce: only a request whose signature holds uses up a
 * nonce, and of concurrent requests with one nonce exactly one gets through.
 */
export async function acceptSignedRequest(pool: LedgerPool, request: SignedRequest, key: SignatureKey, nowMs = Date.now()): Promise<VerifiedSignature> {
  const verified = verifyRequestSignature(request, key, nowMs);
  const fresh = await consumeSignatureNonce(pool, { keyId: key.keyId, nonce: verified.nonce, expiresAt: verified.nonceExpiresAt, now: new Date(nowMs) });
  if (!fresh) refuse(`nonce "${verified.nonce}" was already used by this key; sign every request with a new nonce`);
  return verified;
}
