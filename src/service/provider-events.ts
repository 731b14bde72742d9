import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { chargeWorkflowId } from '../domain/charge.js';
import { providerNames, type ProviderName } from '../domain/providers.js';
import type { LedgerCharge } from '../ledger/charges.js';
import type { LedgerPool } from '../ledger/pool.js';
import { recordProviderVoided } from '../ledger/provider-charges.js';
import {
  readProviderChargeById,
  readProviderEvent,
  recordProviderEvent,
  type ProviderEventAction,
  type RecordedProviderEvent,
} from '../ledger/provider-events.js';

export { providerEventActions } from '../ledger/provider-events.js';
import { providerIdempotencyKey, type PaymentConnector, type ProviderEvent, type ProviderPayment } from '../providers/connector.js';
import type { ProviderConnectors } from '../providers/connectors.js';
import type { WebhookSignatureHeader } from '../providers/folder.js';
import { providerFolders } from '../providers/registry.js';
import { providerEventSignal, type ProviderEventSignal } from '../../workflows/definitions.js';
import { NotFoundError, ValidationError } from '../domain/errors.js';
import { asUnavailable } from './unavailable.js';

/**
 * The payment providers' events about provider charges (docs/providers.md, Webhooks): verified on
 * the raw body before anything is parsed, deduplicated by event id, and turned into one of two
 * things. While the charge's workflow runs, it is signalled (it reads the payment again: an event
 * is a snapshot, possibly late or out of order, never the truth). Once the workflow has closed, the
 * late rule: a charge the ledger cancelled or declined whose payment is held or waiting for the
 * payer at the provider is an orphan authorization, voided here with the charge's void key.
 *
 * Every refusal is decided before anything is written. A fault (database, Temporal, a provider
 * whose answer to the void is unknown) is answered 5xx and nothing is recorded, so the provider
 * delivers the event again and the work is done then: a 2xx would tell it the event was handled.
 */

/** How each provider signs its deliveries, as its folder declares it (src/providers/registry.ts). */
export const providerWebhookSignatures: Readonly<Record<ProviderName, WebhookSignatureHeader & { displayName: string }>> = Object.fromEntries(
  providerNames.map((name) => [name, { ...providerFolders[name].webhookSignature, displayName: providerFolders[name].displayName }]),
) as Record<ProviderName, WebhookSignatureHeader & { displayName: string }>;

/** Each provider's signature header, as its deliveries carry it. */
export const providerSignatureHeaders: Readonly<Record<ProviderName, string>> = Object.fromEntries(
  providerNames.map((name) => [name, providerFolders[name].webhookSignature.name]),
) as Record<ProviderName, string>;

/** Event ids and types the table keeps (printable ASCII, at most 255 characters): providers' own are far shorter. */
const eventTextPattern = /^[\x21-\x7e]{1,255}$/;

/** Whether the charge's workflow took the signal (`signalled`) or is no longer running (`closed`: completed, failed or never started). */
export type SignalCharge = (tenant: string, idempotencyKey: string, event: ProviderEventSignal) => Promise<'signalled' | 'closed'>;

/** Signals the charge's workflow through Temporal; an outage is a 503 (the provider redelivers). */
export function temporalChargeSignaller(temporal: Client): SignalCharge {
  return async (tenant, idempotencyKey, event) => {
    try {
      await temporal.workflow.getHandle(chargeWorkflowId(tenant, idempotencyKey)).signal(providerEventSignal, event);
      return 'signalled';
    } catch (error) {
      // Temporal answers NOT_FOUND for a workflow that completed as for one that never existed.
      if (error instanceof WorkflowNotFoundError) return 'closed';
      throw asUnavailable(error);
    }
  };
}

export interface ProviderEventDelivery {
  provider: string;
  /** The provider's signature header as received (undefined: absent). */
  signatureHeader: string | undefined;
  /** The body's bytes exactly as received: the signature covers them. */
  rawBody: Buffer;
  receivedAtMs: number;
}

export interface WireProviderEventReceipt {
  object: 'provider_event';
  id: string;
  provider: string;
  type: string;
  /** What the event led to (its first delivery's, on a redelivery). */
  action: ProviderEventAction;
  /** True when an earlier delivery of this event did the work. */
  replayed: boolean;
}

/** Where the receiver writes what it decided; fastify's request logger fits. */
export interface ProviderEventLog {
  info(details: object, message: string): void;
  warn(details: object, message: string): void;
  error(details: object, message: string): void;
}

const silentLog: ProviderEventLog = { info: () => {}, warn: () => {}, error: () => {} };

interface Decision {
  action: ProviderEventAction;
  detail: string | null;
  charge: LedgerCharge | null;
}

export interface ProviderEventServiceOptions {
  ledger: LedgerPool;
  connectors: ProviderConnectors;
  signalCharge: SignalCharge;
}

export class ProviderEventService {
  constructor(private readonly options: ProviderEventServiceOptions) {}

  async receive(delivery: ProviderEventDelivery, log: ProviderEventLog = silentLog): Promise<WireProviderEventReceipt> {
    const { provider, connector } = this.connectorOf(delivery.provider);
    const event = verify(connector, provider, delivery);

    const first = await translate(() => readProviderEvent(this.options.ledger, provider, event.id));
    if (first) return receiptOf(first, true);

    const decision = await this.decide(connector, event, log);
    const { recorded, event: stored } = await translate(() =>
      recordProviderEvent(this.options.ledger, {
        provider,
        eventId: event.id,
        eventType: event.type,
        paymentId: event.payment?.id ?? null,
        charge: decision.charge ? { tenant: decision.charge.charge.tenant, idempotencyKey: decision.charge.charge.idempotencyKey } : null,
        action: decision.action,
        detail: decision.detail,
      }),
    );
    // A delivery of the same event raced this one and recorded first: its row is the account.
    return receiptOf(stored, !recorded);
  }

  private connectorOf(name: string): { provider: ProviderName; connector: PaymentConnector } {
    const provider = providerNames.find((known) => known === name);
    if (!provider) throw new NotFoundError(`no provider ${name}: provider events are received for ${providerNames.join(', ')}`);
    const connector = this.options.connectors[provider];
    if (!connector) {
      throw new NotFoundError(`no ${provider} connector is configured in this process, so its events cannot be verified (docs/providers.md, "Configuration")`);
    }
    return { provider, connector };
  }

  private async decide(connector: PaymentConnector, event: ProviderEvent, log: ProviderEventLog): Promise<Decision> {
    const payment = event.payment;
    const about = { eventId: event.id, type: event.type, paymentId: payment?.id ?? null };
    if (!payment) return { action: 'not_a_payment', detail: null, charge: null };
    if (!payment.reference) {
      log.info(about, 'provider event about a payment without our reference: recorded, nothing done');
      return { action: 'not_ours', detail: 'the payment carries no tenant and charge_id metadata', charge: null };
    }
    const { tenant, chargeId } = payment.reference;
    const charge = await translate(() => readProviderChargeById(this.options.ledger, tenant, chargeId));
    if (!charge) {
      // Our reference and no charge: another environment sharing the provider account, or a row
      // lost. Nothing is voided on a guess; reconcile reports it too.
      log.warn({ ...about, tenant, chargeId }, 'provider event about a payment with our reference but no charge row: recorded, nothing done');
      return { action: 'no_charge', detail: `no charge ${chargeId} in tenant ${tenant}`, charge: null };
    }
    const signalled = await this.options.signalCharge(charge.charge.tenant, charge.charge.idempotencyKey, {
      eventId: event.id,
      type: event.type,
      paymentId: payment.id,
    });
    if (signalled === 'signalled') return { action: 'signalled', detail: null, charge };
    return this.lateRule(connector, charge, payment, log, about);
  }

  /**
   * The charge's workflow has closed, so nothing else will act on this payment. A charge the ledger
   * cancelled or declined must hold nothing at the provider: a payment held there (authorized) or
   * waiting for the payer (requires_action, which the payer could still complete) is voided with the
   * charge's void key, and the void recorded on a cancelled charge's row.
   *
   * The event is a claim, not evidence: anyone holding the webhook secret can pair any payment id
   * with any of our charges. So before anything is voided the payment is fetched from the provider
   * by its id, and only the provider's own record decides: its metadata must name this charge (tenant
   * and charge id), it must be the payment the ledger recorded for the charge (when it recorded one),
   * and its state, not the event's, says whether anything is held. A payment that fails any of these
   * is recorded (`payment_mismatch`, 200: redelivering the same event cannot change the answer) and
   * nothing is sent to the provider but the read.
   */
  private async lateRule(
    connector: PaymentConnector,
    charge: LedgerCharge,
    claimed: ProviderPayment,
    log: ProviderEventLog,
    about: object,
  ): Promise<Decision> {
    const { tenant, idempotencyKey, id: chargeId } = charge.charge;
    const recorded = charge.charge.provider ?? null;
    const closedLedger = charge.holdState === 'CANCELLED' || charge.holdState === 'DECLINED';
    // The event's own state only says whether to look: an event that claims nothing is held asks for nothing.
    const claimsHeld = claimed.state === 'authorized' || claimed.state === 'requires_action';
    if (!closedLedger || !claimsHeld) {
      return {
        action: 'no_action',
        detail: `workflow closed; the ledger's hold is ${charge.holdState}, the event shows the payment ${claimed.providerStatus}`,
        charge,
      };
    }
    if (recorded?.paymentId && recorded.paymentId !== claimed.id) {
      log.warn({ ...about, tenant, chargeId, recordedPaymentId: recorded.paymentId }, 'provider event names a payment the ledger did not record for the charge: recorded, nothing done');
      return { action: 'payment_mismatch', detail: `the ledger records payment ${recorded.paymentId} for charge ${chargeId}, not ${claimed.id}`, charge };
    }
    // Only this very payment recorded voided makes the event an old snapshot: a charge voided
    // before any payment was known may still meet a late authorization, which is voided below.
    if (recorded?.state === 'voided' && recorded.paymentId === claimed.id) {
      return { action: 'no_action', detail: `the ledger recorded payment ${claimed.id} voided; the event is an older snapshot`, charge };
    }
    const fetched = await connector.retrievePayment({ paymentId: claimed.id });
    if (fetched.outcome === 'unknown') {
      // No answer is not evidence either way: fail so the provider redelivers and the read is made again.
      throw new Error(`reading payment ${claimed.id} for charge ${chargeId} answered unknown (${fetched.reason}: ${fetched.detail}); the event is left for redelivery`);
    }
    if (fetched.outcome === 'rejected') {
      if (fetched.reason === 'authentication') throw new Error(`the provider refused our credentials reading ${claimed.id}: ${fetched.detail}`);
      log.warn({ ...about, tenant, chargeId, reason: fetched.reason }, 'provider event names a payment the provider does not show us: recorded, nothing done');
      return { action: 'payment_mismatch', detail: `the provider answered ${fetched.reason} reading payment ${claimed.id}: ${fetched.detail}`, charge };
    }
    const payment = fetched.payment;
    const owner = payment.reference;
    if (payment.id !== claimed.id || owner?.tenant !== tenant || owner.chargeId !== chargeId) {
      log.warn(
        { ...about, tenant, chargeId, paymentTenant: owner?.tenant ?? null, paymentChargeId: owner?.chargeId ?? null },
        "provider event pairs a payment with a charge the payment's own metadata does not name: recorded, nothing done",
      );
      return {
        action: 'payment_mismatch',
        detail: owner
          ? `payment ${payment.id} belongs to charge ${owner.chargeId} of tenant ${owner.tenant} at the provider, not to charge ${chargeId} of tenant ${tenant}`
          : `payment ${payment.id} carries no tenant and charge_id metadata at the provider`,
        charge,
      };
    }
    if (payment.state !== 'authorized' && payment.state !== 'requires_action') {
      return {
        action: 'no_action',
        detail: `workflow closed; the ledger's hold is ${charge.holdState}, the provider shows the payment ${payment.providerStatus}`,
        charge,
      };
    }
    const samePayment = recorded?.paymentId === null || recorded?.paymentId === payment.id;
    const voided = await connector.void({ paymentId: payment.id, idempotencyKey: providerIdempotencyKey(chargeId, 'void') });
    switch (voided.outcome) {
      case 'voided':
      case 'already_voided': {
        // A second payment of the charge (never expected) is voided but not recorded: the row names its first.
        if (samePayment && charge.holdState === 'CANCELLED') {
          await translate(() => recordProviderVoided(this.options.ledger, tenant, idempotencyKey, payment.id));
        }
        log.warn({ ...about, tenant, chargeId, outcome: voided.outcome }, 'orphan authorization voided: the charge was closed in the ledger');
        return {
          action: 'voided',
          detail: `${voided.outcome}: the ledger's hold is ${charge.holdState}` + (samePayment ? '' : `; a second payment of the charge (the ledger records ${recorded?.paymentId})`),
          charge,
        };
      }
      case 'rejected':
        if (voided.reason === 'authentication') {
          // Our credentials, not the payment: fail, so the event comes back once they are fixed.
          throw new Error(`the provider refused our credentials voiding ${payment.id}: ${voided.detail}`);
        }
        log.error({ ...about, tenant, chargeId, reason: voided.reason, code: voided.code }, 'the provider refused to void an orphan authorization');
        return { action: 'void_refused', detail: `${voided.reason}${voided.code ? ` (${voided.code})` : ''}: ${voided.detail}`, charge };
      case 'unknown':
        // Unknown is not an answer: fail so the provider redelivers and the void is sent again with its key.
        throw new Error(`void of ${payment.id} for charge ${chargeId} answered unknown (${voided.reason}: ${voided.detail}); the event is left for redelivery`);
    }
  }
}

function verify(connector: PaymentConnector, provider: ProviderName, delivery: ProviderEventDelivery): ProviderEvent {
  const header = providerSignatureHeaders[provider];
  if (delivery.signatureHeader === undefined || delivery.signatureHeader === '') {
    throw new ValidationError([{ field: header, message: 'missing: every delivery is signed by the provider' }]);
  }
  const verified = connector.verifyWebhook({ payload: delivery.rawBody, signatureHeader: delivery.signatureHeader, receivedAtMs: delivery.receivedAtMs });
  if (verified.outcome === 'refused') {
    // Signed but not an event: the field at fault, as every other body's refusal names it.
    if (verified.reason === 'not_an_event') throw new ValidationError([{ field: verified.field, message: verified.detail }]);
    throw new ValidationError([{ field: header, message: `${verified.reason}: ${verified.detail}` }]);
  }
  const { event } = verified;
  if (!eventTextPattern.test(event.id)) throw new ValidationError([{ field: 'id', message: 'must be 1-255 printable ASCII characters' }]);
  if (!eventTextPattern.test(event.type)) throw new ValidationError([{ field: 'type', message: 'must be 1-255 printable ASCII characters' }]);
  if (event.payment && !eventTextPattern.test(event.payment.id)) {
    throw new ValidationError([{ field: 'data.object.id', message: 'must be 1-255 printable ASCII characters' }]);
  }
  return event;
}

function receiptOf(event: RecordedProviderEvent, replayed: boolean): WireProviderEventReceipt {
  return { object: 'provider_event', id: event.eventId, provider: event.provider, type: event.eventType, action: event.action, replayed };
}

async function translate<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw asUnavailable(error);
  }
}
