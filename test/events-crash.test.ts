import { spawn } from 'node:child_process';
import { describe, expect, inject, it } from 'vitest';
import { readCharge } from '../src/ledger/charges.js';
import { readObjectEvents } from '../src/ledger/events.js';
import { renderEvent } from '../src/service/events.js';
import { chargeToWire } from '../src/service/wire.js';
import type { ChargeHandle } from '../src/service/start-or-attach.js';
import { chargeBody, expectLedgerInvariants, fundedTenant, newKey, startTestWorker, useHarness, waitFor } from './support/harness.js';

/**
 * "Kill the process at every step boundary and compare the ledger with the outbox" (docs/events.md):
 * real Temporal and PostgreSQL, a worker subprocess SIGKILLed at each boundary of each ledger step
 * in turn (before Try, after Try committed, before and after Confirm, before and after Cancel), one
 * new crashing worker after another while charges of every outcome are in flight, so earlier charges
 * die again at later boundaries. A healthy worker then finishes everything. Every charge must have
 * exactly the events of the path it took (no change without its event, no event without its change,
 * none twice), numbered 1, 2, 3, the last one rendering the charge as the ledger holds it, and the
 * ledger invariants, the outbox's included, must hold.
 */
const h = useHarness();

const boundaries = ['before:try', 'after:try', 'before:confirm', 'after:confirm', 'before:cancel', 'after:cancel'] as const;

/** The events each final status allows, in order: a cancel may come before any Try (the tombstone). */
const pathsByStatus: Record<string, string[][]> = {
  succeeded: [['charge.reserved', 'charge.succeeded']],
  declined: [['charge.declined']],
  cancelled: [['charge.reserved', 'charge.cancelled'], ['charge.cancelled']],
};

async function crashingWorker(taskQueue: string, crashAt: string): Promise<{ killed: Promise<NodeJS.Signals | null>; output: () => string }> {
  const stack = inject('stack');
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/events-crash-worker.ts'], {
    env: {
      ...process.env,
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: stack.databaseUrl,
      TASK_QUEUE: taskQueue,
      WORKFLOW_BUNDLE_PATH: stack.workflowBundlePath,
      CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFile,
      CRASH_AT: crashAt,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const killed = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
  await waitFor(async () => output.includes('worker ready'), { timeoutMs: 90_000, what: `the worker crashing at ${crashAt} to start` });
  return { killed, output: () => output };
}

describe('the outbox across worker SIGKILLs at every step boundary', () => {
  it('every charge ends with exactly the events of its path, in sequence, and the ledger and the outbox match', async () => {
    const taskQueue = `events-crash-${newKey('q')}`;
    const tenant = await fundedTenant(h, { label: 'events-crash', payerMinor: 1_000_000 });
    // Short activity timeouts so a dead worker's step is retried soon; manual holds expire in 4 s,
    // so Cancel (the expiry's) runs without anyone having to reach a dead worker.
    const client = h.clientFor({ taskQueue, policy: { activityStartToCloseMs: 2_000, holdTtlMs: 4_000 } });
    const handles: Array<{ key: string; handle: ChargeHandle }> = [];
    const start = async (label: string, body: Record<string, unknown>) => {
      const key = newKey(label);
      handles.push({ key, handle: (await client.startCharge(tenant, key, chargeBody(body))).handle });
    };
    const kills: string[] = [];
    for (const boundary of boundaries) {
      const worker = await crashingWorker(taskQueue, boundary);
      // Each round adds charges of every outcome: automatic (Try, Confirm), declined (Try), and a
      // manual hold left to expire (Try, then Cancel).
      await start('auto', { amount: 1_000 });
      await start('auto', { amount: 1_100 });
      await start('declined', { amount: 5_000_000 });
      await start('expires', { amount: 1_200, capture: 'manual' });
      const signal = await Promise.race([
        worker.killed,
        new Promise<'alive'>((resolve) => setTimeout(() => resolve('alive'), 60_000).unref()),
      ]);
      expect(signal, `the worker crashing at ${boundary}: ${worker.output()}`).toBe('SIGKILL');
      kills.push(worker.output().trim().split('\n').at(-1)!);
    }
    expect(kills).toHaveLength(boundaries.length);
    for (const [i, boundary] of boundaries.entries()) expect(kills[i]).toContain(boundary.replace(':', ' '));

    const healthy = await startTestWorker({ taskQueue, pool: h.pool, holdSweeper: false });
    try {
      for (const { handle } of handles) await handle.result();
    } finally {
      await healthy.stop();
    }

    const statuses = new Map<string, number>();
    for (const { key } of handles) {
      const row = (await readCharge(h.pool, tenant, key))!;
      const status = row.charge.status;
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      const events = await readObjectEvents(h.pool, tenant, row.charge.id);
      const types = events.map((event) => event.type);
      expect(pathsByStatus[status], `${key} ended ${status} with events ${types.join(', ')}`).toContainEqual(types);
      expect(events.map((event) => event.object_sequence)).toEqual(types.map((_, i) => i + 1));
      // Each event's object is in the state its type names, and the last is the charge as it is now.
      for (const event of events) expect(`charge.${(renderEvent(event).data.object as { status: string }).status}`).toBe(event.type);
      expect(renderEvent(events.at(-1)!, { audit: true }).data.object).toEqual(chargeToWire(row.charge, { audit: true }));
    }
    expect(Object.fromEntries(statuses)).toEqual({ succeeded: 12, declined: 6, cancelled: 6 });
    await expectLedgerInvariants(h.pool, tenant);
  }, 600_000);
});
