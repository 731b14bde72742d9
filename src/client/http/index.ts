export * from './client.js';
export * from './errors.js';
export type { components, operations, paths } from './openapi-types.js';
export * from './webhook-deliveries.js';
