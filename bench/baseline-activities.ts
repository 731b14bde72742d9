import { providerIdempotencyKey, type PaymentConnector } from '../src/providers/connector.js';
import type { ProviderBaselinePayment } from './baseline-workflow.js';

/** The baseline's three steps: each hands its input back, so only Temporal's own cost remains. */
export const baselineActivities = {
  async noopReserve(record: Record<string, unknown>): Promise<Record<string, unknown>> {
    return record;
  },
  async noopCapture(record: Record<string, unknown>): Promise<Record<string, unknown>> {
    return record;
  },
  async noopRecord(record: Record<string, unknown>): Promise<Record<string, unknown>> {
    return record;
  },
};

export type BaselineActivities = typeof baselineActivities;

/**
 * The provider baseline's two remote steps: the requests a provider charge sends (the same keys
 * scheme, so a retry replays), through the same connector, and nothing else: no ledger, no
 * records. Any outcome but success throws, and Temporal retries it with the same key.
 */
export function createProviderBaselineActivities(connector: PaymentConnector) {
  return {
    async bareAuthorize(payment: ProviderBaselinePayment): Promise<string> {
      const result = await connector.authorize({ ...payment, idempotencyKey: providerIdempotencyKey(payment.reference.chargeId, 'authorize') });
      if (result.outcome !== 'authorized') throw new Error(`baseline authorize answered ${result.outcome}`);
      return result.payment.id;
    },
    async bareCapture(chargeId: string, paymentId: string): Promise<Record<string, unknown>> {
      const result = await connector.capture({ paymentId, idempotencyKey: providerIdempotencyKey(chargeId, 'capture') });
      if (result.outcome !== 'captured' && result.outcome !== 'already_captured') throw new Error(`baseline capture answered ${result.outcome}`);
      return { paymentId, capturedMinor: result.payment.amountCapturedMinor };
    },
  };
}

export type ProviderBaselineActivities = ReturnType<typeof createProviderBaselineActivities>;
