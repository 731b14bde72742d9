import type { Command } from 'commander';
import { renderEvent, type WireEvent } from '../../service/events.js';
import { listToWire } from '../../service/wire.js';
import { addOutputOption, openCliContext, print, runCommand } from './surface.js';
import { addIdentityOptions, assertIdentityNamed, identify, type IdentityOptions } from '../identity.js';
import { authorize, type Principal } from '../../auth/principal.js';
import type { AppContext } from '../../runtime/app-context.js';

/** One line per event: when, what, about which object, its place in that object's history. */
function describeEvent(event: WireEvent): string {
  const object = event.data.object;
  const status = 'status' in object ? `  ${object.status}` : '';
  return `${event.created_at}  ${event.id}  ${event.type}  ${object.id} #${event.sequence}${status}`;
}

/**
 * Who reads: with an API key ($CHARGEGUARD_API_KEY, --api-key-file), that key, seeing what its role
 * sees through GET /v1/events (an agent key no `webhook_endpoint.*` event, no audit field); without
 * one, the operator of --tenant, who has the database and so sees everything, as an admin key.
 */
async function readerOf(context: AppContext, options: IdentityOptions): Promise<Principal> {
  const principal = await identify(context.keys, options);
  authorize(principal, 'events.read');
  // identify() makes the operator an agent, for moving money; reading, it sees what an admin key sees.
  return principal.keyId === null ? { ...principal, role: 'admin' } : principal;
}

/** `events list|get`: the tenant's events (docs/events.md), as GET /v1/events answers them; the operator sees audit fields. */
export function registerEventsCommand(program: Command): void {
  const events = program.command('events').description("a tenant's events: what changed, newest first (docs/events.md)");

  const list = events
    .command('list')
    .description('events newest first, as GET /v1/events lists them')
    .option('--type <type>', 'one type (charge.succeeded) or every type of one object (charge.*)')
    .option('--object-id <id>', "one object's events: ch_…, re_… or dep_…")
    .option('--limit <n>', 'at most this many (1-100, 20 by default)')
    .option('--starting-after <event-id>', 'the next (older) page after this event')
    .option('--ending-before <event-id>', 'the newer page before this event');
  addIdentityOptions(list);
  addOutputOption(list);
  list.action(
    (options: IdentityOptions & { type?: string; objectId?: string; limit?: string; startingAfter?: string; endingBefore?: string; json?: boolean }) =>
      runCommand(options, async () => {
        assertIdentityNamed(options);
        // The same query parser as the HTTP list: the same refusals, naming the same parameters.
        const query = Object.fromEntries(
          Object.entries({
            type: options.type,
            object_id: options.objectId,
            limit: options.limit,
            starting_after: options.startingAfter,
            ending_before: options.endingBefore,
          }).filter(([, value]) => value !== undefined),
        );
        const context = await openCliContext();
        try {
          const reader = await readerOf(context, options);
          const page = await context.charges.listEventsFromQuery(reader.tenant, query, reader);
          const wire = page.events.map((event) => renderEvent(event, { audit: reader.role === 'admin' }));
          const more = page.hasMore ? '\n(more: --starting-after ' + (wire.at(-1)?.id ?? '') + ')' : '';
          print(options, listToWire(wire, page.hasMore, '/v1/events'), wire.map(describeEvent).join('\n') + more);
        } finally {
          await context.close();
        }
      }),
  );

  const get = events.command('get').description('one event, as GET /v1/events/{id} answers it').argument('<event-id>', 'evt_…');
  addIdentityOptions(get);
  addOutputOption(get);
  get.action((id: string, options: IdentityOptions & { json?: boolean }) =>
    runCommand(options, async () => {
      assertIdentityNamed(options);
      const context = await openCliContext();
      try {
        const reader = await readerOf(context, options);
        const event = renderEvent(await context.charges.getEvent(reader.tenant, id, reader), { audit: reader.role === 'admin' });
        print(options, event, `${describeEvent(event)}\n${JSON.stringify(event.data.object, null, 2)}`);
      } finally {
        await context.close();
      }
    }),
  );
}
