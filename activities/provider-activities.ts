import { ApplicationFailure } from '@temporalio/common';
import { Context } from '@temporalio/activity';
import type { ChargeIntent } from '../src/domain/charge.js';
import type { ProviderStepName } from '../src/domain/providers.js';
import { providerFailures, stepBudgetSpent } from '../src/domain/refusals.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { readCharge, type LedgerCharge } from '../src/ledger/charges.js';
import {
  beginProviderAuthorize,
  beginProviderCapture,
  confirmProviderCapture,
  recordProviderAuthorized,
  recordProviderCaptureRefused,
  recordProviderDeclined,
  recordProviderVoided,
} from '../src/ledger/provider-charges.js';
import { authorizeOnce } from '../src/providers/authorize-once.js';
import {
  keyMayHaveExpired,
  providerIdempotencyKey,
  type AuthorizeResult,
  type PaymentConnector,
  type ProviderPayment,
  type RejectedOutcome,
  type UnknownOutcome,
} from '../src/providers/connector.js';
import { connectorFor, type ProviderConnectors } from '../src/providers/connectors.js';
import { asActivityFailure, budgetSpent, currentActivityInfo, stepDeadlineMs } from './ledger-activities.js';

/**
 * The provider activities, by the step they take: each provider step of a charge (a refund is the
 * refund activities') and `refresh`, which only reads the payment while the payer must act.
 */
export type ProviderActivityStep = Exclude<ProviderStepName, `refund:${string}`> | 'refresh';

/**
 * Seams for fault-injection tests: `afterProvider` runs after the provider answered and before the
 * answer is recorded in the ledger, where a crash leaves the provider ahead of the ledger.
 */
export interface ProviderActivityHooks {
  afterProvider?(step: ProviderActivityStep, tenant: string, idempotencyKey: string): void | Promise<void>;
}

/**
 * How a ledger error in each step is judged (ledger-activities.ts, asActivityFailure): authorize as
 * a Try (a rejected statement decides the charge), capture and void as Cancel (a capture once sent,
 * and a void, are driven until done: a rejected statement is retried until an operator repairs it,
 * never turned into a decision that would leave money moving at the provider unrecorded).
 */
const ledgerCallOf = { authorize: 'try', capture: 'cancel', void: 'cancel', refresh: 'read' } as const satisfies Record<
  ProviderActivityStep,
  Parameters<typeof asActivityFailure>[1]
>;

/** The provider's answer is not known: a system fault, retried with the same key. */
class ProviderOutcomeUnknown extends Error {
  override readonly name = 'ProviderOutcomeUnknown';
  constructor(step: ProviderActivityStep, outcome: UnknownOutcome) {
    super(`${step} at the provider has no answer yet (${outcome.reason}): ${outcome.detail}; retrying with the same idempotency key`);
  }
}

function rejected(step: ProviderActivityStep, type: string, outcome: RejectedOutcome, nonRetryable = true): ApplicationFailure {
  return ApplicationFailure.create({
    type,
    message: `the provider refused ${step} (${outcome.reason}${outcome.code ? `, ${outcome.code}` : ''}): ${outcome.detail}`,
    nonRetryable,
  });
}

/**
 * The provider participant of a charge's saga (docs/providers.md): each activity asks the ledger
 * first (may this step run?), then the provider (with the step's own idempotency key, derived from
 * the charge, the same on every attempt), then records the provider's answer in the ledger in the
 * same transaction as the ledger change it decides. A retry after a crash anywhere in between asks
 * the provider again with the same key and gets the same answer.
 *
 * Connectors arrive by injection (the worker builds them from its configuration; tests point them
 * at the simulator).
 */
export function createProviderActivities(pool: LedgerPool, connectors: ProviderConnectors, hooks: ProviderActivityHooks = {}) {
  /**
   * Ledger refusals become the workflow's decisions; an unknown provider answer is retried until the
   * step's deadline (when it has one), then reported as the budget spent, like a ledger step.
   */
  async function step<T>(
    name: ProviderActivityStep,
    deadlineEpochMs: number | undefined,
    run: () => Promise<T>,
    charge?: { tenant: string; idempotencyKey: string },
  ): Promise<T> {
    try {
      return await run();
    } catch (error) {
      if (error instanceof ApplicationFailure && error.nonRetryable) throw error;
      const failure = error instanceof ProviderOutcomeUnknown || error instanceof ApplicationFailure ? error : asActivityFailure(error, ledgerCallOf[name]);
      const retryable = !(failure instanceof ApplicationFailure && failure.nonRetryable);
      const info = currentActivityInfo();
      if (name === 'void' && retryable && charge) {
        // Every failed attempt of a void, with the charge it leaves held at the provider: what an
        // operator greps for beside the chargeguard_provider_voids_pending gauge (docs/operations.md).
        activityLog()?.warn('void at the provider failed; retrying until the provider takes it', {
          tenant: charge.tenant,
          idempotencyKey: charge.idempotencyKey,
          attempt: info?.attempt ?? null,
          error: (error as Error).message,
        });
      }
      const deadlineMs = deadlineEpochMs === undefined ? null : stepDeadlineMs(info, deadlineEpochMs);
      if (retryable && deadlineMs !== null && budgetSpent(info, deadlineMs, Date.now())) {
        throw ApplicationFailure.create({
          type: stepBudgetSpent.type,
          message: `${name} at the provider spent its budget; last fault: ${(error as Error).message}`,
          nonRetryable: true,
        });
      }
      throw failure;
    }
  }

  /**
   * The connector for the provider a charge names, or a final refusal: a worker without it (a
   * provider name this program does not know, or one whose credentials are not set here) sends
   * nothing, and the charge is decided (cancelled, `provider_not_configured`) instead of retried.
   */
  function configuredConnector(provider: string): PaymentConnector {
    const connector = (connectors as Partial<Record<string, PaymentConnector>>)[provider];
    if (connector) return connector;
    throw ApplicationFailure.create({
      type: providerFailures.notConfigured.type,
      message: `no ${provider} connector is configured on this worker (docs/providers.md, "Configuration"); nothing was sent to any provider`,
      nonRetryable: true,
    });
  }

  function connectorOf(row: LedgerCharge): PaymentConnector {
    const provider = row.charge.provider;
    if (!provider) throw new Error(`charge ${row.charge.idempotencyKey} is not a provider charge`);
    return connectorFor(connectors, provider.provider);
  }

  /** Voids one payment of a charge the ledger no longer holds; returns once nothing is held there. */
  async function voidPayment(connector: PaymentConnector, chargeId: string, paymentId: string, first: boolean): Promise<void> {
    // One key per charge for its payment; a duplicate (never expected) gets a key of its own.
    const idempotencyKey = first ? providerIdempotencyKey(chargeId, 'void') : `${providerIdempotencyKey(chargeId, 'void')}:${paymentId}`;
    const result = await connector.void({ paymentId, idempotencyKey });
    switch (result.outcome) {
      case 'voided':
      case 'already_voided':
        return;
      case 'unknown':
        throw new ProviderOutcomeUnknown('void', result);
      case 'rejected':
        if (result.reason === 'not_found') return;
        if (result.payment?.state === 'voided' || result.payment?.state === 'declined') return;
        // Held or captured there although the ledger cancelled: retried (a compensation never gives
        // up), and the charge is indexed as cancelling so a person looks (reconcile --provider).
        throw rejected('void', providerFailures.voidRefused.type, result, false);
    }
  }

  /** The payments the provider holds for a charge whose answer we never learnt. */
  async function paymentsOf(connector: PaymentConnector, row: LedgerCharge): Promise<ProviderPayment[]> {
    const found = await connector.findByReference({
      reference: { tenant: row.charge.tenant, chargeId: row.charge.id },
      createdNotBeforeMs: Date.parse(row.charge.createdAt),
    });
    switch (found.outcome) {
      case 'found':
        return found.payments;
      case 'not_found':
        return [];
      case 'unknown':
        throw new ProviderOutcomeUnknown('void', found);
      case 'rejected':
        throw rejected('void', providerFailures.voidRefused.type, found, false);
    }
  }

  /** Records what authorize (or a later look at the payment) answered. */
  async function recordAuthorizeAnswer(intent: ChargeIntent, connector: PaymentConnector, result: AuthorizeResult): Promise<LedgerCharge> {
    const { tenant, idempotencyKey, chargeId } = intent;
    switch (result.outcome) {
      case 'authorized':
      case 'requires_action': {
        const row = await recordProviderAuthorized(
          pool, tenant, idempotencyKey, result.payment.id, result.outcome,
          result.outcome === 'requires_action' ? result.nextAction : null,
        );
        if (row.holdState === 'CANCELLED') {
          // Cancelled while authorize was in flight: this late authorization is voided, never captured.
          await voidPayment(connector, chargeId, result.payment.id, true);
          return recordProviderVoided(pool, tenant, idempotencyKey, result.payment.id);
        }
        return row;
      }
      case 'declined':
        return recordProviderDeclined(pool, tenant, idempotencyKey, result.payment?.id ?? null, result.declineCode, result.providerDeclineCode);
      case 'unknown':
        throw new ProviderOutcomeUnknown('authorize', result);
      case 'rejected':
        throw rejected('authorize', providerFailures.authorizeRejected.type, result);
    }
  }

  return {
    /**
     * Authorize at the provider (a hold on the payer's card), for a charge whose ledger hold exists.
     * Never sent for a charge the ledger cancelled first (the null compensation's record).
     */
    async authorizeAtProvider(intent: ChargeIntent, deadlineEpochMs?: number): Promise<LedgerCharge> {
      return step('authorize', deadlineEpochMs, async () => {
        const { tenant, idempotencyKey, chargeId, request } = intent;
        // Before anything is recorded as sent: without a connector nothing can be.
        if (request.paymentMethod) configuredConnector(request.paymentMethod.provider);
        const row = await beginProviderAuthorize(pool, tenant, idempotencyKey);
        if (row.holdState !== 'TRIED' || row.charge.provider?.state !== 'authorizing') return row; // answered before
        const connector = connectorOf(row);
        const result = await authorizeOnce(
          connector,
          {
            reference: { tenant, chargeId },
            amountMinor: request.amountMinor,
            currency: request.currency,
            paymentMethod: row.charge.provider.paymentMethod,
            idempotencyKey: providerIdempotencyKey(chargeId, 'authorize'),
            // Part of the request's fingerprint (so the same on every attempt under this key, as the
            // provider requires); a value that is not a string was never sent by the service.
            ...(typeof request.returnUrl === 'string' ? { returnUrl: request.returnUrl } : {}),
          },
          { firstSentAtMs: row.providerSentAt?.authorizeMs ?? Date.now(), nowMs: Date.now(), chargeCreatedAtMs: Date.parse(row.charge.createdAt) },
        );
        await hooks.afterProvider?.('authorize', tenant, idempotencyKey);
        return recordAuthorizeAnswer(intent, connector, result);
      });
    },

    /**
     * After the payer acted (a provider event said so, or the caller asks): look the payment up and
     * record where it stands. A charge no longer waiting for the payer is returned as it is.
     */
    async refreshProviderPayment(intent: ChargeIntent): Promise<LedgerCharge> {
      return step('refresh', undefined, async () => {
        const row = await readCharge(pool, intent.tenant, intent.idempotencyKey);
        if (!row) throw new Error(`ledger has no row for charge ${intent.idempotencyKey}`);
        if (row.holdState !== 'TRIED' || row.charge.provider?.state !== 'requires_action') return row;
        const connector = connectorOf(row);
        const recordedId = row.charge.provider.paymentId;
        const payment = (await paymentsOf(connector, row)).find((candidate) => candidate.id === recordedId);
        if (!payment) return row;
        switch (payment.state) {
          case 'authorized':
            return recordAuthorizeAnswer(intent, connector, { outcome: 'authorized', payment });
          case 'declined':
          case 'voided': {
            // The payer failed (or abandoned) authentication: the provider's last error says why.
            const mapped = connector.declineOf(payment.lastDeclineCode, 'authentication');
            return recordAuthorizeAnswer(intent, connector, { outcome: 'declined', payment, ...mapped, detail: `payment ${payment.id} is ${payment.providerStatus}` });
          }
          default:
            return row; // still waiting for the payer, or processing
        }
      });
    },

    /**
     * Capture at the provider, then Confirm in the ledger with what the provider captured. Once sent,
     * the capture is driven to an answer (no budget): the ledger refuses to cancel meanwhile, because
     * the money may be moving. A capture the provider refuses for good frees the charge to be cancelled.
     */
    async captureAtProvider(tenant: string, idempotencyKey: string, captureMinor: number | null): Promise<LedgerCharge> {
      return step('capture', undefined, async () => {
        const row = await beginProviderCapture(pool, tenant, idempotencyKey);
        if (row.holdState === 'CONFIRMED') return row;
        const connector = connectorOf(row);
        const paymentId = row.charge.provider!.paymentId!;
        const chargeId = row.charge.id;
        const sentAtMs = row.providerSentAt?.captureMs ?? Date.now();
        if (keyMayHaveExpired(connector, sentAtMs, Date.now())) {
          // The provider may have forgotten the key: a resend could act again. Look first.
          const payment = (await paymentsOf(connector, row)).find((candidate) => candidate.id === paymentId);
          if (payment?.state === 'captured') return confirmProviderCapture(pool, tenant, idempotencyKey, payment.amountCapturedMinor);
        }
        const result = await connector.capture({
          paymentId,
          ...(captureMinor !== null ? { amountMinor: captureMinor } : {}),
          idempotencyKey: providerIdempotencyKey(chargeId, 'capture'),
        });
        await hooks.afterProvider?.('capture', tenant, idempotencyKey);
        switch (result.outcome) {
          case 'captured':
          case 'already_captured':
            // The provider's captured amount is the truth the ledger records.
            return confirmProviderCapture(pool, tenant, idempotencyKey, result.payment.amountCapturedMinor);
          case 'unknown':
            throw new ProviderOutcomeUnknown('capture', result);
          case 'rejected':
            await recordProviderCaptureRefused(pool, tenant, idempotencyKey, result.payment?.state === 'voided' ? 'voided' : null);
            throw rejected('capture', providerFailures.captureRefused.type, result);
        }
      });
    },

    /**
     * The provider half of the compensation, after the ledger cancelled the charge: void whatever the
     * provider holds for it. Safe when authorize never ran (nothing was sent: only recorded), and when
     * its answer was never learnt (the payment is looked up by our reference). Retried until done.
     */
    async voidAtProvider(tenant: string, idempotencyKey: string, alertAtEpochMs?: number): Promise<LedgerCharge | null> {
      // With `alertAtEpochMs` (the workflow's alert time, provider-void-alerts), the void gives itself
      // up there as its budget spent; the workflow indexes the charge cancelling and calls it again without.
      return step('void', alertAtEpochMs, async () => {
        const row = await readCharge(pool, tenant, idempotencyKey);
        if (!row?.charge.provider) return row; // a tombstone left before Try: nothing reached the provider
        if (row.holdState !== 'CANCELLED') return row; // declined or captured: nothing to void
        const provider = row.charge.provider;
        if (provider.state === 'voided') return row;
        if (provider.state === null) return recordProviderVoided(pool, tenant, idempotencyKey, null); // never sent
        const connector = connectorOf(row);
        const paymentIds = provider.paymentId
          ? [provider.paymentId]
          : (await paymentsOf(connector, row)).filter((p) => p.state !== 'voided' && p.state !== 'declined').map((p) => p.id);
        for (const [index, paymentId] of paymentIds.entries()) await voidPayment(connector, row.charge.id, paymentId, index === 0);
        await hooks.afterProvider?.('void', tenant, idempotencyKey);
        return recordProviderVoided(pool, tenant, idempotencyKey, paymentIds[0] ?? null);
      }, { tenant, idempotencyKey });
    },
  };
}

export type ProviderActivities = ReturnType<typeof createProviderActivities>;

/** The activity's logger (the worker's, with the workflow and activity ids); null outside an activity (a test calling it directly). */
function activityLog(): Context['log'] | null {
  try {
    return Context.current().log;
  } catch {
    return null;
  }
}
