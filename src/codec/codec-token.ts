import { secretTokenMatches } from '../support/secret-token.js';

/**
 * The codec endpoint decrypts every tenant's payloads, so it answers only the operator's token
 * (CHARGEGUARD_CODEC_TOKEN), not a tenant's API key: a tenant admin must not read another tenant's
 * charges out of Temporal. At least this long, so it cannot be guessed (openssl rand -base64 32 gives 44).
 */
export const codecTokenMinLength = 32;

/** Constant-time comparison: digests have the same length whatever was sent. */
export const codecTokenMatches = secretTokenMatches;
