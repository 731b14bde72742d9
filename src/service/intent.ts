import type { ChargeIntent } from '../domain/charge.js';
import type { RefundIntent } from '../domain/refund.js';
import {
  canonicalJson,
  chargeFingerprint,
  chargeIdFor,
  currentFingerprintVersion,
  fingerprintVersionOf,
  sha256Hex,
  versionedFingerprint as versioned,
  type FingerprintVersion,
} from '../domain/request-fingerprint.js';
import { assertIdempotencyKey, parseChargeRequest, parseRefundBody } from './validation.js';
import { assertTenant } from '../domain/identifiers.js';

/**
 * What a charge or refund request becomes before anything starts: validated, fingerprinted and
 * named. Everything here is a pure function of (tenant, keys, body): a retry builds the same intent.
 *
 * The charge's id and fingerprint (and their versions) are defined in src/domain/request-fingerprint.ts,
 * because the workflow recomputes them to refuse a start the service did not make. New requests are
 * fingerprinted under the current version; a request compared with a recorded fingerprint is
 * fingerprinted under that one's.
 */
export { chargeFingerprint, chargeIdFor, currentFingerprintVersion, fingerprintVersionOf, type FingerprintVersion };

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
