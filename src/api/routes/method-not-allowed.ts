import type { FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods } from 'fastify';
import { sendProblem } from '../../http/problem.js';

/** Methods a client might try on a path; HEAD is left to fastify, which answers it for every GET. */
const candidateMethods: HTTPMethods[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'QUERY'];

/**
 * A known path asked with a method it does not take answers 405 with `Allow` (RFC 9110 15.5.6),
 * not 404: the caller has the right address and the wrong verb, and should be told which.
 */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: HTTPMethods[]): void {
  const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
  const others = candidateMethods.filter((method) => !allow.includes(method) && app.supportedMethods.includes(method));
  const refuse = (request: FastifyRequest, reply: FastifyReply): FastifyReply =>
    sendProblem(reply, {
      body: {
        type: 'method_not_allowed',
        title: 'Method not allowed',
        status: 405,
        detail: `${request.method} is not allowed on this path; it takes ${allow.join(', ')}`,
        instance: request.url,
      },
      headers: { allow: allow.join(', ') },
    });
  app.route({
    method: others,
    url,
    schema: { hide: true },
    // Answered before the body is read: a wrong method is told so, whatever its body (a QUERY
    // without a content type, a PUT of 10 MB) would have been refused for.
    onRequest: async (request, reply) => refuse(request, reply),
    handler: async (request, reply) => refuse(request, reply),
  });
}
