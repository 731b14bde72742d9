import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { ChargeRequest } from '../domain/charge.js';

// The package is CommonJS whose typings claim an ES default export; require() sees the real shape.
const canonicalize = createRequire(import.meta.url)('canonicalize') as (input: unknown) => string | undefined;

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/**
 * SHA-256 of the RFC 8785 canonical JSON of the charge's business fields, named as on the wire.
 * Description and metadata are annotations, not the intent, so they do not take part.
 */
export function chargeFingerprint(request: ChargeRequest): string {
  const canonical = canonicalize({
    payer_account_id: request.payerAccountId,
    payee_account_id: request.payeeAccountId,
    amount: request.amountMinor,
    currency: request.currency,
    order_id: request.orderId,
    capture: request.captureMode,
  });
  if (canonical === undefined) throw new Error('charge request cannot be canonicalised');
  return sha256Hex(canonical);
}

/** A stable public id: the same (tenant, key) always names the same charge. */
export function chargeIdFor(tenant: string, idempotencyKey: string): string {
  return `ch_${sha256Hex(`${tenant}\n${idempotencyKey}`).slice(0, 24)}`;
}
