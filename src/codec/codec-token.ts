import { createHmac, timingSafeEqual } from 'node:crypto';
import { secretTokenMatches } from '../support/secret-token.js';

/**
 * The codec endpoint decrypts every tenant's payloads, so it answers only the operator's token
 * (CHARGEGUARD_CODEC_TOKEN), not a tenant's API key: a tenant admin must not read another tenant's
 * charges out of Temporal. At least this long, so it cannot be guessed (openssl rand -base64 32 gives 44).
 */
export const codecTokenMinLength = 32;

/** Constant-time comparison: digests have the same length whatever was sent. */
export const codecTokenMatches = secretTokenMatches;

/**
 * How long a browser's codec session lasts: a working day, after which the operator enters the
 * token again. The session is the Web UI's way to present the token (see codecSessionValue).
 */
export const codecSessionTtlMs = 12 * 60 * 60 * 1000;

/** What the session's MAC covers besides its expiry: a value minted for anything else never passes. */
const sessionPurpose = 'chargeguard codec session v1';

function sessionMac(token: string, expiresAtMs: number): Buffer {
  return createHmac('sha256', token).update(`${sessionPurpose}\n${expiresAtMs}`, 'utf8').digest();
}

/**
 * The value of the codec session cookie, for an operator who presented the token: `<expiry ms>.<MAC>`,
 * the MAC keyed with the token itself. So the server keeps no session store, the browser never
 * holds the token, a session ends at its expiry, and changing the token ends every session.
 */
export function codecSessionValue(token: string, nowMs: number, ttlMs: number = codecSessionTtlMs): { value: string; expiresAtMs: number } {
  const expiresAtMs = nowMs + ttlMs;
  return { value: `${expiresAtMs}.${sessionMac(token, expiresAtMs).toString('base64url')}`, expiresAtMs };
}

/** Whether a presented session cookie was minted with this token and has not expired; constant time in the MAC. */
export function codecSessionValid(token: string, presented: string | null, nowMs: number): boolean {
  if (presented === null) return false;
  const match = /^(\d{1,16})\.([A-Za-z0-9_-]{43})$/.exec(presented);
  if (match === null) return false;
  const expiresAtMs = Number(match[1]);
  // Compared as text, not as decoded bytes: the last of 43 base64 characters carries two unused
  // bits, so decoding would accept four spellings of one MAC.
  const presentedMac = Buffer.from(match[2]!, 'utf8');
  const expectedMac = Buffer.from(sessionMac(token, expiresAtMs).toString('base64url'), 'utf8');
  return timingSafeEqual(presentedMac, expectedMac) && nowMs < expiresAtMs;
}
