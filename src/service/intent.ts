import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { ChargeIntent, ChargeRequest } from '../domain/charge.js';
import type { RefundIntent } from '../domain/refund.js';
import { assertIdempotencyKey, assertTenant, parseChargeRequest, parseRefundBody } from './validation.js';

// The package is CommonJS whose typings claim an ES default export; require() sees the real shape.
const canonicalize = createRequire(import.meta.url)('canonicalize') as (input: unknown) => string | undefined;

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

function canonicalJson(value: unknown): string {
  const canonical = canonicalize(value);
  if (canonical === undefined) throw new Error('request cannot be canonicalised');
  return canonical;
}

/**
 * What a charge or refund request becomes before anything starts: validated, fingerprinted and
 * named. Everything here is a pure function of (tenant, keys, body): a retry builds the same intent.
 *
 * Request fingerprints carry their definition's version, because keys are remembered forever: a
 * key recorded under an earlier definition must still compare equal to an identical retry.
 *
 * - v1 (recorded as bare 64-hex): the charge's business fields only; a refund's `{amount}` with
 *   null for "the rest".
 * - v2 (recorded as `v2:<64-hex>`): the whole validated body, description and metadata included,
 *   as Stripe compares every parameter; absent optional fields are left out.
 *
 * Both are SHA-256 of RFC 8785 canonical JSON. New requests are fingerprinted under the current
 * version; a request compared with a recorded fingerprint is fingerprinted under that one's.
 */
export type FingerprintVersion = 1 | 2;
export const currentFingerprintVersion: FingerprintVersion = 2;

/** The version a recorded fingerprint was made under. */
export function fingerprintVersionOf(fingerprint: string): FingerprintVersion | null {
  if (/^[0-9a-f]{64}$/.test(fingerprint)) return 1;
  if (/^v2:[0-9a-f]{64}$/.test(fingerprint)) return 2;
  return null;
}

function versioned(version: FingerprintVersion, hex: string): string {
  return version === 1 ? hex : `v${version}:${hex}`;
}

/** The validated create-charge body, named as on the wire; absent optional fields left out. */
function chargeBodyOf(request: ChargeRequest): Record<string, unknown> {
  return {
    order_id: request.orderId,
    payer_account_id: request.payerAccountId,
    payee_account_id: request.payeeAccountId,
    amount: request.amountMinor,
    currency: request.currency,
    capture: request.captureMode,
    ...(request.description !== null ? { description: request.description } : {}),
    ...(request.metadata !== null ? { metadata: request.metadata } : {}),
  };
}

export function chargeFingerprint(request: ChargeRequest, version: FingerprintVersion = currentFingerprintVersion): string {
  if (version === 1) {
    return sha256Hex(
      canonicalJson({
        payer_account_id: request.payerAccountId,
        payee_account_id: request.payeeAccountId,
        amount: request.amountMinor,
        currency: request.currency,
        order_id: request.orderId,
        capture: request.captureMode,
      }),
    );
  }
  return versioned(version, sha256Hex(canonicalJson(chargeBodyOf(request))));
}

/** `amountMinor` null: the refund of all that is left (the body `{}`). */
export function refundFingerprint(amountMinor: number | null, version: FingerprintVersion = currentFingerprintVersion): string {
  if (version === 1) return sha256Hex(canonicalJson({ amount: amountMinor }));
  return versioned(version, sha256Hex(canonicalJson(amountMinor === null ? {} : { amount: amountMinor })));
}

/**
 * The fingerprint to compare with `recorded` (and to send on, so that the ledger's own comparison
 * agrees): the request's under the recorded fingerprint's version. An unrecognised recorded value
 * compares under the current version, and so never matches.
 */
export function fingerprintLike(recorded: string | undefined, fingerprintUnder: (version: FingerprintVersion) => string): string {
  const version = recorded === undefined ? null : fingerprintVersionOf(recorded);
  return fingerprintUnder(version ?? currentFingerprintVersion);
}

/** A stable public id: the same (tenant, key) always names the same charge. */
export function chargeIdFor(tenant: string, idempotencyKey: string): string {
  return `ch_${sha256Hex(`${tenant}\n${idempotencyKey}`).slice(0, 24)}`;
}

/** A stable public id for a refund, as chargeIdFor is for a charge. */
export function refundIdFor(tenant: string, chargeKey: string, refundKey: string): string {
  return `re_${sha256Hex(`${tenant}\n${chargeKey}\n${refundKey}`).slice(0, 24)}`;
}

/** Validates a charge request and builds its intent. */
export function buildChargeIntent(tenant: string, idempotencyKey: string, body: unknown, amountMinorMax: number): ChargeIntent {
  assertTenant(tenant);
  assertIdempotencyKey(idempotencyKey);
  const request = parseChargeRequest(body, amountMinorMax);
  return {
    tenant,
    idempotencyKey,
    chargeId: chargeIdFor(tenant, idempotencyKey),
    fingerprint: chargeFingerprint(request),
    request,
  };
}

/** Validates a refund request (`{}` or `{amount}`) and builds its intent. */
export function buildRefundIntent(
  tenant: string,
  chargeKey: string,
  refundKey: string,
  body: unknown,
  amountMinorMax: number,
): RefundIntent {
  assertTenant(tenant);
  assertIdempotencyKey(chargeKey, 'charge_key');
  assertIdempotencyKey(refundKey, 'idempotency_key');
  const amountMinor = parseRefundBody(body, amountMinorMax);
  return {
    tenant,
    chargeKey,
    refundKey,
    refundId: refundIdFor(tenant, chargeKey, refundKey),
    fingerprint: refundFingerprint(amountMinor),
    amountMinor,
  };
}
