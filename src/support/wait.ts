import { connect } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

/**
 * Polls `probe` until it returns true, `deadlineMs` (a Date.now() timestamp) passes, or `signal`
 * aborts / `shouldAbort` says so between probes (e.g. the server process died, so waiting longer
 * is pointless). Only `signal` can cut a hanging probe short. Errors thrown by `probe`
 * count as "not yet"; the last one is returned so callers can put it in their own error.
 */
export async function pollUntil(
  probe: () => Promise<boolean>,
  opts: { deadlineMs: number; intervalMs?: number; signal?: AbortSignal; shouldAbort?: () => boolean },
): Promise<{ ok: boolean; lastError: unknown }> {
  const intervalMs = opts.intervalMs ?? 100;
  const signal = opts.signal;
  // A probe may hang (e.g. a connect timeout); abort must not wait for it.
  const aborted =
    signal === undefined
      ? null
      : new Promise<'aborted'>((resolve) => {
          if (signal.aborted) resolve('aborted');
          else signal.addEventListener('abort', () => resolve('aborted'), { once: true });
        });
  let lastError: unknown = undefined;
  for (;;) {
    if (signal?.aborted === true || opts.shouldAbort?.() === true) return { ok: false, lastError };
    try {
      const result = await (aborted === null ? probe() : Promise.race([probe(), aborted]));
      if (result === 'aborted') return { ok: false, lastError };
      if (result) return { ok: true, lastError: undefined };
    } catch (err) {
      lastError = err;
    }
    const remainingMs = opts.deadlineMs - Date.now();
    if (remainingMs <= 0) return { ok: false, lastError };
    await delay(Math.min(intervalMs, remainingMs), undefined, signal === undefined ? {} : { signal }).catch((error: unknown) => {
      // An abort ends the wait (checked at the top of the loop); nothing else should end a timer.
      if ((error as Error).name !== 'AbortError') throw error;
    });
  }
}

/** True when something accepts TCP connections on host:port right now. */
export async function isPortAccepting(port: number, host = '127.0.0.1', timeoutMs = 1000): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = connect({ host, port });
    const finish = (accepting: boolean): void => {
      socket.removeAllListeners();
      socket.destroy();
      resolve(accepting);
    };
    socket.setTimeout(timeoutMs, () => finish(false));
    socket.once('connect', () => finish(true));
    socket.once('error', () => finish(false));
  });
}

/** Resolves with `promise`, or rejects with `onTimeout()` after `timeoutMs`. */
export async function withTimeout<T>(promise: Promise<T>, timeoutMs: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
