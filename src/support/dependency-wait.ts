import { setTimeout as delay } from 'node:timers/promises';
import { maskUrlPassword } from './redact.js';

/**
 * How long a process waits for Temporal or PostgreSQL at start before it gives up. Bounded on
 * purpose: a process that waits for ever hides a wrong address; one that exits at once turns a
 * dependency that starts a few seconds later than this process into a crash loop.
 */
export interface DependencyWaitLimits {
  /** Delay after the first failed attempt; doubled after each further one. */
  initialDelayMs: number;
  /** Ceiling of the delay between attempts: also the worst lag between the dependency coming back and us noticing. */
  maxDelayMs: number;
  /** Total time spent waiting before the process gives up and exits. */
  budgetMs: number;
}

/** Spread of each delay (±20%), so replicas that lost the same dependency do not retry in step. */
const jitterFraction = 0.2;

export class DependencyWaitError extends Error {
  constructor(
    /** What was waited for, as the service's errors name it: `temporal`, `database`. */
    readonly dependency: string,
    message: string,
    options: { cause: unknown },
  ) {
    super(message, options);
  }
}

export interface DependencyWaitTarget {
  /** What is waited for, as the service's errors name it: `temporal`, `database`. */
  dependency: string;
  /** Where it is expected, with any password already masked (see {@link maskDatabaseUrl}). */
  address: string;
  /** What this process needs from it, for the log: "migrate the ledger", "connect". */
  purpose: string;
}

/**
 * Runs `attempt` until it succeeds, retrying failures that `isTransient` accepts with bounded
 * exponential backoff, and logging each wait: which dependency, where, which attempt, why, and when
 * the next try is. A failure that waiting cannot cure (wrong password, bad SQL) is thrown at once.
 */
export async function waitForDependency<T>(
  target: DependencyWaitTarget,
  attempt: () => Promise<T>,
  options: {
    limits: DependencyWaitLimits;
    isTransient: (error: unknown) => boolean;
    log: (line: string) => void;
    signal?: AbortSignal;
  },
): Promise<T> {
  const { limits, log } = options;
  const startedAtMs = Date.now();
  for (let attemptNumber = 1; ; attemptNumber++) {
    try {
      const value = await attempt();
      if (attemptNumber > 1) {
        log(`${target.dependency} at ${target.address} is back: ${target.purpose} succeeded on attempt ${attemptNumber} after ${Date.now() - startedAtMs} ms`);
      }
      return value;
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const waitedMs = Date.now() - startedAtMs;
      // No budget means "do not wait": one-shot commands fail at once with the error itself.
      if (!options.isTransient(error) || limits.budgetMs <= 0) throw error;
      const baseDelayMs = Math.min(limits.maxDelayMs, limits.initialDelayMs * 2 ** (attemptNumber - 1));
      const delayMs = Math.round(baseDelayMs * (1 - jitterFraction + Math.random() * 2 * jitterFraction));
      const remainingMs = limits.budgetMs - waitedMs;
      if (remainingMs <= 0 || delayMs > remainingMs) {
        throw new DependencyWaitError(
          target.dependency,
          `gave up waiting for ${target.dependency} at ${target.address} to ${target.purpose}: ` +
            `${attemptNumber} attempts over ${waitedMs} ms (budget ${limits.budgetMs} ms); last error: ${describeError(error)}`,
          { cause: error },
        );
      }
      log(
        `waiting for ${target.dependency} at ${target.address} to ${target.purpose}: attempt ${attemptNumber} failed ` +
          `(${describeError(error)}); next retry in ${delayMs} ms (waited ${waitedMs} of ${limits.budgetMs} ms)`,
      );
      await delay(delayMs, undefined, options.signal ? { signal: options.signal } : {});
    }
  }
}

/** The address of a PostgreSQL URL fit for a log line: the password replaced by ***. */
export function maskDatabaseUrl(url: string): string {
  return maskUrlPassword(url, 'DATABASE_URL');
}

function describeError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  // An AggregateError (pg tries each address of a host name) has an empty message; its parts say what happened.
  if (error instanceof AggregateError && error.message === '') return error.errors.map((e) => describeError(e)).join('; ');
  const code = (error as { code?: unknown }).code;
  const text = error.message || error.name;
  const withCode = code !== undefined && !text.includes(String(code)) ? `${String(code)}: ${text}` : text;
  // The SDK's wrappers ("Failed to connect to Temporal server") hide the reason in their cause.
  return error.cause instanceof Error ? `${withCode} <- ${describeError(error.cause)}` : withCode;
}
