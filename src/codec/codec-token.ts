import { createHash, timingSafeEqual } from 'node:crypto';

/**
 * The codec endpoint decrypts every tenant's payloads, so it answers only the operator's token
 * (CHARGEGUARD_CODEC_TOKEN), not a tenant's API key: a tenant admin must not read another tenant's
 * charges out of Temporal. At least this long, so it cannot be guessed (openssl rand -base64 32 gives 44).
 */
export const codecTokenMinLength = 32;

const digest = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

/** Constant-time comparison: digests have the same length whatever was sent. */
export function codecTokenMatches(expected: string, presented: string | null): boolean {
  if (presented === null) return false;
  return timingSafeEqual(digest(expected), digest(presented));
}
