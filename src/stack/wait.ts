import { connect } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';

/**
 * Polls `probe` until it returns true or `deadlineMs` (a Date.now() timestamp) passes.
 * Returns false on deadline; errors thrown by `probe` count as "not yet" and the last one is
 * reported through `lastError` so the caller can include it in its own error.
 */
export async function pollUntil(
  probe: () => Promise<boolean>,
  opts: { deadlineMs: number; intervalMs?: number; shouldAbort?: () => boolean },
): Promise<{ ok: boolean; lastError: unknown }> {
  const intervalMs = opts.intervalMs ?? 100;
  let lastError: unknown = undefined;
  for (;;) {
    if (opts.shouldAbort?.() === true) return { ok: false, lastError };
    try {
      if (await probe()) return { ok: true, lastError: undefined };
    } catch (err) {
      lastError = err;
    }
    const remainingMs = opts.deadlineMs - Date.now();
    if (remainingMs <= 0) return { ok: false, lastError };
    await delay(Math.min(intervalMs, remainingMs));
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
