/**
 * The callers of a chaos run: agents that retry. Each idempotency key is sent several times in
 * one of three shapes (all copies at the same moment, one after another, or a first copy aborted
 * mid-flight and then re-sent), to any of the API processes, while faults are injected. A key is
 * decided when an answer carries a final status; until then every answer (202, 429, 5xx, a
 * dropped connection) means "send it again", as the API's contract tells callers to.
 */
import { randomBytes } from 'node:crypto';

export type Shape = 'concurrent' | 'sequential' | 'aborted';

/** How long a caller whose copy got no final answer waits before sending it again. */
const resendIntervalMs = 250;
const shapes: readonly Shape[] = ['concurrent', 'sequential', 'aborted'];

/** Statuses after which a create's answer no longer changes for an automatic-capture charge. */
const finalStatuses = new Set(['succeeded', 'declined']);
/**
 * A card charge may also end cancelled without any caller asking (the provider unreachable for
 * the whole authorize budget, the payer's action expired): final too, and counted by reason.
 */
const finalCardStatuses = new Set([...finalStatuses, 'cancelled']);
/** A manual-capture charge's create is decided once reserved (its capture or cancel follows). */
const finalManualStatuses = new Set([...finalCardStatuses, 'reserved']);

export interface StormTarget {
  apiUrls: readonly string[];
  apiKey: string;
  payerAccountId: string;
  payeeAccountId: string;
  currency: string;
  /** Provider mode: a share of the keys are card charges at the payment provider. */
  cards?: CardCharges;
}

export interface CardCharges {
  /** Fraction of new keys (0 to 1) that are card charges instead of ledger charges. */
  share: number;
  /** The Stripe simulator, where the storm plays the payer of a 3-D Secure charge. */
  simulatorUrl: string;
  /** A 3-D Secure payer acts this long (at most) after the charge first answers requires_action. */
  payerActsAfterMsMax: number;
}

/**
 * The test cards of card keys, by weight: mostly one that authorizes, some the issuer declines,
 * some that need the payer's 3-D Secure (docs/providers.md, The simulator).
 */
const cardMix: readonly { paymentMethod: string; weight: number }[] = [
  { paymentMethod: 'pm_card_visa', weight: 60 },
  { paymentMethod: 'pm_card_mastercard', weight: 10 },
  { paymentMethod: 'pm_card_visa_chargeDeclined', weight: 5 },
  { paymentMethod: 'pm_card_visa_chargeDeclinedInsufficientFunds', weight: 5 },
  { paymentMethod: 'pm_card_threeDSecure2Required', weight: 20 },
];
export const threeDSecureCard = 'pm_card_threeDSecure2Required';
/** Of the 3-D Secure payers, the share whose authentication fails (the charge is then declined). */
const payerFailsShare = 0.1;
/** Of the card keys, the share created with capture "manual": the storm then captures or cancels each. */
const manualCaptureShare = 0.2;
/** Of those, the share the storm cancels (the provider voids the authorization) instead of capturing. */
const manualCancelShare = 0.3;
/** A manual charge is captured or cancelled up to this long after it first answered reserved. */
const settleManualAfterMsMax = 2_000;
/** How long the storm keeps sending a manual charge's capture or cancel until it is answered. */
const settleManualBudgetMs = 240_000;

export interface StormLimits {
  /** Keys whose copies are in flight at once. */
  keysInFlight: number;
  /** Copies of one key per burst: 2 to this. */
  copiesMax: number;
  /** The server's wait for an outcome before it answers 202 (`Prefer: wait=N`). */
  preferWaitSeconds: number;
  /** Per request: a hung connection is abandoned (and counted) after this. */
  requestTimeoutMs: number;
  /** The longest an aborted copy runs before the caller gives up on it. */
  abortAfterMsMax: number;
}

export const defaultStormLimits: StormLimits = {
  keysInFlight: 6,
  copiesMax: 4,
  preferWaitSeconds: 5,
  requestTimeoutMs: 20_000,
  abortAfterMsMax: 300,
};

export interface KeyRecord {
  key: string;
  amountMinor: number;
  shape: Shape;
  /** A card charge's test card; null for a ledger charge (payer_account_id). */
  paymentMethod: string | null;
  /** 3-D Secure: the payment the payer was asked to authenticate, and what the payer did (null: not yet). */
  paymentId: string | null;
  payerActed: 'succeed' | 'fail' | null;
  /** Epoch ms when the provider answered the payer's authentication (null: not yet, or it failed to answer). */
  payerActedAtMs: number | null;
  /** Card keys created with capture "manual": what the storm then does with the hold (null: automatic capture). */
  manual: 'capture' | 'cancel' | null;
  /** The final status the capture or cancel answered with (null: not asked yet, or never answered). */
  settled: string | null;
  settleSent: boolean;
  /** Every final status an answer carried: more than one distinct value would break "same outcome". */
  outcomes: Set<string>;
  /** The failure_reason of a cancelled answer. */
  cancelReasons: Set<string>;
  requests: number;
  /** Epoch ms of its first copy, and of its first final answer (null until then). */
  firstSentAtMs: number;
  decidedAtMs: number | null;
}

/** What the callers saw, by answer: `"201"`, `"503"`, `"network"` (connection refused or reset), `"aborted"` (by the caller), `"timeout"`. */
export type AnswerCounts = Record<string, number>;

export interface Storm {
  keys: Map<string, KeyRecord>;
  answers: AnswerCounts;
  /** Epoch ms of every 2xx answer with a final status, for recovery times. */
  decidedAtMs: number[];
  /** 3-D Secure payers acting and manual charges being captured or cancelled: awaited before the storm counts as over. */
  followUps: Set<Promise<void>>;
  /** What the simulator answered the payers' authentications: `"200"`, `"400"`, `"network"`. */
  payerAnswers: AnswerCounts;
  /** What the API answered the captures and cancels of manual charges: `"capture 200"`, `"cancel 503"`. */
  settleAnswers: AnswerCounts;
}

export function newStorm(): Storm {
  return { keys: new Map(), answers: {}, decidedAtMs: [], followUps: new Set(), payerAnswers: {}, settleAnswers: {} };
}

/** The caller of a manual charge captures or cancels it a moment after it was reserved, until answered. */
function settleManual(storm: Storm, target: StormTarget, limits: StormLimits, record: KeyRecord): void {
  if (record.manual === null || record.settleSent) return;
  record.settleSent = true;
  const action = record.manual;
  const deadlineMs = Date.now() + settleManualBudgetMs;
  const acting = (async () => {
    await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * settleManualAfterMsMax)));
    while (record.settled === null && Date.now() < deadlineMs) {
      const controller = new AbortController();
      const timeout = setTimeout(() => controller.abort('timeout'), limits.requestTimeoutMs);
      try {
        const response = await fetch(`${pick(target.apiUrls)}/v1/charges/${encodeURIComponent(record.key)}/${action}`, {
          method: 'POST',
          signal: controller.signal,
          headers: { authorization: `Bearer ${target.apiKey}`, 'content-type': 'application/json' },
          body: '{}',
        });
        const text = await response.text();
        count(storm.settleAnswers, `${action} ${response.status}`);
        if (response.status === 200) {
          const status = (JSON.parse(text) as { status?: string }).status ?? '';
          if (status === 'succeeded' || status === 'cancelled') record.settled = status;
        } else if (response.status === 409) {
          // Refused for good (e.g. the hold expired first): the charge is whatever the ledger says.
          record.settled = `refused: ${text.slice(0, 200)}`;
        }
      } catch {
        count(storm.settleAnswers, `${action} ${controller.signal.aborted ? 'timeout' : 'network'}`);
      } finally {
        clearTimeout(timeout);
      }
      if (record.settled === null) await new Promise((resolve) => setTimeout(resolve, resendIntervalMs));
    }
  })();
  storm.followUps.add(acting);
  void acting.finally(() => storm.followUps.delete(acting));
}

function count(answers: AnswerCounts, answer: string): void {
  answers[answer] = (answers[answer] ?? 0) + 1;
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}

function pickWeighted<T extends { weight: number }>(items: readonly T[]): T {
  let left = Math.random() * items.reduce((sum, item) => sum + item.weight, 0);
  for (const item of items) {
    left -= item.weight;
    if (left < 0) return item;
  }
  return items.at(-1)!;
}

/**
 * The payer of a 3-D Secure charge authenticates at the provider a moment after the charge asked,
 * once per key (a real payer completes the challenge once); the provider's event then wakes the charge.
 */
function payerActs(storm: Storm, cards: CardCharges, record: KeyRecord, paymentId: string): void {
  if (record.paymentId !== null) return;
  record.paymentId = paymentId;
  const outcome = Math.random() < payerFailsShare ? 'fail' : 'succeed';
  const acting = (async () => {
    await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * cards.payerActsAfterMsMax)));
    try {
      const response = await fetch(`${cards.simulatorUrl}/_simulator/payment_intents/${encodeURIComponent(paymentId)}/authenticate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outcome }),
      });
      await response.arrayBuffer();
      count(storm.payerAnswers, String(response.status));
      if (response.ok) {
        record.payerActed = outcome;
        record.payerActedAtMs = Date.now();
      }
    } catch {
      count(storm.payerAnswers, 'network');
    }
  })();
  storm.followUps.add(acting);
  void acting.finally(() => storm.followUps.delete(acting));
}

/** Sends one copy of the key's create; true when its answer carried a final status. */
async function sendOnce(storm: Storm, target: StormTarget, limits: StormLimits, record: KeyRecord, abortAfterMs?: number): Promise<boolean> {
  record.requests += 1;
  const controller = new AbortController();
  const callerAbort = abortAfterMs === undefined ? null : setTimeout(() => controller.abort('caller'), abortAfterMs);
  const timeout = setTimeout(() => controller.abort('timeout'), limits.requestTimeoutMs);
  try {
    const response = await fetch(`${pick(target.apiUrls)}/v1/charges`, {
      method: 'POST',
      signal: controller.signal,
      headers: {
        authorization: `Bearer ${target.apiKey}`,
        'content-type': 'application/json',
        'idempotency-key': record.key,
        prefer: `wait=${limits.preferWaitSeconds}`,
      },
      body: JSON.stringify({
        order_id: record.key,
        ...(record.paymentMethod === null ? { payer_account_id: target.payerAccountId } : { payment_method: record.paymentMethod }),
        ...(record.manual === null ? {} : { capture: 'manual' }),
        payee_account_id: target.payeeAccountId,
        amount: record.amountMinor,
        currency: target.currency,
      }),
    });
    const text = await response.text();
    count(storm.answers, String(response.status));
    if (response.status !== 200 && response.status !== 201 && response.status !== 202) return false;
    const charge = JSON.parse(text) as { status?: string; failure_reason?: string | null; provider?: { payment_id?: string | null } | null };
    const status = charge.status ?? '';
    const paymentId = charge.provider?.payment_id ?? null;
    if (status === 'requires_action' && paymentId !== null && target.cards !== undefined) payerActs(storm, target.cards, record, paymentId);
    if (status === 'reserved' && record.manual !== null) settleManual(storm, target, limits, record);
    const final = record.paymentMethod === null ? finalStatuses : record.manual === null ? finalCardStatuses : finalManualStatuses;
    if (!final.has(status)) return false;
    record.outcomes.add(status);
    if (status === 'cancelled') record.cancelReasons.add(charge.failure_reason ?? 'unknown');
    record.decidedAtMs ??= Date.now();
    storm.decidedAtMs.push(Date.now());
    return true;
  } catch {
    count(storm.answers, controller.signal.aborted ? String(controller.signal.reason) : 'network');
    return false;
  } finally {
    if (callerAbort !== null) clearTimeout(callerAbort);
    clearTimeout(timeout);
  }
}

/** One burst of copies of a key, in its shape; true when any copy got a final answer. */
async function burst(storm: Storm, target: StormTarget, limits: StormLimits, record: KeyRecord): Promise<boolean> {
  const copies = 2 + Math.floor(Math.random() * (limits.copiesMax - 1));
  switch (record.shape) {
    case 'concurrent': {
      const answers = await Promise.all(Array.from({ length: copies }, () => sendOnce(storm, target, limits, record)));
      return answers.some(Boolean);
    }
    case 'sequential': {
      let decided = false;
      for (let copy = 0; copy < copies; copy += 1) decided = (await sendOnce(storm, target, limits, record)) || decided;
      return decided;
    }
    case 'aborted': {
      await sendOnce(storm, target, limits, record, Math.floor(Math.random() * limits.abortAfterMsMax));
      return sendOnce(storm, target, limits, record);
    }
  }
}

function newKey(storm: Storm, amountMinorMax: number, cards: CardCharges | undefined): KeyRecord {
  const card = cards !== undefined && Math.random() < cards.share;
  const record: KeyRecord = {
    key: `chaos-${randomBytes(8).toString('hex')}`,
    amountMinor: 1 + Math.floor(Math.random() * amountMinorMax),
    shape: pick(shapes),
    paymentMethod: card ? pickWeighted(cardMix).paymentMethod : null,
    paymentId: null,
    payerActed: null,
    payerActedAtMs: null,
    manual: card && Math.random() < manualCaptureShare ? (Math.random() < manualCancelShare ? 'cancel' : 'capture') : null,
    settled: null,
    settleSent: false,
    outcomes: new Set(),
    cancelReasons: new Set(),
    requests: 0,
    firstSentAtMs: Date.now(),
    decidedAtMs: null,
  };
  storm.keys.set(record.key, record);
  return record;
}

/**
 * The distinct outcomes callers were answered for a key's create. A manual charge's create answers
 * reserved, and a copy still in flight when the storm captured or cancelled it answers with what
 * that did: one outcome, not two.
 */
export function createOutcomes(record: KeyRecord): Set<string> {
  if (record.manual === null || !record.outcomes.has('reserved')) return record.outcomes;
  return new Set([...record.outcomes].filter((outcome) => outcome !== record.settled));
}

/** New keys, burst after burst, until `untilEpochMs`; keys left undecided are settled later. */
export async function runStorm(
  storm: Storm,
  target: StormTarget,
  options: {
    untilEpochMs: number;
    amountMinorMax: number;
    limits?: StormLimits;
    /**
     * After a burst without a final answer, keep re-sending the key (every resendIntervalMs) until it
     * has one, as a caller told 202 or 503 does, before the lane takes a new key. Then a key's time
     * to decision is the system's recovery, not how long it waited for the settle phase.
     */
    resendUntilDecided?: boolean;
  },
): Promise<void> {
  const limits = options.limits ?? defaultStormLimits;
  const lane = async (): Promise<void> => {
    while (Date.now() < options.untilEpochMs) {
      const record = newKey(storm, options.amountMinorMax, target.cards);
      let decided = await burst(storm, target, limits, record);
      while (options.resendUntilDecided === true && !decided && Date.now() < options.untilEpochMs) {
        await new Promise((resolve) => setTimeout(resolve, resendIntervalMs));
        decided = await sendOnce(storm, target, limits, record);
      }
    }
  };
  await Promise.all(Array.from({ length: limits.keysInFlight }, lane));
}

/**
 * After the faults stop: every key without a final answer is sent again (as a caller whose
 * request got a 503 or no answer must) until it has one or the deadline passes. Returns the
 * keys still undecided at the deadline.
 */
export async function settleStorm(storm: Storm, target: StormTarget, options: { deadlineEpochMs: number; limits?: StormLimits }): Promise<string[]> {
  const limits = options.limits ?? defaultStormLimits;
  // Round robin: a key that stays undecided for long (a 3-D Secure charge waiting for its hold to
  // expire) must not keep a lane from the keys behind it, e.g. a manual charge to capture in time.
  const pending = [...storm.keys.values()].filter((record) => record.outcomes.size === 0);
  const lane = async (): Promise<void> => {
    while (Date.now() < options.deadlineEpochMs) {
      const record = pending.shift();
      if (record === undefined) return;
      if (await sendOnce(storm, target, limits, record)) continue;
      pending.push(record);
      await new Promise((resolve) => setTimeout(resolve, resendIntervalMs));
    }
  };
  await Promise.all(Array.from({ length: limits.keysInFlight }, lane));
  // A payer or a manual capture still under way: its charge is decided only once it is answered.
  await Promise.allSettled([...storm.followUps]);
  return [...storm.keys.values()].filter((record) => record.outcomes.size === 0).map((record) => record.key);
}
