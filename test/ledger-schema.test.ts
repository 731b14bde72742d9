import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { statusOfHold, type ChargeIntent, type ChargeStatus, type HoldState } from '../src/domain/charge.js';
import { cancelHold, confirmHold, tryHold } from '../src/ledger/charges.js';
import { beginProviderAuthorize, recordProviderAuthorized, recordProviderVoided, tryProviderHold } from '../src/ledger/provider-charges.js';
import { listCharges } from '../src/ledger/listing.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { refundCharge } from '../src/ledger/refunds.js';
import { ledgerFunctionSources } from '../src/ledger/repeatable.js';
import { committedSchemaPath, describeSchemaDifference, dumpLedgerSchema } from '../scripts/ledger-schema-dump.js';
import { countChargesByStatus } from '../src/ledger/reports.js';
import { openAccount, useScratchLedger } from './support/harness.js';

// The schema a fresh database gets from the migrations and the function sources is committed as
// src/ledger/schema.sql: a change to either shows up there, in review. The status view must say
// what statusOfHold says, row by row, and listing by status must return exactly those rows.

const ledger = useScratchLedger();

async function dump(): Promise<string> {
  const client = await ledger.pool.connect();
  try {
    return await dumpLedgerSchema(client);
  } finally {
    client.release();
  }
}

describe('ledger schema', () => {
  it('a fresh migrate gives exactly the committed src/ledger/schema.sql', async () => {
    const committed = await readFile(committedSchemaPath, 'utf8');
    const difference = describeSchemaDifference(committed, await dump());
    if (difference !== null) expect.fail(difference);
  });

  it('migrating again (the function sources re-applied) changes nothing', async () => {
    const before = await dump();
    await migrateLedger(ledger.databaseUrl);
    expect(describeSchemaDifference(before, await dump())).toBeNull();
  });

  it('every ledger function has its source file, and every source file defines its function', async () => {
    const { rows } = await ledger.pool.query<{ proname: string }>(
      `SELECT DISTINCT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' ORDER BY 1`,
    );
    const sources = ledgerFunctionSources();
    expect(sources.map((source) => source.name).sort()).toEqual(rows.map((row) => row.proname));
    for (const source of sources) {
      expect(source.sql, source.file).toMatch(new RegExp(`^CREATE OR REPLACE FUNCTION ${source.name}\\(`, 'm'));
      expect(source.sql.match(/CREATE (OR REPLACE )?FUNCTION/g), source.file).toHaveLength(1);
    }
  });
});

describe('charge_statuses', () => {
  const tenant = `statuses_${randomBytes(4).toString('hex')}`;

  function intent(key: string, amountMinor: number): ChargeIntent {
    return {
      tenant,
      idempotencyKey: key,
      chargeId: `ch_${tenant}_${key}`,
      fingerprint: randomBytes(32).toString('hex'),
      request: {
        orderId: `order-${key}`,
        payerAccountId: 'payer',
        payeeAccountId: 'payee',
        amountMinor,
        currency: 'USD',
        captureMode: 'manual',
        description: null,
        metadata: null,
      },
    };
  }

  /** A card charge: the hold is on the provider's clearing account, the payer is the card. */
  function cardIntent(key: string, amountMinor: number): ChargeIntent {
    const base = intent(key, amountMinor);
    return { ...base, request: { ...base.request, payerAccountId: '@provider/stripe/USD', paymentMethod: { provider: 'stripe', id: 'pm_card_visa' } } };
  }

  /** A card charge the provider has answered: `authorized` (money held there) or `requires_action` (3-D Secure). */
  async function authorizedCard(key: string, state: 'authorized' | 'requires_action'): Promise<ChargeIntent> {
    const card = cardIntent(key, 70);
    await tryProviderHold(ledger.pool, card, 60_000);
    await beginProviderAuthorize(ledger.pool, tenant, key);
    await recordProviderAuthorized(ledger.pool, tenant, key, `pi_${key}`, state, null);
    return card;
  }

  async function refund(key: string, amountMinor: number): Promise<void> {
    const refunded = await refundCharge(ledger.pool, {
      tenant,
      chargeKey: key,
      refundKey: `refund-${amountMinor}`,
      refundId: `rf_${tenant}_${key}_${amountMinor}`,
      fingerprint: randomBytes(32).toString('hex'),
      amountMinor,
    });
    expect(refunded.refund.status).toBe('succeeded');
  }

  it('say for every row what statusOfHold says, and listing by status returns exactly those rows', async () => {
    await openAccount(ledger.pool, tenant, 'payer', { depositMinor: 1_000 });
    await openAccount(ledger.pool, tenant, 'payee');

    const expected: Record<string, ChargeStatus> = {
      held: 'reserved',
      declined: 'declined',
      cancelled: 'cancelled',
      tombstone: 'cancelled',
      captured: 'succeeded',
      'captured-in-part': 'succeeded',
      'partly-refunded': 'partially_refunded',
      'refunded-in-two': 'refunded',
      'card-authorized': 'reserved',
      'card-waiting': 'requires_action',
      'card-cancelling': 'cancelling',
      'card-voided': 'cancelled',
    };
    expect((await tryHold(ledger.pool, intent('held', 100), 60_000)).holdState).toBe('TRIED');
    expect((await tryHold(ledger.pool, intent('declined', 1_000_000), 60_000)).holdState).toBe('DECLINED');
    const cancelled = intent('cancelled', 50);
    await tryHold(ledger.pool, cancelled, 60_000);
    expect((await cancelHold(ledger.pool, cancelled, 'test')).holdState).toBe('CANCELLED');
    expect((await cancelHold(ledger.pool, intent('tombstone', 10), 'test')).holdState).toBe('CANCELLED');
    for (const [key, amount, capture] of [
      ['captured', 100, null],
      ['captured-in-part', 100, 40],
      ['partly-refunded', 100, null],
      ['refunded-in-two', 100, 60],
    ] as const) {
      await tryHold(ledger.pool, intent(key, amount), 60_000);
      expect((await confirmHold(ledger.pool, tenant, key, capture)).holdState).toBe('CONFIRMED');
    }
    await refund('partly-refunded', 30);
    await refund('refunded-in-two', 20);
    await refund('refunded-in-two', 40);
    // Card charges: the provider's state decides between reserved and requires_action, and between
    // cancelling (the provider may still hold the payment) and cancelled (its void is recorded).
    await authorizedCard('card-authorized', 'authorized');
    await authorizedCard('card-waiting', 'requires_action');
    const cancelling = await authorizedCard('card-cancelling', 'authorized');
    expect((await cancelHold(ledger.pool, cancelling, 'test')).charge.status).toBe('cancelling');
    const voided = await authorizedCard('card-voided', 'requires_action');
    await cancelHold(ledger.pool, voided, 'test');
    expect((await recordProviderVoided(ledger.pool, tenant, 'card-voided', 'pi_card-voided')).charge.status).toBe('cancelled');

    const { rows } = await ledger.pool.query<{
      idempotency_key: string;
      hold_state: HoldState;
      captured_minor: number;
      refunded_minor: number;
      provider_state: string | null;
      status: ChargeStatus | null;
      in_view: number;
    }>(
      `SELECT c.idempotency_key, c.hold_state, c.captured_minor, c.refunded_minor, c.provider_state, min(s.status) AS status,
              count(s.status)::int AS in_view
         FROM charges c
         LEFT JOIN charge_statuses s ON s.tenant = c.tenant AND s.idempotency_key = c.idempotency_key
        WHERE c.tenant = $1 GROUP BY 1, 2, 3, 4, 5 ORDER BY 1`,
      [tenant],
    );
    expect(rows).toHaveLength(Object.keys(expected).length);
    for (const row of rows) {
      // Exactly one status per row: the view's branches neither overlap nor leave a row out.
      expect(row.in_view, row.idempotency_key).toBe(1);
      expect(row.status, row.idempotency_key).toBe(statusOfHold(row.hold_state, row.captured_minor, row.refunded_minor, row.provider_state));
      expect(row.status, row.idempotency_key).toBe(expected[row.idempotency_key]);
    }

    const statuses: ChargeStatus[] = [
      'pending', 'reserved', 'requires_action', 'declined', 'cancelling', 'cancelled', 'succeeded', 'partially_refunded', 'refunded',
    ];
    for (const status of statuses) {
      const page = await listCharges(ledger.pool, tenant, { status, limit: 100 });
      const keys = Object.entries(expected).filter(([, s]) => s === status).map(([key]) => key);
      expect(page.charges.map((charge) => charge.idempotencyKey).sort(), status).toEqual(keys.sort());
      for (const charge of page.charges) expect(charge.status, charge.idempotencyKey).toBe(status);
    }
    // A listed card charge carries its provider payment, as GET /v1/charges/{key} shows it.
    const [listedCard] = (await listCharges(ledger.pool, tenant, { status: 'requires_action', limit: 1 })).charges;
    expect(listedCard?.provider).toMatchObject({ provider: 'stripe', paymentMethod: 'pm_card_visa', paymentId: 'pi_card-waiting', state: 'requires_action' });
    const counts = await countChargesByStatus(ledger.pool, tenant);
    expect(counts).toEqual({
      reserved: 2, requires_action: 1, declined: 1, cancelling: 1, cancelled: 3, succeeded: 2, partially_refunded: 1, refunded: 1,
    });
  });
});
