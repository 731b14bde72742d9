import { admitByAddress, admitRequest, deleteFullAddressBuckets, peekRequest } from '../auth/rate-limits.js';
import type { LedgerPool } from '../ledger/pool.js';

/**
 * The request rate and open holds limits (docs/limits.md), for the surfaces: buckets live in the
 * ledger so that they hold across API replicas; the rules are src/auth's, and this holds the pool
 * they run on, so that no surface takes one.
 */
export class RateLimitService {
  constructor(private readonly ledger: LedgerPool) {}

  /** One request (or the extra calls of an MCP batch) against its key's and tenant's limits. */
  admitRequest(...args: Parameters<typeof admitRequest> extends [LedgerPool, ...infer Rest] ? Rest : never): ReturnType<typeof admitRequest> {
    return admitRequest(this.ledger, ...args);
  }

  /** What admitRequest would find (tokens there, charge keys known), taking and writing nothing. */
  peekRequest(...args: Parameters<typeof peekRequest> extends [LedgerPool, ...infer Rest] ? Rest : never): ReturnType<typeof peekRequest> {
    return peekRequest(this.ledger, ...args);
  }

  /** A request without a proven key, a webhook delivery or a health probe, against its source address's bucket. */
  admitByAddress(...args: Parameters<typeof admitByAddress> extends [LedgerPool, ...infer Rest] ? Rest : never): ReturnType<typeof admitByAddress> {
    return admitByAddress(this.ledger, ...args);
  }

  /** Deletes the address buckets that have refilled: an idle address costs no row. */
  deleteFullAddressBuckets(): ReturnType<typeof deleteFullAddressBuckets> {
    return deleteFullAddressBuckets(this.ledger);
  }
}
