/**
 * Records real workflow histories (one per path through the workflow code) into test/histories/,
 * for the replay test that guards every workflow change: a deployment must replay charges that
 * are in flight. Run it when a new path appears, never to "fix" a failing replay: a failing replay
 * means the change needs `patched()`.
 *
 *   npx tsx scripts/record-workflow-histories.ts
 */
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, Connection } from '@temporalio/client';
import protoModule from '@temporalio/proto';

const proto = protoModule.temporal;
import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { ChargeClient } from '../src/client/charge-client.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { refundWorkflowId } from '../src/domain/refund.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { startLocalStack } from '../src/stack/stack.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';

Runtime.install({ logger: new DefaultLogger('WARN') });
const historiesDir = fileURLToPath(new URL('../test/histories', import.meta.url));
const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-record-'));
await chmod(dataDir, 0o711);
const stack = await startLocalStack({ dataDir, temporalUiPort: null });
const pool = createLedgerPool({ databaseUrl: stack.databaseUrl });
const nativeConnection = await NativeConnection.connect({ address: stack.temporalAddress });
const connection = await Connection.connect({ address: stack.temporalAddress });
const temporal = new Client({ connection });
try {
  await migrateLedger(stack.databaseUrl);
  const worker = await createChargeWorker({
    connection: nativeConnection,
    namespace: 'default',
    ledger: pool,
    hooks: {
      beforeStep(step, _tenant, key) {
        if (step === 'confirm' && key.startsWith('confirm-fails')) throw new Error('injected: capture refused');
      },
    },
  });
  await worker.runUntil(async () => {
    const tenant = 'replay';
    await createAccount(pool, { tenant, id: 'payer', currency: 'USD', allowOverdraft: false });
    await createAccount(pool, { tenant, id: 'payee', currency: 'USD', allowOverdraft: false });
    await deposit(pool, tenant, 'payer', 1_000_000, 'opening');
    const policy = { activityStartToCloseMs: 2_000, tryBudgetMs: 5_000, confirmBudgetMs: 3_000, holdTtlMs: 60_000 };
    const client = new ChargeClient({ temporal, ledger: pool, policy, amountMinorMax: 1e12, waitBudgetMs: 60_000 });
    const expiring = new ChargeClient({ temporal, ledger: pool, policy: { ...policy, holdTtlMs: 500 }, amountMinorMax: 1e12, waitBudgetMs: 60_000 });
    const body = (amount: number, capture = 'automatic') => ({
      order_id: `order-${amount}`,
      payer_account_id: 'payer',
      payee_account_id: 'payee',
      amount,
      currency: 'USD',
      capture,
    });

    const recorded: Array<[name: string, workflowId: string]> = [];
    const record = (name: string, key: string) => recorded.push([name, chargeWorkflowId(tenant, key)]);

    await client.charge(tenant, 'automatic-succeeded', body(1_000));
    record('charge-automatic-succeeded', 'automatic-succeeded');
    await client.charge(tenant, 'declined', body(10_000_000));
    record('charge-declined', 'declined');
    await client.charge(tenant, 'manual-captured', body(2_000, 'manual'));
    await client.captureCharge(tenant, 'manual-captured', 1_500);
    record('charge-manual-captured-partially', 'manual-captured');
    await client.charge(tenant, 'manual-cancelled', body(3_000, 'manual'));
    await client.cancelCharge(tenant, 'manual-cancelled');
    record('charge-manual-cancelled', 'manual-cancelled');
    const { handle } = await expiring.startCharge(tenant, 'manual-expired', body(4_000, 'manual'));
    await handle.result();
    record('charge-manual-hold-expired', 'manual-expired');
    await client.charge(tenant, 'confirm-fails', body(5_000));
    record('charge-confirm-failed-compensated', 'confirm-fails');
    await client.refund(tenant, 'automatic-succeeded', 'refund-1', { amount: 400 });
    recorded.push(['refund-partial', refundWorkflowId(tenant, 'automatic-succeeded', 'refund-1')]);

    for (const [name, workflowId] of recorded) {
      const history = await temporal.workflow.getHandle(workflowId).fetchHistory();
      // Binary protobuf: the exact bytes Temporal serves, with no JSON mapping in between.
      await writeFile(join(historiesDir, `${name}.history.pb`), proto.api.history.v1.History.encode(history).finish());
      process.stdout.write(`recorded ${name} (${history.events?.length ?? 0} events)\n`);
    }
  });
} finally {
  await connection.close();
  await nativeConnection.close();
  await pool.end();
  await stack.stop();
  await rm(dataDir, { recursive: true, force: true });
}
