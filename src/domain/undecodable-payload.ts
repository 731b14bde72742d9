/**
 * What the worker's payload codec hands on in place of a payload it could not decode (plaintext
 * while keys are set, an unknown key id, a tag that does not verify). A throw would fail the
 * workflow task, which Temporal retries for ever: the execution would sit Running, holding its
 * idempotency key. The value lets workflow code end the execution visibly instead, before any
 * ledger step. Pure: the workflow bundle imports it.
 */
export const undecodablePayloadField = 'undecodablePayload';

export interface UndecodablePayload {
  /** Why, naming the key id or "plaintext refused"; never key material. */
  [undecodablePayloadField]: string;
}

export function isUndecodablePayload(value: unknown): value is UndecodablePayload {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Array.isArray(value) &&
    typeof (value as Record<string, unknown>)[undecodablePayloadField] === 'string'
  );
}
