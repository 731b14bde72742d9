import { Worker } from 'node:worker_threads';
import type { ChargeguardConfig } from '../config.js';
import { startWebhookDeliverer } from './webhook-deliverer.js';

export interface DelivererThreadData {
  config: ChargeguardConfig;
  databaseUrl: string;
  /** Deliver these tenants' events only (tests sharing a database); every tenant's when absent. */
  onlyTenants?: readonly string[];
}
export type DelivererThreadRequest = { type: 'stop' };
export type DelivererThreadMessage = { type: 'started' } | { type: 'log'; line: string } | { type: 'stopped' };

/** How long a stop waits for the thread to finish its attempts in flight before terminating it, milliseconds. */
const threadStopMs = 30_000;
/** How long a thread that died (an uncaught error) waits before it is started again, milliseconds. */
const threadRestartDelayMs = 1_000;

/**
 * The thread's entry: the compiled module; or, run from the TypeScript sources (tsx, vitest), a
 * line that registers tsx's loader in the new thread first (a thread does not inherit its hooks).
 */
function threadEntry(): { source: URL | string; eval: boolean } {
  if (!import.meta.url.endsWith('.ts')) return { source: new URL('./webhook-deliverer-thread.js', import.meta.url), eval: false };
  const source = new URL('./webhook-deliverer-thread.ts', import.meta.url).href;
  const loader = import.meta.resolve('tsx/esm/api');
  return { source: `import(${JSON.stringify(loader)}).then(({ register }) => { register(); return import(${JSON.stringify(source)}); })`, eval: true };
}

interface RunningThread {
  thread: Worker;
  /** Resolves when the thread has stopped its deliverer on request, or has exited for any reason. */
  ended: Promise<void>;
  /** Resolves (with the exit code) when the thread has exited. */
  exited: Promise<number>;
}

/** One thread, from start to exit: resolves once it has started its deliverer. */
async function startThread(data: DelivererThreadData, log: (line: string) => void): Promise<RunningThread> {
  const entry = threadEntry();
  const thread = new Worker(entry.source, { eval: entry.eval, workerData: data, name: 'webhook-deliverer' });
  const exited = new Promise<number>((resolve) => thread.once('exit', resolve));
  let markStopped: () => void = () => {};
  const stoppedOnRequest = new Promise<void>((resolve) => (markStopped = resolve));
  await new Promise<void>((resolve, reject) => {
    thread.on('message', (message: DelivererThreadMessage) => {
      if (message.type === 'started') resolve();
      else if (message.type === 'log') log(message.line);
      else markStopped();
    });
    thread.once('error', reject);
    void exited.then((code) => reject(new Error(`the webhook deliverer's thread exited (code ${code}) before it started`)));
  });
  return { thread, ended: Promise.race([stoppedOnRequest, exited.then(() => undefined)]), exited };
}

export interface DelivererThreadHandle {
  /** Stops the deliverer and ends its thread (terminated after threadStopMs). */
  stop(): Promise<void>;
  /** The thread running now; null between a thread's death and its restart (diagnostics, tests). */
  currentThread(): Worker | null;
}

/**
 * The worker process's deliverer on a thread of its own (WEBHOOK_DELIVERY=thread, the default): the
 * same deliverer as in-line (webhook-deliverer.ts), but its HTTP work, signing and rendering run on
 * another event loop and V8 heap than the charges' activities, so neither waits for the other's
 * turns or garbage collection, and the machine's other core can take it (docs/webhook-endpoints.md,
 * Where deliveries run). A thread that dies (an uncaught error) is logged and started again after
 * threadRestartDelayMs, until it starts: deliveries pause, nothing is lost (no state lives in it).
 */
export async function startWebhookDelivererThread(
  config: ChargeguardConfig,
  databaseUrl: string,
  options: { log: (line: string) => void; onlyTenants?: readonly string[] },
): Promise<DelivererThreadHandle> {
  const data: DelivererThreadData = { config, databaseUrl, ...(options.onlyTenants ? { onlyTenants: options.onlyTenants } : {}) };
  let current: RunningThread | null = await startThread(data, options.log);
  let stopping = false;
  let restartTimer: NodeJS.Timeout | undefined;
  const restartLater = (): void => {
    restartTimer = setTimeout(() => {
      startThread(data, options.log).then(
        (next) => {
          current = next;
          if (stopping) void next.thread.terminate();
          else watch(next);
        },
        (error: unknown) => {
          options.log(`the webhook deliverer's thread did not start again (${(error as Error).message}); trying again in ${threadRestartDelayMs} ms`);
          if (!stopping) restartLater();
        },
      );
    }, threadRestartDelayMs);
  };
  const watch = (running: RunningThread): void => {
    running.thread.once('error', (error) => options.log(`the webhook deliverer's thread failed: ${error.message}`));
    void running.exited.then((code) => {
      if (stopping) return;
      current = null;
      options.log(`the webhook deliverer's thread exited (code ${code}); starting it again in ${threadRestartDelayMs} ms (its unrecorded attempts are sent again: duplicates, never a gap)`);
      restartLater();
    });
  };
  watch(current);
  return {
    currentThread: () => current?.thread ?? null,
    stop: async () => {
      stopping = true;
      clearTimeout(restartTimer);
      const running = current;
      if (running === null) return;
      running.thread.postMessage({ type: 'stop' } satisfies DelivererThreadRequest);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), threadStopMs)));
      const outcome = await Promise.race([running.ended.then(() => 'done' as const), late]);
      clearTimeout(timer);
      if (outcome === 'late') options.log(`the webhook deliverer's thread did not stop within ${threadStopMs} ms; terminated (its unrecorded attempts are sent again: duplicates, never a gap)`);
      await running.thread.terminate();
    },
  };
}

/** The deliverer where WEBHOOK_DELIVERY puts it: a thread of its own (`thread`), this event loop (`on`), or none (`off`: null). */
export async function startConfiguredDeliverer(
  config: ChargeguardConfig,
  databaseUrl: string,
  options: { log: (line: string) => void },
): Promise<{ stop(): Promise<void> } | null> {
  if (config.WEBHOOK_DELIVERY === 'thread') return startWebhookDelivererThread(config, databaseUrl, options);
  return startWebhookDeliverer(config, databaseUrl, options);
}
