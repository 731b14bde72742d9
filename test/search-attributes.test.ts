import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { resolveTemporalCliPath } from '../src/stack/temporal-cli.js';
import { searchAttributeKindOf } from '../src/support/search-attribute-kinds.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import { SearchAttributesMissingError, assertChargeSearchAttributes } from '../src/worker/search-attributes-check.js';
import { chargeSearchAttributeKeys, startSearchAttributes } from '../workflows/search-attributes.js';
import { chargeBody, fundedTenant, ledgerIntent, newKey, newTenant, testDataConverter, useHarness, waitFor } from './support/harness.js';

const h = useHarness();
const run = promisify(execFile);

/** The `temporal` CLI against the test stack's server. */
async function temporalCli(...args: string[]): Promise<string> {
  const { stdout } = await run(resolveTemporalCliPath(), [...args, '--address', inject('stack').temporalAddress], { timeout: 30_000 });
  return stdout;
}

/** The ids a visibility query finds, once they are the ones expected (visibility may lag the workflows). */
async function listedIds(query: string, expected: string[]): Promise<string[]> {
  const wanted = [...expected].sort();
  let last: string[] = [];
  try {
    return await waitFor(
      async () => {
        last = [];
        for await (const execution of h.temporal.workflow.list({ query })) last.push(execution.workflowId);
        last.sort();
        return JSON.stringify(last) === JSON.stringify(wanted) ? last : null;
      },
      { timeoutMs: 20_000, what: query },
    );
  } catch {
    return last; // the assertion that follows shows what the query found instead
  }
}

describe('charge search attributes', () => {
  const tenant = { value: '' }; // set by beforeAll
  const keys = { succeeded: newKey('paid'), declined: newKey('declined'), reservedA: newKey('held-a'), reservedB: newKey('held-b'), cancelled: newKey('cancelled') };
  const id = (key: string): string => chargeWorkflowId(tenant.value, key);
  const orderOfReservedA = `order-${newKey('sa')}`;

  beforeAll(async () => {
    tenant.value = await fundedTenant(h, { label: 'search-attrs', payerMinor: 10_000 });
    const t = tenant.value;
    expect((await h.client.charge(t, keys.succeeded, chargeBody({ amount: 1_000 }))).charge.status).toBe('succeeded');
    expect((await h.client.charge(t, keys.declined, chargeBody({ amount: 50_000 }))).charge.status).toBe('declined');
    const manual = { capture: 'manual', amount: 1_000 };
    expect((await h.client.charge(t, keys.reservedA, chargeBody({ ...manual, order_id: orderOfReservedA }))).charge.status).toBe('reserved');
    expect((await h.client.charge(t, keys.reservedB, chargeBody(manual))).charge.status).toBe('reserved');
    expect((await h.client.charge(t, keys.cancelled, chargeBody(manual))).charge.status).toBe('reserved');
    expect((await h.client.cancelCharge(t, keys.cancelled)).status).toBe('cancelled');
  });

  afterAll(async () => {
    // Release what the tests held; the holds would otherwise wait out their TTL.
    for (const key of [keys.reservedA, keys.reservedB]) await h.client.cancelCharge(tenant.value, key).catch(() => undefined);
  });

  it('ChargeStatus names exactly the charges a person may have to act on: the holds waiting for their capture', async () => {
    const t = tenant.value;
    const waiting = [id(keys.reservedA), id(keys.reservedB)];
    const query = `ChargeStatus='reserved' AND ExecutionStatus='Running' AND ChargeTenant='${t}'`;
    expect(await listedIds(query, waiting), query).toEqual([...waiting].sort());
    // Decided charges are read from the ledger: automatic ones never wrote a status at all.
    for (const key of [keys.succeeded, keys.declined]) {
      const description = await h.temporal.workflow.getHandle(id(key)).describe();
      expect(description.typedSearchAttributes.get(chargeSearchAttributeKeys.status), key).toBeUndefined();
    }
    expect(await listedIds(`ChargeStatus='succeeded' AND ChargeTenant='${t}'`, [])).toEqual([]);
  });

  it('the identifying attributes are set at start and find every charge; the outcome is ExecutionStatus and the ledger', async () => {
    const t = tenant.value;
    expect(await listedIds(`ChargeTenant='${t}'`, Object.values(keys).map(id))).toHaveLength(5);
    expect(await listedIds(`ChargeOrderId='${orderOfReservedA}'`, [id(keys.reservedA)])).toEqual([id(keys.reservedA)]);
    const manualClosed = [id(keys.cancelled)];
    expect(await listedIds(`ChargeCaptureMode='manual' AND ExecutionStatus='Completed' AND ChargeTenant='${t}'`, manualClosed)).toEqual(manualClosed);
    const description = await h.temporal.workflow.getHandle(id(keys.reservedA)).describe();
    const sa = (key: keyof typeof chargeSearchAttributeKeys) => description.typedSearchAttributes.get(chargeSearchAttributeKeys[key]);
    expect({ tenant: sa('tenant'), order: sa('orderId'), payer: sa('payerAccountId'), amount: sa('amountMinor'), currency: sa('currency'), capture: sa('captureMode'), status: sa('status') }).toEqual({
      tenant: t,
      order: orderOfReservedA,
      payer: 'payer',
      amount: 1_000,
      currency: 'USD',
      capture: 'manual',
      status: 'reserved',
    });
  });

  it('the temporal CLI finds the holds waiting for capture with the documented query', async () => {
    const t = tenant.value;
    const reserved = [id(keys.reservedA), id(keys.reservedB)];
    const query = `ChargeStatus='reserved' AND ExecutionStatus='Running' AND ChargeTenant='${t}'`;
    await listedIds(query, reserved); // visible to the API first, so the CLI's one run sees them too
    const out = await temporalCli('workflow', 'list', '--namespace', 'default', '--query', query);
    for (const workflowId of reserved) expect(out).toContain(workflowId);
    for (const key of [keys.succeeded, keys.declined, keys.cancelled]) expect(out).not.toContain(id(key));
  });
});

describe('worker start against a namespace without the search attributes', () => {
  const namespace = `no-attrs-${newKey('ns')}`.toLowerCase();
  let connection: NativeConnection | undefined;

  beforeAll(async () => {
    await temporalCli('operator', 'namespace', 'create', '--namespace', namespace, '--retention', '24h');
    connection = await NativeConnection.connect({ address: inject('stack').temporalAddress });
    // A new namespace reaches the frontend's cache within seconds.
    await waitFor(
      async () => connection!.operatorService.listSearchAttributes({ namespace }).then(() => true, () => false),
      { what: `namespace ${namespace}` },
    );
  });
  afterAll(async () => {
    await connection?.close();
  });

  it('refuses to start, naming the missing attributes and the commands that register them', async () => {
    const refused = await createChargeWorker({
      connection: connection!,
      namespace,
      ledger: h.pool,
      taskQueue: `sa-${newKey('q')}`,
      holdSweeper: false,
      workflowBundle: { codePath: inject('stack').workflowBundlePath },
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SearchAttributesMissingError);
    const message = (refused as Error).message;
    expect(message).toContain(`namespace ${namespace}`);
    for (const key of Object.values(chargeSearchAttributeKeys)) {
      expect(message).toContain(`${key.name} (missing)`);
      expect(message).toContain(`temporal operator search-attribute create --namespace ${namespace} --name ${key.name} --type ${searchAttributeKindOf[key.type]}`);
    }
  });

  it('without the check, the server refuses the start that carries them', async () => {
    const client = new Client({ connection: h.connection, namespace, dataConverter: testDataConverter() });
    const t = newTenant('sa-refused');
    const refused = await client.workflow
      .start('ChargeWorkflow', {
        taskQueue: 'nobody-polls',
        workflowId: chargeWorkflowId(t, 'k'),
        args: [],
        typedSearchAttributes: startSearchAttributes(ledgerIntent(t, 'k', 'payer', 'payee', 100)),
      })
      .catch((e: unknown) => e);
    // The client's error says only "Failed to start Workflow"; its cause names the attribute.
    expect(refused).toBeInstanceOf(Error);
    const cause = (refused as Error).cause as Error | undefined;
    expect(cause?.message).toMatch(/search attribute (ChargeTenant|ChargeOrderId|ChargePayerAccountId|ChargeAmountMinor|ChargeCurrency|ChargeCaptureMode)/i);
  });

  it('a wrong type is named as such, and once the printed commands ran the check passes', async () => {
    await temporalCli('operator', 'search-attribute', 'create', '--namespace', namespace, '--name', 'ChargeStatus', '--type', 'Text');
    const wrong = await waitFor(
      async () => {
        const error = await assertChargeSearchAttributes(connection!, namespace).catch((e: unknown) => e);
        return error instanceof SearchAttributesMissingError && error.message.includes('ChargeStatus (registered as Text') ? error : null;
      },
      { what: 'ChargeStatus registered as Text' },
    );
    expect(wrong.message).toContain('ChargeTenant (missing)');
    expect(wrong.message).toContain('search-attribute remove');

    await temporalCli('operator', 'search-attribute', 'remove', '--namespace', namespace, '--name', 'ChargeStatus', '--yes');
    for (const key of Object.values(chargeSearchAttributeKeys)) {
      await temporalCli('operator', 'search-attribute', 'create', '--namespace', namespace, '--name', key.name, '--type', searchAttributeKindOf[key.type]);
    }
    await waitFor(async () => assertChargeSearchAttributes(connection!, namespace).then(() => true, () => false), {
      what: 'the check to pass once registered',
    });
  });
});
