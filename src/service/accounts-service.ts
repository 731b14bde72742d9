import { createHash } from 'node:crypto';
import { z } from 'zod';
import {
  AccountNotFoundError,
  createAccount,
  deposit,
  findAccountCursor,
  getAccount,
  listAccounts,
  LedgerRefusalError,
  type Account,
  type Deposit,
} from '../ledger/accounts.js';
import type { LedgerPool } from '../ledger/pool.js';
import { isSystemAccountId } from '../domain/providers.js';
import { pageCursorOf, resolveCursor } from './listing.js';
import { ChargeguardError, IdempotencyConflictError, NotFoundError, ValidationError } from '../domain/errors.js';
import { asUnavailable } from './unavailable.js';
import {
  accountIdSchema,
  amountSchema,
  assertAccountId,
  assertIdempotencyKey,
  assertObjectBody,
  currencySchema,
  idempotencyKeySchema,
  parsePageQuery,
  parseWith,
} from './validation.js';
import { assertTenant } from '../domain/identifiers.js';
import type { WireDeposit } from './wire.js';

/** The account id is taken with other settings (currency, overdraft): a 409 for HTTP callers. */
export class AccountConflictError extends ChargeguardError {
  readonly code = 'account_conflict';
}

/** Create-account body on the wire; the field rules are the charge body's, so both agree. */
export function createAccountBodySchema() {
  return z
    .object({
      currency: currencySchema,
      id: accountIdSchema.optional().describe('your own id; derived from the Idempotency-Key when omitted'),
      allow_overdraft: z
        .boolean({ error: (issue) => (issue.input === null ? 'must be true or false, or left out: null is not a value' : 'must be true or false') })
        .default(false),
    })
    .strict();
}

export function depositBodySchema(amountMinorMax: number) {
  return z
    .object({
      amount: amountSchema(amountMinorMax),
      external_id: idempotencyKeySchema
        .optional()
        .describe("the payment provider's id for this deposit: a redelivered webhook deposits once"),
    })
    .strict();
}

function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  return parseWith(schema, assertObjectBody(body));
}

/** A stable account id for a create request that names none: a retry with the same key gets the same account. */
function accountIdFor(tenant: string, idempotencyKey: string): string {
  return `acct_${createHash('sha256').update(`${tenant}\n${idempotencyKey}`, 'utf8').digest('hex').slice(0, 24)}`;
}

/**
 * Deposit references live in one namespace per tenant; the prefixes keep a header key and a
 * provider's external id from ever colliding with each other. Both given: they must be the same
 * id (the deposit is then keyed by external_id, as before), never one silently ignored.
 */
function depositReference(idempotencyKey: string | null, externalId: string | undefined): string {
  if (externalId !== undefined && idempotencyKey !== null && externalId !== idempotencyKey) {
    const both = 'the Idempotency-Key header and external_id both name this deposit, so they must be equal (or send only one)';
    throw new ValidationError([
      { field: 'Idempotency-Key', message: `differs from external_id: ${both}` },
      { field: 'external_id', message: `differs from the Idempotency-Key header: ${both}` },
    ]);
  }
  if (externalId !== undefined) return `external:${externalId}`;
  if (idempotencyKey !== null) return `key:${idempotencyKey}`;
  throw new ValidationError([
    { field: 'Idempotency-Key', message: 'is required (or external_id in the body) so that a retried deposit moves money once' },
  ]);
}

export function depositToWire(deposit: Deposit): WireDeposit {
  return {
    id: `dep_${deposit.transferId}`,
    object: 'deposit',
    account_id: deposit.accountId,
    amount: deposit.amountMinor,
    currency: deposit.currency,
    created_at: deposit.createdAt,
  };
}

/**
 * Accounts and deposits for the surfaces, so none of them runs SQL itself. The ledger functions
 * already make each operation exactly-once; this module validates and names the errors.
 */
export class AccountsService {
  constructor(private readonly options: { ledger: LedgerPool; amountMinorMax: number }) {}

  /** Creates the account, or returns it unchanged when the same create is repeated. */
  async createAccount(
    tenant: string,
    idempotencyKey: string | null,
    body: unknown,
  ): Promise<{ account: Account; created: boolean }> {
    assertTenant(tenant);
    if (idempotencyKey !== null) assertIdempotencyKey(idempotencyKey, 'Idempotency-Key');
    const request = parseBody(createAccountBodySchema(), body);
    if (request.id === undefined && idempotencyKey === null) {
      throw new ValidationError([{ field: 'id', message: 'is required when no Idempotency-Key is given' }]);
    }
    const id = request.id ?? accountIdFor(tenant, idempotencyKey!);
    const result = await this.translate(() =>
      createAccount(this.options.ledger, { tenant, id, currency: request.currency, allowOverdraft: request.allow_overdraft }),
    );
    if ('conflict' in result) {
      const message = `account ${id} already exists with currency ${result.conflict.currency} and allow_overdraft ${result.conflict.allowOverdraft}`;
      // Without an explicit id the key chose the id, so a different body under the same key is key reuse.
      if (request.id === undefined) throw new IdempotencyConflictError(`idempotency key ${idempotencyKey} was already used: ${message}`);
      throw new AccountConflictError(message);
    }
    return result;
  }

  /**
   * The account and its balances. `includeSystem` (admin keys, the operator) also reads the
   * tenant's system accounts by their ids (`@provider/stripe/USD`, `@external/USD`); without it
   * such an id is refused as any malformed account id is.
   */
  async getAccount(tenant: string, id: string, field = 'account_id', options: { includeSystem?: boolean } = {}): Promise<Account> {
    assertTenant(tenant);
    const includeSystem = options.includeSystem === true && isSystemAccountId(id);
    if (!includeSystem) assertAccountId(id, field);
    const account = await this.translate(() => getAccount(this.options.ledger, tenant, id, { includeSystem }));
    if (!account) throw new NotFoundError(`no account ${id}`);
    return account;
  }

  /**
   * The tenant's accounts with their balances, newest first, a page as `GET /v1/accounts` takes it
   * (limit, starting_after, ending_before: account ids). System accounts only with `includeSystem`.
   */
  async listAccountsFromQuery(
    tenant: string,
    rawQuery: Record<string, unknown>,
    options: { includeSystem: boolean },
  ): Promise<{ accounts: Account[]; hasMore: boolean }> {
    assertTenant(tenant);
    const page = parsePageQuery(rawQuery);
    const cursor = pageCursorOf(page);
    const { includeSystem } = options;
    return this.translate(async () => {
      const id = cursor ? await resolveCursor(cursor, 'account', (value) => findAccountCursor(this.options.ledger, tenant, value, { includeSystem })) : null;
      return listAccounts(this.options.ledger, tenant, {
        limit: page.limit,
        includeSystem,
        cursor: cursor && id !== null ? { direction: cursor.direction, id } : null,
      });
    });
  }

  /** Exactly-once per (tenant, Idempotency-Key) or (tenant, external_id). */
  async deposit(
    tenant: string,
    accountId: string,
    idempotencyKey: string | null,
    body: unknown,
    /** The API key making it, recorded for the audit (null: the operator). */
    keyId: string | null = null,
  ): Promise<{ deposit: Deposit; replayed: boolean }> {
    assertTenant(tenant);
    assertAccountId(accountId);
    if (idempotencyKey !== null) assertIdempotencyKey(idempotencyKey, 'Idempotency-Key');
    const request = parseBody(depositBodySchema(this.options.amountMinorMax), body);
    const reference = depositReference(idempotencyKey, request.external_id);
    try {
      const made = await this.translate(() => deposit(this.options.ledger, tenant, accountId, request.amount, reference, keyId));
      return { deposit: made, replayed: made.replayed };
    } catch (error) {
      if (error instanceof AccountNotFoundError) throw new NotFoundError(`no account ${accountId}`);
      if (error instanceof LedgerRefusalError && error.refusal === 'idempotencyConflict') {
        throw new IdempotencyConflictError(
          `${request.external_id !== undefined ? 'external_id' : 'idempotency key'} was already used for a different deposit; ` +
            'use a new key for a new deposit, or resend the original request unchanged',
        );
      }
      throw error;
    }
  }

  private async translate<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      throw asUnavailable(error);
    }
  }
}
