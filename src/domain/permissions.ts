/**
 * Who may do what: the one permission table. Every surface (HTTP routes, MCP tools over HTTP and
 * stdio) names the operation it is about to perform and asks `permissionFor`; nothing else decides.
 *
 * An `agent` key moves money that already exists: it creates, reads, cancels, captures and refunds
 * charges and reads accounts. Only an `admin` key creates money or changes who may: it opens
 * accounts (so also sets `allow_overdraft`), deposits, and manages keys and webhook endpoints; it also reads the ledger's
 * system accounts (clearing accounts), which agents never see.
 */
import type { EventObjectType } from './events.js';

export const roles = ['agent', 'admin'] as const;
export type Role = (typeof roles)[number];

/** The role a new key gets unless another is asked for: the least privileged one. */
export const defaultRole: Role = 'agent';

export type Operation =
  | 'charges.create'
  | 'idempotency_tokens.create'
  | 'charges.read'
  | 'charges.cancel'
  | 'charges.capture'
  | 'refunds.create'
  | 'refunds.read'
  | 'accounts.read'
  | 'events.read'
  | 'system_accounts.read'
  | 'accounts.open'
  | 'accounts.deposit'
  | 'api_keys.manage'
  | 'webhook_endpoints.manage';

interface Permission {
  /** The roles allowed to perform it. */
  roles: readonly Role[];
  /** What the operation is, as the refusal names it: "<doing> needs an admin key". */
  doing: string;
}

export const permissions: Readonly<Record<Operation, Permission>> = {
  'charges.create': { roles: ['agent', 'admin'], doing: 'creating charges' },
  'idempotency_tokens.create': { roles: ['agent', 'admin'], doing: 'issuing idempotency tokens' },
  'charges.read': { roles: ['agent', 'admin'], doing: 'reading charges' },
  'charges.cancel': { roles: ['agent', 'admin'], doing: 'cancelling charges' },
  'charges.capture': { roles: ['agent', 'admin'], doing: 'capturing charges' },
  'refunds.create': { roles: ['agent', 'admin'], doing: 'refunding charges' },
  'refunds.read': { roles: ['agent', 'admin'], doing: 'reading refunds' },
  'accounts.read': { roles: ['agent', 'admin'], doing: 'reading accounts and balances' },
  // Listing and reading events; which events a role sees is eventVisibleTo's (below): those of the
  // objects it may read.
  'events.read': { roles: ['agent', 'admin'], doing: 'reading events' },
  // The ledger's own accounts (a provider's clearing account, the outside world's): what a provider
  // owes the tenant is the operator's business; agents never name them, as payer, payee or otherwise.
  'system_accounts.read': { roles: ['admin'], doing: 'reading system accounts (@provider/…, @external/…)' },
  'accounts.open': { roles: ['admin'], doing: 'opening accounts' },
  'accounts.deposit': { roles: ['admin'], doing: 'depositing money' },
  'api_keys.manage': { roles: ['admin'], doing: 'managing API keys' },
  // Where a tenant's events go, and the secret that signs them: whoever manages endpoints can read
  // every outcome of the tenant, so it is an admin's decision.
  'webhook_endpoints.manage': { roles: ['admin'], doing: 'managing webhook endpoints' },
};

export function isRole(value: unknown): value is Role {
  return typeof value === 'string' && (roles as readonly string[]).includes(value);
}

export type PermissionDecision = { allowed: true } | { allowed: false; detail: string };

/** Whether a key of this role may perform the operation; a refusal names the rule it broke. */
export function permissionFor(role: Role, operation: Operation): PermissionDecision {
  const permission = permissions[operation];
  if (permission.roles.includes(role)) return { allowed: true };
  const needed = permission.roles.map((r) => `an ${r} key`).join(' or ');
  return { allowed: false, detail: `${permission.doing} needs ${needed}; this key is an ${role} key` };
}

/**
 * The operation that reads each kind of object events are about. An event carries its whole object,
 * so it is visible exactly to the roles that may read that object: a `webhook_endpoint.disabled`
 * event (an endpoint's URL and state) to admin keys only, as the endpoint itself. The service layer
 * applies it to every reader of events (src/service/events.ts): GET /v1/events, the CLI, MCP.
 */
export const eventObjectReadOperations: Readonly<Record<EventObjectType, Operation>> = {
  charge: 'charges.read',
  refund: 'refunds.read',
  deposit: 'accounts.read',
  webhook_endpoint: 'webhook_endpoints.manage',
};

/** Whether a key of this role may see events about objects of this type (an unknown type: no). */
export function eventVisibleTo(role: Role, objectType: string): boolean {
  const operation = (eventObjectReadOperations as Readonly<Record<string, Operation | undefined>>)[objectType];
  return operation !== undefined && permissionFor(role, operation).allowed;
}

/** The object types whose events a key of this role sees. */
export function visibleEventObjectTypes(role: Role): EventObjectType[] {
  return (Object.keys(eventObjectReadOperations) as EventObjectType[]).filter((objectType) => eventVisibleTo(role, objectType));
}
