import type { FastifyReply } from 'fastify';

/**
 * Adds one stage to the reply's Server-Timing header (W3C Server Timing: `name;dur=ms`, entries
 * separated by commas), keeping the stages already there: authentication, the rate-limit
 * statement and the admission of a charge each report their own, so that a slow answer can be
 * taken apart from the outside (bench:overload does, for its refusals).
 */
export function addServerTiming(reply: FastifyReply, name: string, startedAtMs: number): void {
  const entry = `${name};dur=${(performance.now() - startedAtMs).toFixed(3)}`;
  const before = reply.getHeader('server-timing');
  reply.header('server-timing', typeof before === 'string' && before !== '' ? `${before}, ${entry}` : entry);
}
