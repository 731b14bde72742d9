import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyWebhookDelivery } from '../src/client/http/index.js';
import { deliveryCounts } from '../src/ledger/webhook-endpoints.js';
import { WebhookDeliverer } from '../src/outbound/deliverer.js';
import { renderEvent } from '../src/service/events.js';
import { fundedApiTenant, useApi } from './support/api.js';
import { fastDelivererSettings } from './support/deliverer-settings.js';
import { chargeBody, newKey, waitFor } from './support/harness.js';
import { startReceiver, type Receiver } from './support/receivers.js';

// The shared worker runs the charges; this API allows the loopback receiver.
const api = useApi({ env: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_LOOPBACK: 'true' } });

let rx: Receiver;
beforeAll(async () => {
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
});

describe('one charge, one signed delivery, end to end', () => {
  it('POST /v1/charges -> the outbox event in its transaction -> the fan-out -> a delivery signed per Standard Webhooks, whose object is what GET shows', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'wd-e2e', payerMinor: 10_000 });
    const adminKey = await api.keyFor(tenant, 'admin');
    const endpoint = await api.request('/v1/webhook-endpoints', { apiKey: adminKey, headers: { 'idempotency-key': newKey('e2e-endpoint') }, body: { url: rx.url, enabled_events: ['charge.succeeded'] } });
    expect(endpoint.status, endpoint.text).toBe(201);
    const deliverer = new WebhookDeliverer({
      pool: api.context.ledger,
      settings: { ...fastDelivererSettings, retry: { firstDelayMs: 50, maxDelayMs: 200, windowMs: 60_000 }, leaseMs: 10_000, concurrency: 4 },
      render: (row) => renderEvent(row),
      renderEndpoint: (e) => e,
      onlyTenants: [tenant],
      log: () => {},
    });
    deliverer.start();
    try {
      const key = newKey('e2e');
      const charge = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 2_500 }), headers: { 'idempotency-key': key } });
      expect(charge.status, charge.text).toBe(201);
      expect(charge.body.status).toBe('succeeded');
      await waitFor(async () => (await deliveryCounts(api.context.ledger, endpoint.body.id)).delivered === 1, { what: 'the delivery', timeoutMs: 30_000 });
      expect(rx.received).toHaveLength(1);
      const request = rx.received[0]!;
      const event = verifyWebhookDelivery(endpoint.body.secret, request.body, request.headers);
      expect(event).toMatchObject({ object: 'event', type: 'charge.succeeded', id: request.headers['webhook-id'] });
      const read = await api.request(`/v1/charges/${encodeURIComponent(key)}`, { apiKey });
      expect(event.data.object).toEqual(read.body);
      // The same event as GET /v1/events/{id} answers it.
      const listed = await api.request(`/v1/events/${event.id}`, { apiKey });
      expect(listed.status, listed.text).toBe(200);
      expect(JSON.parse(request.body)).toEqual(listed.body);
      // The charge's other events (reserved) are not subscribed: exactly one delivery, one attempt.
      expect(await deliveryCounts(api.context.ledger, endpoint.body.id)).toEqual({ pending: 0, delivered: 1, failed: 0, attempts: 1 });
    } finally {
      await deliverer.stop();
    }
  });
});
