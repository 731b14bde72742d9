import type { LedgerPool } from '../../src/ledger/pool.js';
import { createEndpoint, recordAttempt, requestRedelivery } from '../../src/ledger/webhook-endpoints.js';
import { webhookEndpointToWire } from '../../src/service/webhook-endpoints.js';
import { newKey, openAccount } from './harness.js';

/**
 * A real `webhook_endpoint.disabled` event in the tenant, written as the deliverer writes it: an
 * endpoint subscribed to deposits, a deposit, a delivery of its event (asked for), and
 * that delivery's attempt recorded as answered 410 Gone, which disables the endpoint and writes the
 * event in the attempt's transaction (src/ledger/webhook-endpoints.ts, recordAttempt). Also the
 * deposit's event, which every role sees. No HTTP is sent: the URL is never reached.
 */
export async function disabledEndpointEvent(
  pool: LedgerPool,
  tenant: string,
): Promise<{ endpointId: string; disabledEventId: string; depositEventId: string }> {
  const { endpoint } = await createEndpoint(pool, { tenant, url: 'https://hooks.example.com/gone', enabledEvents: ['deposit.credited'], description: null }, 16);
  await openAccount(pool, tenant, newKey('we-vis').replace(/[^A-Za-z0-9_.:-]/g, '-').slice(0, 64), { depositMinor: 100 });
  const deposited = await pool.query<{ id: string }>("SELECT id FROM events WHERE tenant = $1 AND type = 'deposit.credited' ORDER BY seq DESC LIMIT 1", [tenant]);
  const depositEventId = deposited.rows[0]!.id;
  // A delivery row of it (no deliverer runs here to make one from the endpoint's cursor).
  const requested = await requestRedelivery(pool, tenant, endpoint.id, depositEventId);
  if (typeof requested !== 'object') throw new Error(`no delivery of ${depositEventId} to ${endpoint.id}: ${requested}`);
  const { deliveryId } = requested;
  const { disabled } = await recordAttempt(
    pool,
    {
      deliveryId,
      endpointId: endpoint.id,
      eventId: depositEventId,
      attempt: 1,
      owner: 'test',
      startedAt: new Date(),
      durationMs: 1,
      statusCode: 410,
      error: null,
      delivered: false,
      gone: true,
      retryAt: null,
      disableAfterFailingMs: 3_600_000,
    },
    webhookEndpointToWire,
  );
  if (disabled !== 'gone') throw new Error(`endpoint ${endpoint.id} was not disabled by the 410 (${String(disabled)})`);
  const event = await pool.query<{ id: string }>(
    "SELECT id FROM events WHERE tenant = $1 AND type = 'webhook_endpoint.disabled' AND object_id = $2",
    [tenant, endpoint.id],
  );
  return { endpointId: endpoint.id, disabledEventId: event.rows[0]!.id, depositEventId };
}
