/**
 * What names a charge and what fingerprints its request, as pure functions: the service computes
 * them when it builds an intent, and the workflow computes them again from its own input to refuse
 * a start the service did not make (workflows/verify-start.ts). One definition for both, so they
 * cannot drift apart. Deterministic and free of Node modules, because workflow code imports it:
 * SHA-256 comes from @noble/hashes (pure JavaScript, audited), not node:crypto.
 *
 * Request fingerprints carry their definition's version, because keys are remembered forever: a
 * key recorded under an earlier definition must still compare equal to an identical retry, and a
 * workflow started under an earlier definition must still pass the workflow's check.
 *
 * - v1 (recorded as bare 64-hex): the charge's business fields only; a refund's `{amount}` with
 *   null for "the rest".
 * - v2 (recorded as `v2:<64-hex>`): the whole validated body, description, metadata and
 *   return_url included, as Stripe compares every parameter; absent optional fields are left out
 *   (so a field added later, such as return_url, changes no fingerprint of a request without it).
 *
 * Both are SHA-256 of RFC 8785 canonical JSON.
 */
import { sha256 } from '@noble/hashes/sha2';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils';
import canonicalizeExport from 'canonicalize';
import type { ChargeRequest } from './charge.js';

// CommonJS: the default import is module.exports, the function itself (in Node and in the workflow
// bundle alike), although the package's typings describe an ES default export.
const canonicalize = canonicalizeExport as unknown as (input: unknown) => string | undefined;

export function sha256Hex(text: string): string {
  return bytesToHex(sha256(utf8ToBytes(text)));
}

export function canonicalJson(value: unknown): string {
  const canonical = canonicalize(value);
  if (canonical === undefined) throw new Error('request cannot be canonicalised');
  return canonical;
}

export type FingerprintVersion = 1 | 2;
export const currentFingerprintVersion: FingerprintVersion = 2;
/** Every version the service has ever produced: a check of a recorded fingerprint accepts each. */
export const fingerprintVersions: readonly FingerprintVersion[] = [1, 2];

/** The version a recorded fingerprint was made under; null for anything no version produces. */
export function fingerprintVersionOf(fingerprint: string): FingerprintVersion | null {
  if (/^[0-9a-f]{64}$/.test(fingerprint)) return 1;
  if (/^v2:[0-9a-f]{64}$/.test(fingerprint)) return 2;
  return null;
}

export function versionedFingerprint(version: FingerprintVersion, hex: string): string {
  return version === 1 ? hex : `v${version}:${hex}`;
}

/** The validated create-charge body, named as on the wire; absent optional fields left out. */
function chargeBodyOf(request: ChargeRequest): Record<string, unknown> {
  return {
    order_id: request.orderId,
    // A provider charge's payer is derived (its clearing account): the instrument is what was asked for.
    ...(request.paymentMethod
      ? { payment_method: request.paymentMethod.id, provider: request.paymentMethod.provider }
      : { payer_account_id: request.payerAccountId }),
    payee_account_id: request.payeeAccountId,
    amount: request.amountMinor,
    currency: request.currency,
    capture: request.captureMode,
    ...(request.description !== null ? { description: request.description } : {}),
    ...(request.metadata !== null ? { metadata: request.metadata } : {}),
    // Left out when absent, so every v2 fingerprint recorded before return_url existed still matches.
    ...(request.returnUrl !== undefined ? { return_url: request.returnUrl } : {}),
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
  return requestBodyFingerprint(chargeBodyOf(request));
}

/**
 * The current (v2) rule for any create's request: SHA-256 of the whole validated body's canonical
 * JSON, absent optional fields left out. A charge's v2 fingerprint is this of its body; other
 * creates keyed by an Idempotency-Key (a webhook endpoint's registration) compare their retries
 * with it, so every keyed create judges "the same request" by one rule.
 */
export function requestBodyFingerprint(body: Record<string, unknown>): string {
  return versionedFingerprint(2, sha256Hex(canonicalJson(body)));
}

/** A stable public id: the same (tenant, key) always names the same charge. */
export function chargeIdFor(tenant: string, idempotencyKey: string): string {
  return `ch_${sha256Hex(`${tenant}\n${idempotencyKey}`).slice(0, 24)}`;
}
