import type { FastifyInstance } from 'fastify';
import { eventObjectTypes, eventTypes, renderEvent } from '../../service/events.js';
import { listToWire } from '../../service/wire.js';
import type { ApiDeps } from '../deps.js';
import { commonProblems, jsonResponse, listResponse, pageQueryProperties, pathParameterSchemas, problemResponses } from '../openapi.js';
import { assertWellFormedQuery } from '../request-headers.js';
import { refuseOtherMethods } from './method-not-allowed.js';
import type { Role } from '../../domain/permissions.js';

/**
 * Outbound events (docs/events.md): what changed, for a caller catching up or checking one
 * delivery. Read-only; a key sees the events of the objects its role may read (the service decides:
 * src/service/events.ts), of its own tenant only (another tenant's event is a 404, as every object is).
 */
export function registerEventRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { context } = deps;
  refuseOtherMethods(app, '/v1/events', ['GET']);
  refuseOtherMethods(app, '/v1/events/:id', ['GET']);
  const audit = (request: { principal: { role: string } }) => ({ audit: request.principal.role === 'admin' });
  const reader = (request: { principal: { role: Role } }) => ({ role: request.principal.role });

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/events',
    {
      config: { operation: 'events.read' },
      schema: {
        summary: "The tenant's events, newest first",
        description:
          'Every change a caller acts on, as its event (docs/events.md): kept at least 30 days. Filter by `type` ' +
          '(`charge.succeeded`, or `charge.*` for every type of one object) and `object_id` (a charge `ch_…`, refund `re_…` ' +
          'or deposit `dep_…`). Pages of at most `limit` (20 unless asked): the next, older page with `starting_after` = the ' +
          "last event's id; newer ones with `ending_before` = the first one's. An event may commit a moment after a newer-numbered " +
          'one: when catching up, re-read a little before your last cursor and drop the ids you have. A key sees the events of the ' +
          'objects its role reads: `webhook_endpoint.*` events are for admin keys only (for an agent key that filter is an empty page).',
        tags: ['events'],
        querystring: {
          type: 'object',
          properties: {
            type: { type: 'string', enum: [...eventTypes, ...eventObjectTypes.map((object) => `${object}.*`)], description: 'only events of this type' },
            object_id: { ...pathParameterSchemas.idempotencyKey, description: 'only events about this object (ch_…, re_…, dep_…)' },
            ...pageQueryProperties('an event id, evt_…'),
          },
          additionalProperties: false,
        },
        response: {
          200: listResponse('a page of events, newest first', 'Event'),
          ...commonProblems,
        },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const page = await context.charges.listEventsFromQuery(request.tenant, request.query, reader(request));
      return listToWire(page.events.map((event) => renderEvent(event, audit(request))), page.hasMore, '/v1/events');
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/events/:id',
    {
      config: { operation: 'events.read' },
      schema: {
        summary: 'One event',
        tags: ['events'],
        params: {
          type: 'object',
          properties: { id: { ...pathParameterSchemas.idempotencyKey, description: 'the event id, evt_…' } },
          required: ['id'],
        },
        response: {
          200: jsonResponse('the event', 'Event'),
          ...commonProblems,
          ...problemResponses({ 404: 'no such event for this tenant, or one about an object this key may not read' }),
        },
      },
    },
    async (request) => renderEvent(await context.charges.getEvent(request.tenant, request.params.id, reader(request)), audit(request)),
  );
}
