import { permissionFor, type Operation, type Role } from '../domain/permissions.js';
import type { Mandate } from '../domain/mandate.js';
import { ForbiddenError } from '../domain/errors.js';

/**
 * Who a request acts as: the tenant it belongs to and the role it has. `keyId` is the API key that
 * authenticated it, or null when no key is involved (the stdio MCP server started with `--tenant`
 * by an operator who already has database access; it acts as an agent).
 */
export interface Principal {
  tenant: string;
  keyId: string | null;
  role: Role;
  /** What the key may charge (absent without a key). */
  mandate?: Mandate;
}

/** The service's view of who makes a new charge: the key and its mandate (undefined without a key). */
export function chargeActorOf(principal: Principal): { keyId: string; mandate: Mandate } | undefined {
  return principal.keyId !== null && principal.mandate !== undefined
    ? { keyId: principal.keyId, mandate: principal.mandate }
    : undefined;
}

/**
 * The one place a surface asks whether its principal may perform an operation (the rule itself is
 * the table in src/domain/permissions.ts). Throws ForbiddenError naming the rule; called before
 * anything is read from the body or recorded.
 */
export function authorize(principal: Principal, operation: Operation): void {
  const decision = permissionFor(principal.role, operation);
  if (!decision.allowed) throw new ForbiddenError(operation, decision.detail);
}
