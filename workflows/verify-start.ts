import { ApplicationFailure } from '@temporalio/workflow';
import { chargeWorkflowId, type ChargeIntent } from '../src/domain/charge.js';
import { chargeFingerprint, chargeIdFor, fingerprintVersionOf } from '../src/domain/request-fingerprint.js';
import { paymentMethodIdPattern, providerNames } from '../src/domain/providers.js';
import type { ChargePolicy, ChargeWorkflowInput } from './definitions.js';

// Generation 5's check of a start (patches.ts, `verifiedStartPatch`, says why and what it cannot
// refuse): the workflow derives its id, charge id and fingerprint again from its own input and
// refuses a start where they disagree, before any ledger step runs.

/** The failure type of a refused start: final, the workflow fails with it. */
export const forgedStartType = 'ForgedStart';

const captureModes: ReadonlySet<unknown> = new Set(['automatic', 'manual']);

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const isString = (value: unknown): value is string => typeof value === 'string';
const isSafeInteger = (value: unknown): value is number => Number.isSafeInteger(value);
const isStringRecord = (value: unknown): boolean => isRecord(value) && Object.values(value).every(isString);

/** The shape the service always sends; anything else is a start it did not make. Null when fine. */
export function shapeProblem(input: unknown): string | null {
  if (!isRecord(input)) return 'the input is not a charge workflow input';
  const { intent, policy } = input;
  if (!isRecord(intent)) return 'intent is missing';
  if (!isString(intent.tenant) || !isString(intent.idempotencyKey)) return 'intent.tenant or intent.idempotencyKey is not a string';
  if (!isString(intent.chargeId) || !isString(intent.fingerprint)) return 'intent.chargeId or intent.fingerprint is not a string';
  if (intent.actingKeyId !== undefined && !isString(intent.actingKeyId)) return 'intent.actingKeyId is not a string';
  if (intent.dailyLimitMinor !== undefined && !isSafeInteger(intent.dailyLimitMinor)) return 'intent.dailyLimitMinor is not an integer';
  const request = intent.request;
  if (!isRecord(request)) return 'intent.request is missing';
  for (const field of ['orderId', 'payerAccountId', 'payeeAccountId', 'currency'] as const) {
    if (!isString(request[field])) return `intent.request.${field} is not a string`;
  }
  if (!isSafeInteger(request.amountMinor)) return 'intent.request.amountMinor is not an integer';
  if (!captureModes.has(request.captureMode)) return 'intent.request.captureMode is neither automatic nor manual';
  if (request.description !== null && !isString(request.description)) return 'intent.request.description is neither null nor a string';
  if (request.metadata !== null && !isStringRecord(request.metadata)) return 'intent.request.metadata is neither null nor strings by name';
  const method = request.paymentMethod;
  if (method !== undefined) {
    // Only providers this program has a connector for: a forged name otherwise reached the ledger,
    // which made a clearing account for it (the ledger now refuses it too, migration 230).
    if (!isRecord(method)) return 'intent.request.paymentMethod is not an object';
    if (!(providerNames as readonly unknown[]).includes(method.provider)) {
      return `intent.request.paymentMethod.provider is not one of ${providerNames.join(', ')}`;
    }
    if (!isString(method.id) || !paymentMethodIdPattern.test(method.id)) return 'intent.request.paymentMethod.id is not a payment method id';
  }
  if (!isRecord(policy)) return 'policy is missing';
  const budgets: (keyof ChargePolicy)[] = ['activityStartToCloseMs', 'tryBudgetMs', 'confirmBudgetMs', 'holdTtlMs'];
  for (const field of budgets) {
    if (!isSafeInteger(policy[field]) || (policy[field] as number) <= 0) return `policy.${field} is not a positive integer`;
  }
  const alertMs = policy.compensationAlertAfterMs;
  if (alertMs !== undefined && (!isSafeInteger(alertMs) || alertMs <= 0)) return 'policy.compensationAlertAfterMs is not a positive integer';
  const retryMaxMs = policy.ledgerRetryMaxIntervalMs;
  if (retryMaxMs !== undefined && (!isSafeInteger(retryMaxMs) || retryMaxMs <= 0)) return 'policy.ledgerRetryMaxIntervalMs is not a positive integer';
  return null;
}

/**
 * What disagrees between the workflow's id and its input, each named; empty for a start the
 * service (or an agent's chargeFromWorkflow, which starts from the service's intents) made.
 * Every fingerprint version the service has produced is accepted, under its own definition.
 */
export function startMismatches(workflowId: string, input: unknown): string[] {
  const shape = shapeProblem(input);
  if (shape !== null) return [shape];
  const { intent } = input as ChargeWorkflowInput;
  const mismatches: string[] = [];
  const expectedId = chargeWorkflowId(intent.tenant, intent.idempotencyKey);
  if (workflowId !== expectedId) {
    mismatches.push(`workflow id ${JSON.stringify(workflowId)} is not ${JSON.stringify(expectedId)}, the id of intent's tenant and key`);
  }
  const expectedChargeId = chargeIdFor(intent.tenant, intent.idempotencyKey);
  if (intent.chargeId !== expectedChargeId) {
    mismatches.push(`intent.chargeId ${intent.chargeId} is not ${expectedChargeId}, the id of intent's tenant and key`);
  }
  const version = fingerprintVersionOf(intent.fingerprint);
  if (version === null) {
    mismatches.push('intent.fingerprint is not a fingerprint of any version');
  } else if (chargeFingerprint(intent.request, version) !== intent.fingerprint) {
    mismatches.push(`intent.fingerprint is not the v${version} fingerprint of intent.request`);
  }
  return mismatches;
}

/** Fails the workflow (not its task: no retry) when the start was not the service's. */
export function assertGenuineStart(workflowId: string, input: unknown): void {
  const mismatches = startMismatches(workflowId, input);
  if (mismatches.length === 0) return;
  throw ApplicationFailure.create({
    type: forgedStartType,
    message: `refused a charge start the service did not make: ${mismatches.join('; ')}`,
    nonRetryable: true,
    details: mismatches,
  });
}
