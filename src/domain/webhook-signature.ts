import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * How a provider signs a callback, and how the signature is checked. Stripe's scheme, under our
 * own header name: `Chargeguard-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` where the HMAC
 * is computed with the provider's secret over `${t}.${raw body}`, the body's bytes exactly as
 * they travel. Signing the timestamp with the body means an old signed body cannot be replayed
 * past the tolerance with a fresh `t`.
 *
 * No I/O here: the caller supplies the clock and the secrets.
 */

export const webhookSignatureHeader = 'Chargeguard-Signature';

/** How far `t` may be from the server's clock, either way: older is a replay, newer a skewed or forged clock. */
export const webhookToleranceSeconds = 300;

/**
 * At most this many `v1=` entries are tried: a provider sends one per secret it is rotating
 * through (two, rarely three); more is someone making the server compute HMACs for nothing.
 */
export const webhookMaxSignatures = 8;

/** A `t` with more digits than this is not a time anyone signs at (10 digits last until 2286). */
const timestampMaxDigits = 12;
const sha256HexLength = 64;

export interface ParsedSignatureHeader {
  timestampSeconds: number;
  /** The `v1=` signatures, as 32-byte digests. */
  signatures: Buffer[];
}

/** Why a header is refused, in words a provider's engineer can act on. */
export type SignatureRefusal =
  | { reason: 'missing'; message: string }
  | { reason: 'malformed'; message: string }
  | { reason: 'stale'; message: string }
  | { reason: 'future'; message: string }
  | { reason: 'mismatch'; message: string };

/**
 * Reads the header: `t` exactly once (digits), one or more `v1` (64 hex digits each); other
 * schemes (`v0=…`) are skipped, as Stripe does, so a provider can add one without breaking us.
 */
export function parseSignatureHeader(header: string | undefined): ParsedSignatureHeader | SignatureRefusal {
  if (header === undefined || header.trim() === '') {
    return { reason: 'missing', message: `no ${webhookSignatureHeader} header: sign the callback (t=<unix seconds>,v1=<hex HMAC-SHA256>)` };
  }
  const malformed = (why: string): SignatureRefusal => ({
    reason: 'malformed',
    message: `must look like "t=<unix seconds>,v1=<64 hex digits>": ${why}`,
  });
  let timestamp: number | undefined;
  const signatures: Buffer[] = [];
  for (const item of header.split(',')) {
    const separator = item.indexOf('=');
    if (separator < 0) return malformed(`"${printable(item)}" is not key=value`);
    const key = item.slice(0, separator).trim();
    const value = item.slice(separator + 1).trim();
    if (key === 't') {
      if (timestamp !== undefined) return malformed('t is given twice');
      if (!new RegExp(`^[0-9]{1,${timestampMaxDigits}}$`).test(value)) return malformed('t must be whole unix seconds');
      timestamp = Number(value);
    } else if (key === 'v1') {
      if (!new RegExp(`^[0-9a-fA-F]{${sha256HexLength}}$`).test(value)) return malformed('each v1 must be 64 hex digits (HMAC-SHA256)');
      signatures.push(Buffer.from(value, 'hex'));
      if (signatures.length > webhookMaxSignatures) return malformed(`at most ${webhookMaxSignatures} v1 signatures`);
    } else if (!/^[a-z][a-z0-9]{0,15}$/.test(key)) {
      return malformed(`"${printable(key)}" is not a signature scheme name`);
    }
  }
  if (timestamp === undefined) return malformed('t is missing');
  if (signatures.length === 0) return malformed('no v1 signature');
  return { timestampSeconds: timestamp, signatures };
}

/** Enough of a bad header item to recognise it, nothing that could split a log line. */
function printable(text: string): string {
  const shown = text.replace(/[^\x20-\x7e]/g, '?');
  return shown.length > 32 ? `${shown.slice(0, 32)}…` : shown;
}

/** The hex signature a provider sends for this body at this time. */
export function signWebhookPayload(secret: string, timestampSeconds: number, rawBody: Buffer | string): string {
  return hmac(secret, timestampSeconds, typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody).toString('hex');
}

/** The whole header value for one or more secrets (a provider mid-rotation signs with each). */
export function webhookSignatureHeaderValue(secrets: string[], timestampSeconds: number, rawBody: Buffer | string): string {
  return [`t=${timestampSeconds}`, ...secrets.map((secret) => `v1=${signWebhookPayload(secret, timestampSeconds, rawBody)}`)].join(',');
}

function hmac(secret: string, timestampSeconds: number, rawBody: Buffer): Buffer {
  return createHmac('sha256', secret).update(`${timestampSeconds}.`, 'utf8').update(rawBody).digest();
}

/** Refuses a `t` outside the tolerance, before any HMAC is computed. */
export function timestampRefusal(timestampSeconds: number, nowMs: number, toleranceSeconds = webhookToleranceSeconds): SignatureRefusal | null {
  const ageSeconds = Math.floor(nowMs / 1000) - timestampSeconds;
  if (ageSeconds > toleranceSeconds) {
    return {
      reason: 'stale',
      message: `t is ${ageSeconds} s old; signatures are accepted for ${toleranceSeconds} s (webhookToleranceSeconds): sign each delivery with the current time`,
    };
  }
  if (-ageSeconds > toleranceSeconds) {
    return {
      reason: 'future',
      message: `t is ${-ageSeconds} s in the future; at most ${toleranceSeconds} s of clock skew is accepted (webhookToleranceSeconds): check the sender's clock`,
    };
  }
  return null;
}

/**
 * Which secret signed the body, or a refusal. Every `v1` is compared with every secret's HMAC in
 * constant time (crypto.timingSafeEqual), so the time taken says nothing about how close a forged
 * signature came. The same message whether no secret exists or none matched: a caller cannot learn
 * which providers are configured.
 */
export function verifyWebhookSignature<S extends { secret: string }>(
  parsed: ParsedSignatureHeader,
  rawBody: Buffer,
  secrets: readonly S[],
  nowMs: number,
  toleranceSeconds = webhookToleranceSeconds,
): { secret: S } | SignatureRefusal {
  const tooFar = timestampRefusal(parsed.timestampSeconds, nowMs, toleranceSeconds);
  if (tooFar) return tooFar;
  let found: S | undefined;
  for (const candidate of secrets) {
    const expected = hmac(candidate.secret, parsed.timestampSeconds, rawBody);
    for (const signature of parsed.signatures) {
      // Every pair is compared, even after a match, so the work does not depend on which matched.
      if (timingSafeEqual(expected, signature) && found === undefined) found = candidate;
    }
  }
  if (found !== undefined) return { secret: found };
  return {
    reason: 'mismatch',
    message: `no v1 signature matches a current secret of this provider (HMAC-SHA256 over "<t>.<raw body>", the body's bytes exactly as sent)`,
  };
}
