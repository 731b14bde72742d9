import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../app.js';

export function registerRefundRoutes(_app: FastifyInstance, _deps: ApiDeps): void {}
