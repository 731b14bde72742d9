import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import type { WebhookEndpointsService, WireWebhookEndpoint } from '../../service/webhook-endpoints.js';
import { ValidationError } from '../../domain/errors.js';
import { assertIdempotencyKey } from '../../service/validation.js';
import { addOutputOption, addTenantOption, openCliLedger, print, runCommand, tenantFrom } from './surface.js';

/**
 * Webhook endpoints of a tenant (docs/webhook-endpoints.md): where its events are delivered,
 * OUTBOUND, signed. Not `webhook-secrets`, which are the providers' INBOUND callback secrets.
 * The same service as POST /v1/webhook-endpoints; a secret is printed once, by `create` or `rotate-secret`.
 */

function describeEndpoint(endpoint: WireWebhookEndpoint): string {
  const state = endpoint.status === 'enabled' ? 'enabled' : `disabled (${endpoint.disabled_reason} at ${endpoint.disabled_at})`;
  return `${endpoint.id}  ${endpoint.url}  ${state}  events ${endpoint.enabled_events.join(',')}${endpoint.description ? `  "${endpoint.description}"` : ''}`;
}

async function withService<T>(work: (service: WebhookEndpointsService) => Promise<T>): Promise<T> {
  const cli = await openCliLedger();
  try {
    return await work(cli.webhookEndpoints);
  } finally {
    await cli.close();
  }
}

function eventsOption(text: string): string[] {
  return text.split(',').map((type) => type.trim());
}

function overlapOption(text: string | undefined): number | undefined {
  if (text === undefined) return undefined;
  if (!/^[0-9]{1,9}$/.test(text)) throw new ValidationError([{ field: '--overlap-seconds', message: 'must be a whole number of seconds' }]);
  return Number(text);
}

export function registerWebhookEndpointsCommand(program: Command): void {
  const endpoints = program
    .command('webhook-endpoints')
    .description("a tenant's webhook endpoints: where its events are delivered, signed (outbound; not the providers' webhook-secrets)");

  const create = addTenantOption(
    endpoints
      .command('create')
      .description('register an endpoint; its signing secret is printed once (and again by a rerun with the same --idempotency-key)')
      .requiredOption('--url <url>', 'an https URL whose host resolves to public addresses only')
      .requiredOption('--events <types>', 'event types, comma-separated (charge.succeeded,refund.failed), or *')
      .option('--description <text>')
      .option(
        '--idempotency-key <key>',
        'names this registration: a rerun with the same key and flags prints the endpoint (and secret) the first run made instead of ' +
          'registering another. A new random key per run when left out',
      ),
  );
  addOutputOption(create);
  create.action((options: { tenant?: string; url: string; events: string; description?: string; idempotencyKey?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      // The service requires a key, as the API does. Without the flag each run is a new registration,
      // as it was asked for: the generated key only serves this one run.
      const key = options.idempotencyKey === undefined ? `cli-${randomUUID()}` : assertIdempotencyKey(options.idempotencyKey, '--idempotency-key');
      const body = { url: options.url, enabled_events: eventsOption(options.events), ...(options.description !== undefined ? { description: options.description } : {}) };
      const { endpoint, replayed } = await withService((service) => service.create(tenant, key, body));
      const note = replayed ? `registered earlier under --idempotency-key ${key}: the first run's answer again` : 'it is not shown again';
      print(options, endpoint, `${endpoint.secret}\n(${describeEndpoint(endpoint)}: verify deliveries with this secret; ${note})`);
    }),
  );

  const list = addTenantOption(endpoints.command('list').description("the tenant's endpoints, newest first (never their secrets)"));
  addOutputOption(list);
  list.action((options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const page = await withService((service) => service.list(tenant, { limit: '100' }));
      print(options, page.data, page.data.length === 0 ? 'no webhook endpoints' : page.data.map(describeEndpoint).join('\n'));
    }),
  );

  const show = addTenantOption(endpoints.command('show').description('one endpoint and its latest delivery attempts').argument('<id>'));
  addOutputOption(show);
  show.action((id: string, options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const [endpoint, attempts] = await withService(async (service) => [await service.get(tenant, id), await service.attempts(tenant, id, { limit: '20' })] as const);
      const lines = attempts.map((a) => `  ${a.started_at}  ${a.event_id}  attempt ${a.attempt}  ${a.status_code ?? '-'}  ${a.duration_ms} ms${a.error ? `  ${a.error}` : ''}`);
      print(options, { ...endpoint, attempts }, [describeEndpoint(endpoint), ...(lines.length ? lines : ['  no attempts yet'])].join('\n'));
    }),
  );

  const update = addTenantOption(
    endpoints
      .command('update')
      .description('change url, events or description; --disable / --enable')
      .argument('<id>')
      .option('--url <url>')
      .option('--events <types>')
      .option('--description <text>')
      .option('--disable', 'stop deliveries (they wait)')
      .option('--enable', 'deliver again (also after the service disabled it)'),
  );
  addOutputOption(update);
  update.action((id: string, options: { tenant?: string; url?: string; events?: string; description?: string; disable?: boolean; enable?: boolean; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      if (options.disable && options.enable) throw new ValidationError([{ field: '--disable', message: 'not with --enable' }]);
      const body = {
        ...(options.url !== undefined ? { url: options.url } : {}),
        ...(options.events !== undefined ? { enabled_events: eventsOption(options.events) } : {}),
        ...(options.description !== undefined ? { description: options.description } : {}),
        ...(options.disable ? { disabled: true } : options.enable ? { disabled: false } : {}),
      };
      const updated = await withService((service) => service.update(tenant, id, body));
      print(options, updated, describeEndpoint(updated));
    }),
  );

  const remove = addTenantOption(endpoints.command('delete').description('delete an endpoint, its secrets and its pending deliveries').argument('<id>'));
  addOutputOption(remove);
  remove.action((id: string, options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const deleted = await withService((service) => service.delete(tenant, id));
      print(options, deleted, `deleted ${id}`);
    }),
  );

  const rotate = addTenantOption(
    endpoints
      .command('rotate-secret')
      .description('a new signing secret (printed once); the current ones keep signing beside it for --overlap-seconds')
      .argument('<id>')
      .option('--overlap-seconds <n>', 'default 86400 (24 hours); 0: the new secret alone, at once'),
  );
  addOutputOption(rotate);
  rotate.action((id: string, options: { tenant?: string; overlapSeconds?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const overlap = overlapOption(options.overlapSeconds);
      const rotated = await withService((service) => service.rotateSecret(tenant, id, overlap === undefined ? undefined : { overlap_seconds: overlap }));
      print(options, rotated, `${rotated.secret}\n(the new secret of ${id}, not shown again; the previous ones sign until ${rotated.previous_secrets_expire_at})`);
    }),
  );

  const redeliver = addTenantOption(endpoints.command('redeliver').description('send an event to the endpoint again').argument('<id>').argument('<event-id>'));
  addOutputOption(redeliver);
  redeliver.action((id: string, eventId: string, options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const queued = await withService((service) => service.redeliver(tenant, id, { event: eventId }));
      print(options, queued, `queued delivery ${queued.id} of ${eventId} to ${id}`);
    }),
  );
}
