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

export interface StormTarget {
  apiUrls: readonly string[];
  apiKey: string;
  payerAccountId: string;
  payeeAccountId: string;
  currency: string;
}

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
  /** Every final status an answer carried: more than one distinct value would break "same outcome". */
  outcomes: Set<string>;
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
}

export function newStorm(): Storm {
  return { keys: new Map(), answers: {}, decidedAtMs: [] };
}

function count(storm: Storm, answer: string): void {
  storm.answers[answer] = (storm.answers[answer] ?? 0) + 1;
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
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
        payer_account_id: target.payerAccountId,
        payee_account_id: target.payeeAccountId,
        amount: record.amountMinor,
        currency: target.currency,
      }),
    });
    const text = await response.text();
    count(storm, String(response.status));
    if (response.status !== 200 && response.status !== 201) return false;
    const status = (JSON.parse(text) as { status?: string }).status ?? '';
    if (!finalStatuses.has(status)) return false;
    record.outcomes.add(status);
    record.decidedAtMs ??= Date.now();
    storm.decidedAtMs.push(Date.now());
    return true;
  } catch {
    count(storm, controller.signal.aborted ? String(controller.signal.reason) : 'network');
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

function newKey(storm: Storm, amountMinorMax: number): KeyRecord {
  const record: KeyRecord = {
    key: `chaos-${randomBytes(8).toString('hex')}`,
    amountMinor: 1 + Math.floor(Math.random() * amountMinorMax),
    shape: pick(shapes),
    outcomes: new Set(),
    requests: 0,
    firstSentAtMs: Date.now(),
    decidedAtMs: null,
  };
  storm.keys.set(record.key, record);
  return record;
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
      const record = newKey(storm, options.amountMinorMax);
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
  const pending = [...storm.keys.values()].filter((record) => record.outcomes.size === 0);
  const lane = async (): Promise<void> => {
    for (let record = pending.pop(); record !== undefined; record = pending.pop()) {
      while (Date.now() < options.deadlineEpochMs && !(await sendOnce(storm, target, limits, record))) {
        await new Promise((resolve) => setTimeout(resolve, resendIntervalMs));
      }
    }
  };
  await Promise.all(Array.from({ length: limits.keysInFlight }, lane));
  return [...storm.keys.values()].filter((record) => record.outcomes.size === 0).map((record) => record.key);
}
