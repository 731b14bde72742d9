/**
 * Stripe's idempotency layer as its docs describe it: the first request under a key saves its
 * answer (successes and errors alike, once the endpoint began executing); a replay with the same
 * parameters gets that answer back; other parameters under the same key are refused; a key still in
 * flight answers 409; keys are pruned after the retention window.
 */
import type { ApiAnswer } from './payments.js';
import { stripeError } from './payments.js';

interface KeyRecord {
  /** Method and path: a key names one request, on one endpoint. */
  endpoint: string;
  fingerprint: string;
  createdMs: number;
  answer: ApiAnswer | null;
  requestId: string;
}

export type KeyCheck =
  | { kind: 'new' }
  | { kind: 'replay'; answer: ApiAnswer; requestId: string }
  | { kind: 'refused'; answer: ApiAnswer };

/** Stripe's longest accepted idempotency key, in characters. */
export const maxIdempotencyKeyLength = 255;

export class IdempotencyKeys {
  private readonly records = new Map<string, KeyRecord>();

  constructor(
    private readonly nowMs: () => number,
    readonly retentionMs: number,
  ) {}

  get size(): number {
    this.prune();
    return this.records.size;
  }

  /** Reserves the key for this request, or says what to answer instead. */
  begin(key: string, endpoint: string, fingerprint: string, requestId: string): KeyCheck {
    this.prune();
    if (key.length > maxIdempotencyKeyLength) {
      return {
        kind: 'refused',
        answer: stripeError(400, {
          type: 'invalid_request_error',
          message: `Invalid idempotency key: must be at most ${maxIdempotencyKeyLength} characters long.`,
        }),
      };
    }
    const record = this.records.get(key);
    if (!record) {
      this.records.set(key, { endpoint, fingerprint, createdMs: this.nowMs(), answer: null, requestId });
      return { kind: 'new' };
    }
    if (record.endpoint !== endpoint || record.fingerprint !== fingerprint) {
      return {
        kind: 'refused',
        answer: stripeError(400, {
          type: 'idempotency_error',
          message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
        }),
      };
    }
    if (record.answer === null) {
      return {
        kind: 'refused',
        answer: stripeError(409, {
          type: 'invalid_request_error',
          code: 'idempotency_key_in_use',
          message: `There is currently another in-progress request using this idempotent key (that probably means you submitted twice, and the other request is still going through): ${key}. Please try again later.`,
        }),
      };
    }
    return { kind: 'replay', answer: record.answer, requestId: record.requestId };
  }

  /** The endpoint ran: its answer is the key's answer from now on. */
  save(key: string, answer: ApiAnswer): void {
    const record = this.records.get(key);
    if (record) record.answer = answer;
  }

  /** Nothing ran (validation failed, a fault struck first): the key is free again, as at Stripe. */
  release(key: string): void {
    const record = this.records.get(key);
    if (record && record.answer === null) this.records.delete(key);
  }

  private prune(): void {
    const cutoffMs = this.nowMs() - this.retentionMs;
    for (const [key, record] of this.records) {
      // A key still in flight is never pruned: its request has not answered yet.
      if (record.answer !== null && record.createdMs <= cutoffMs) this.records.delete(key);
    }
  }
}
