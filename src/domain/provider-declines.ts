/**
 * A provider's decline in the caller's words. Each provider's own decline vocabulary, and how it
 * maps here, lives in its folder (src/providers/<provider>/); what every provider answers with is
 * this shape. Pure types.
 */
import type { DeclineCode } from './charge.js';

/** The caller-facing codes a provider decline can map to: every DeclineCode but the mandate's own. */
export type MappedDeclineCode = Exclude<DeclineCode, 'mandate_exceeded'>;

/** A provider's decline, mapped: the caller's code, the provider's exact code beside it, and whether a later attempt may pass. */
export interface ProviderDecline {
  declineCode: MappedDeclineCode;
  /** The provider's own code, for operators and reconciliation. */
  providerDeclineCode: string;
  /** The issuer may accept a later attempt (on a new charge, with a new key). */
  transient: boolean;
}
