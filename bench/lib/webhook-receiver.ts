import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { terminate } from '../../src/support/child-process.js';

/** What the receiver process tells the bench. */
export type ReceiverMessage = { type: 'listening'; port: number } | ReceiverReport | ReceiverCount;

/** How many distinct webhook-ids the receiver has had, and duplicates so far. */
export interface ReceiverCount {
  type: 'count';
  unique: number;
  duplicates: number;
}

/** The webhook-ids first seen since the last report, each with its arrival (ms since the epoch), and duplicates so far. */
export interface ReceiverReport {
  type: 'report';
  arrivals: [string, number][];
  duplicates: number;
}

/** How long the receiver process may take to listen, or to answer a report, milliseconds. */
const receiverAnswerBudgetMs = 30_000;

const receiverSource = fileURLToPath(new URL('./webhook-receiver-process.ts', import.meta.url));

/** The bench's side of the receiver process (webhook-receiver-process.ts). */
export class LoopbackReceiver {
  /** Every webhook-id received, with when it first arrived. */
  readonly firstSeenMs = new Map<string, number>();
  duplicates = 0;

  private constructor(
    private readonly child: ChildProcess,
    readonly url: string,
  ) {}

  /** Forked with the bench's own Node flags (tsx's loader), so the TypeScript source runs as it is. */
  static async start(): Promise<LoopbackReceiver> {
    const child = fork(receiverSource, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    try {
      const listening = await nextMessage(child, 'listening');
      return new LoopbackReceiver(child, `http://127.0.0.1:${listening.port}/hooks`);
    } catch (error) {
      await terminate(child, { signal: 'SIGTERM', graceMs: 2_000 });
      throw error;
    }
  }

  /** The receiver process's id (its CPU is the receiver's, not the service's). */
  get pid(): number {
    return this.child.pid!;
  }

  /** Brings firstSeenMs and duplicates up to date with what the receiver has had so far. */
  async refresh(): Promise<void> {
    const answer = nextMessage(this.child, 'report');
    this.child.send({ type: 'report' });
    const report = await answer;
    for (const [id, at] of report.arrivals) if (!this.firstSeenMs.has(id)) this.firstSeenMs.set(id, at);
    this.duplicates = report.duplicates;
  }

  /** How many distinct webhook-ids have arrived so far: one small message each way, nothing else. */
  async uniqueCount(): Promise<number> {
    const answer = nextMessage(this.child, 'count');
    this.child.send({ type: 'count' });
    return (await answer).unique;
  }

  async stop(): Promise<void> {
    await terminate(this.child, { signal: 'SIGTERM', graceMs: 5_000 });
  }
}

function nextMessage<T extends ReceiverMessage['type']>(child: ChildProcess, type: T): Promise<Extract<ReceiverMessage, { type: T }>> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => settle(new Error(`the webhook receiver sent no '${type}' within ${receiverAnswerBudgetMs} ms`)), receiverAnswerBudgetMs);
    const onMessage = (message: ReceiverMessage): void => {
      if (message.type === type) settle(null, message as Extract<ReceiverMessage, { type: T }>);
    };
    const onExit = (code: number | null): void => settle(new Error(`the webhook receiver exited (code ${code}) before '${type}'`));
    function settle(error: Error | null, message?: Extract<ReceiverMessage, { type: T }>): void {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (error) reject(error);
      else resolve(message!);
    }
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}
