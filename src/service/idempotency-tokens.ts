import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { limits } from '../domain/limits.js';
import { consumeIdempotencyToken, insertIdempotencyToken } from '../ledger/idempotency-tokens.js';
import type { LedgerPool } from '../ledger/pool.js';
import { ValidationError } from '../domain/errors.js';
import { assertIdempotencyKey, assertObjectBody, idempotencyKeyProblem, parseWith } from './validation.js';
import { assertTenant } from '../domain/identifiers.js';

/**
 * Server-issued idempotency tokens, for callers that cannot mint a good key themselves (an HTML
 * form: rendered once, submitted once or many times). The token string is itself a valid
 * idempotency key; its first use on a create turns it into that charge's key, and from then on it
 * behaves exactly as a key would (docs/idempotency-tokens.md). What a token adds over a key the
 * caller makes up: the server vouches that it was issued to this tenant, is fresh and unguessable.
 */

/** Where a token travels on a create, instead of Idempotency-Key. */
export const idempotencyTokenHeader = 'Idempotency-Token';

const tokenPrefix = 'idt_';
/** 256 random bits: nobody can guess another caller's unused token. */
const tokenSecretBytes = 32;
/** `idt_` and the base64url of the random bytes (43 characters, no padding). */
export const idempotencyTokenPattern = /^idt_[A-Za-z0-9_-]{43}$/;
export const idempotencyTokenLength = tokenPrefix.length + 43;

const ttlSecondsMin = limits.idempotencyTokenTtlMinMs / 1000;
const ttlSecondsMax = limits.idempotencyTokenTtlMs / 1000;

/** The issue request body: nothing, or a shorter lifetime than the default. */
export const issueTokenBodySchema = z
  .object({
    ttl_seconds: z
      .number({
        error: (issue) =>
          issue.input === null ? 'must be a whole number of seconds, or left out: null is not a value' : 'must be a whole number of seconds',
      })
      .int('must be a whole number of seconds')
      .min(ttlSecondsMin, `must be at least ${ttlSecondsMin}`)
      .max(ttlSecondsMax, `must be at most ${ttlSecondsMax} (the default)`)
      .optional()
      .describe(`how long the token may wait for its first use, in seconds; ${ttlSecondsMax} unless given`),
  })
  .strict();

export const wireIdempotencyTokenSchema = z.object({
  object: z.literal('idempotency_token'),
  token: z.string().describe('send it as the Idempotency-Token header of one create; it then is that charge\'s idempotency key'),
  expires_at: z.string().describe('RFC 3339 timestamp (UTC): unused after it, the token is refused; once used it never expires'),
});
export type WireIdempotencyToken = z.infer<typeof wireIdempotencyTokenSchema>;

function hashToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}


/** Issues and redeems tokens for one ledger; every surface goes through this. */
export class IdempotencyTokens {
  constructor(private readonly ledger: LedgerPool) {}

  /**
   * A new token for the tenant, good for its first use until it expires. `body` as it arrived
   * (none, `{}`, or `{ttl_seconds}`); `issuedByKeyId` is kept for audit (null: the operator).
   */
  async issue(tenant: string, issuedByKeyId: string | null, body: unknown): Promise<WireIdempotencyToken> {
    assertTenant(tenant);
    const request = body === undefined ? {} : parseWith(issueTokenBodySchema, assertObjectBody(body));
    const ttlMs = request.ttl_seconds === undefined ? limits.idempotencyTokenTtlMs : request.ttl_seconds * 1000;
    const token = tokenPrefix + randomBytes(tokenSecretBytes).toString('base64url');
    // A token is a key: it must pass the key rules wherever it later travels (paths, MCP, CLI).
    assertIdempotencyKey(token);
    const { expiresAt } = await insertIdempotencyToken(this.ledger, {
      tenant,
      tokenHash: hashToken(token),
      issuedByKeyId,
      ttlMs,
      purgeBatch: limits.idempotencyTokenPurgeBatch,
    });
    return { object: 'idempotency_token', token, expires_at: expiresAt };
  }

  /**
   * Checks the form of a token as it arrived, before anything is read: a refusal names the
   * Idempotency-Token header (or `field`, for a surface that spells it otherwise).
   */
  assertWellFormed(token: unknown, field = idempotencyTokenHeader): string {
    if (typeof token !== 'string' || token.length === 0) {
      throw new ValidationError([{ field, message: 'is required: a token from POST /v1/idempotency-tokens' }]);
    }
    if (idempotencyKeyProblem(token) !== null || !idempotencyTokenPattern.test(token)) {
      throw new ValidationError([{ field, message: 'is not a token this API issues: ask POST /v1/idempotency-tokens for one' }]);
    }
    return token;
  }

  /**
   * The idempotency key the token stands for (the token itself), marking it used on its first
   * call. Refused, naming the header, when the tenant was never issued it (another tenant's token
   * included: the two cannot be told apart, on purpose) or it expired before anyone used it;
   * nothing is recorded then. Once used it works forever, as its charge's key does: a first use
   * whose charge never started (Temporal unreachable) can be retried with the same token.
   */
  async redeem(tenant: string, token: string, field = idempotencyTokenHeader): Promise<string> {
    assertTenant(tenant);
    this.assertWellFormed(token, field);
    const consumed = await consumeIdempotencyToken(this.ledger, tenant, hashToken(token));
    if (consumed === null) {
      throw new ValidationError([
        { field, message: 'is unknown to this tenant, or expired before it was used: ask POST /v1/idempotency-tokens for a new one' },
      ]);
    }
    return token;
  }
}
