import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { ledgerFunctionSources } from '../src/ledger/repeatable.js';
import { statusOfHold, type HoldState } from '../src/domain/charge.js';
import { cancelHold, confirmHold, intentParams, readCharge, tryHold } from '../src/ledger/charges.js';
import { readObjectEvents, type EventRow } from '../src/ledger/events.js';
import { checkLedgerInvariants } from '../src/ledger/invariants.js';
import { beginProviderAuthorize, recordProviderAuthorized, recordProviderVoided, tryProviderHold, confirmProviderCapture, beginProviderCapture } from '../src/ledger/provider-charges.js';
import { readRefund, refundCharge } from '../src/ledger/refunds.js';
import { deposit } from '../src/ledger/accounts.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { refundFingerprint, refundIdFor } from '../src/service/intent.js';
import { depositToWire } from '../src/service/accounts-service.js';
import { renderEvent } from '../src/service/events.js';
import { chargeToWire, refundToWire } from '../src/service/wire.js';
import { fundedTenant, ledgerIntent, newKey, openAccount, providerIntent, useScratchLedger } from './support/harness.js';

/**
 * The transactional outbox at the ledger (docs/events.md): every step writes its event in its own
 * transaction, the event's object renders exactly as the API renders the row the step left, replays
 * write nothing, and a step that fails leaves neither its change nor its event. A scratch ledger of
 * its own, so the superuser-only fault injection below touches no other test's rows.
 */
const ledger = useScratchLedger();

async function eventsOf(pool: LedgerPool, tenant: string, objectId: string): Promise<EventRow[]> {
  return readObjectEvents(pool, tenant, objectId);
}

async function chargeNow(pool: LedgerPool, tenant: string, key: string) {
  return chargeToWire((await readCharge(pool, tenant, key))!.charge, { audit: true });
}

function refundIntent(tenant: string, chargeKey: string, amountMinor: number | null) {
  const refundKey = newKey('refund');
  return {
    tenant,
    chargeKey,
    refundKey,
    refundId: refundIdFor(tenant, chargeKey, refundKey),
    fingerprint: refundFingerprint(amountMinor),
    amountMinor,
  };
}

describe('the outbox writes one event per change, in the change’s transaction', () => {
  it('Try then Confirm: charge.reserved (1) then charge.succeeded (2), each the row as the API renders it then; replays add none', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-confirm' });
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 1_200);
    await tryHold(pool, intent, 60_000);
    const reserved = await chargeNow(pool, tenant, intent.idempotencyKey);
    await tryHold(pool, intent, 60_000);
    expect((await eventsOf(pool, tenant, intent.chargeId)).map((e) => [e.type, e.object_sequence])).toEqual([['charge.reserved', 1]]);
    await confirmHold(pool, tenant, intent.idempotencyKey, null);
    await confirmHold(pool, tenant, intent.idempotencyKey, null);
    const succeeded = await chargeNow(pool, tenant, intent.idempotencyKey);
    const events = await eventsOf(pool, tenant, intent.chargeId);
    expect(events.map((e) => [e.type, e.object_sequence])).toEqual([['charge.reserved', 1], ['charge.succeeded', 2]]);
    expect(events.map((e) => renderEvent(e, { audit: true }).data.object)).toEqual([reserved, succeeded]);
    expect(renderEvent(events[1]!)).toMatchObject({ id: events[1]!.id, object: 'event', type: 'charge.succeeded', sequence: 2 });
    expect(events[1]!.id).toMatch(/^evt_[0-9a-f]{32}$/);
    // A refund changes the charge (partially refunded) but is its own event, the refund's.
    const refund = await refundCharge(pool, refundIntent(tenant, intent.idempotencyKey, 200));
    expect((await eventsOf(pool, tenant, intent.chargeId)).length).toBe(2);
    const refundEvents = await eventsOf(pool, tenant, refund.refund.id);
    expect(refundEvents.map((e) => [e.type, e.object_sequence])).toEqual([['refund.succeeded', 1]]);
    const stored = (await readRefund(pool, tenant, intent.idempotencyKey, refund.refund.refundKey))!;
    expect(renderEvent(refundEvents[0]!, { audit: true }).data.object).toEqual(refundToWire(stored.refund, { audit: true }));
  });

  it('a declined Try writes charge.declined alone: the reserved row it claimed first never committed, so no event says reserved', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-decline', payerMinor: 100 });
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 1_200);
    expect((await tryHold(pool, intent, 60_000)).holdState).toBe('DECLINED');
    const events = await eventsOf(pool, tenant, intent.chargeId);
    expect(events.map((e) => [e.type, e.object_sequence])).toEqual([['charge.declined', 1]]);
    expect(renderEvent(events[0]!, { audit: true }).data.object).toEqual(await chargeNow(pool, tenant, intent.idempotencyKey));
  });

  it('Cancel: charge.cancelled after reserved; a Cancel before any Try (the tombstone) is the charge’s first event', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-cancel' });
    const held = ledgerIntent(tenant, newKey(), 'payer', 'payee', 700);
    await tryHold(pool, held, 60_000);
    await cancelHold(pool, held, 'cancelled_by_caller');
    await cancelHold(pool, held, 'cancelled_by_caller');
    const events = await eventsOf(pool, tenant, held.chargeId);
    expect(events.map((e) => [e.type, e.object_sequence])).toEqual([['charge.reserved', 1], ['charge.cancelled', 2]]);
    expect(renderEvent(events[1]!, { audit: true }).data.object).toEqual(await chargeNow(pool, tenant, held.idempotencyKey));
    const tombstone = ledgerIntent(tenant, newKey(), 'payer', 'payee', 700);
    await cancelHold(pool, tombstone, 'cancelled_by_caller');
    expect((await eventsOf(pool, tenant, tombstone.chargeId)).map((e) => [e.type, e.object_sequence])).toEqual([['charge.cancelled', 1]]);
  });

  it('the batched steps (ledger_try_batch, ledger_confirm_batch) write each item’s events, in the batch’s one transaction', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-batch', payerMinor: 1_000 });
    const intents = [400, 500, 600].map((amount) => ledgerIntent(tenant, newKey(), 'payer', 'payee', amount));
    const columns = (rows: unknown[][]) => rows[0]!.map((_, column) => rows.map((row) => row[column]));
    await pool.query(
      'SELECT * FROM ledger_try_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)',
      columns(intents.map((intent) => [...intentParams(intent), 60_000, null, null])),
    );
    const types = async () => Promise.all(intents.map(async (intent) => (await eventsOf(pool, tenant, intent.chargeId)).map((e) => e.type)));
    // 400 + 500 fit in 1,000; the third, whichever order the batch ran them in, may not.
    const afterTry = await types();
    expect(afterTry.flat().filter((t) => t === 'charge.reserved').length).toBeGreaterThanOrEqual(2);
    for (const list of afterTry) expect(list).toHaveLength(1);
    const reservedKeys = intents.filter((_, i) => afterTry[i]![0] === 'charge.reserved').map((intent) => intent.idempotencyKey);
    await pool.query('SELECT * FROM ledger_confirm_batch($1, $2, $3)', [reservedKeys.map(() => tenant), reservedKeys, reservedKeys.map(() => null)]);
    for (const [i, intent] of intents.entries()) {
      const events = await eventsOf(pool, tenant, intent.chargeId);
      const expected = afterTry[i]![0] === 'charge.reserved' ? ['charge.reserved', 'charge.succeeded'] : ['charge.declined'];
      expect(events.map((e) => e.type)).toEqual(expected);
      expect(events.map((e) => e.object_sequence)).toEqual(expected.map((_, n) => n + 1));
      expect(renderEvent(events.at(-1)!, { audit: true }).data.object).toEqual(await chargeNow(pool, tenant, intent.idempotencyKey));
    }
  });

  it('a refused refund writes refund.failed; a deposit writes deposit.credited once, however often it is repeated', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-refund' });
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 300);
    await tryHold(pool, intent, 60_000);
    await confirmHold(pool, tenant, intent.idempotencyKey, null);
    // More than was captured: a decision the ledger records (status failed), not an error.
    const failedRefund = await refundCharge(pool, refundIntent(tenant, intent.idempotencyKey, 301));
    expect(failedRefund.refund.status).toBe('failed');
    const events = await eventsOf(pool, tenant, failedRefund.refund.id);
    expect(events.map((e) => [e.type, e.object_sequence])).toEqual([['refund.failed', 1]]);
    expect(renderEvent(events[0]!).data.object).toEqual(refundToWire(failedRefund.refund));

    const made = await deposit(pool, tenant, 'payee', 4_321, 'ev-deposit-1');
    await deposit(pool, tenant, 'payee', 4_321, 'ev-deposit-1');
    const depositEvents = await eventsOf(pool, tenant, `dep_${made.transferId}`);
    expect(depositEvents.map((e) => [e.type, e.object_sequence])).toEqual([['deposit.credited', 1]]);
    expect(renderEvent(depositEvents[0]!).data.object).toEqual(depositToWire(made));
  });

  it('a provider charge: reserved, requires_action while the payer acts, reserved again once authorized, succeeded', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-provider' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const seen: unknown[] = [];
    const step = async (run: () => Promise<unknown>) => {
      await run();
      seen.push(await chargeNow(pool, tenant, intent.idempotencyKey));
    };
    await step(() => tryProviderHold(pool, intent, 60_000));
    await step(() => beginProviderAuthorize(pool, tenant, intent.idempotencyKey));
    await step(() => recordProviderAuthorized(pool, tenant, intent.idempotencyKey, 'pi_evtest1', 'requires_action', { type: 'use_stripe_sdk' }));
    await step(() => recordProviderAuthorized(pool, tenant, intent.idempotencyKey, 'pi_evtest1', 'authorized', null));
    await step(() => beginProviderCapture(pool, tenant, intent.idempotencyKey));
    await step(() => confirmProviderCapture(pool, tenant, intent.idempotencyKey, 1_000));
    const events = await eventsOf(pool, tenant, intent.chargeId);
    expect(events.map((e) => e.type)).toEqual(['charge.reserved', 'charge.requires_action', 'charge.reserved', 'charge.succeeded']);
    expect(events.map((e) => e.object_sequence)).toEqual([1, 2, 3, 4]);
    const rendered = events.map((e) => renderEvent(e, { audit: true }).data.object);
    // Each event's object is the charge as it stood after the step that wrote it.
    expect(rendered[0]).toEqual(seen[0]);
    expect(rendered[1]).toEqual(seen[2]);
    expect(rendered[1]).toMatchObject({ status: 'requires_action', next_action: { type: 'use_stripe_sdk' } });
    expect(rendered[2]).toEqual(seen[3]);
    expect(rendered[3]).toEqual(seen[5]);
  });
});

describe('who writes a charge’s event', () => {
  it('a provider charge cancelled while its authorize is out: no event while cancelling, charge.cancelled once the void is recorded', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-provider-cancel' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    await tryProviderHold(pool, intent, 60_000);
    await beginProviderAuthorize(pool, tenant, intent.idempotencyKey);
    // ledger_cancel releases the hold; the provider may still hold the payment: the API says cancelling.
    await cancelHold(pool, intent, 'cancelled_by_caller');
    expect((await chargeNow(pool, tenant, intent.idempotencyKey)).status).toBe('cancelling');
    expect((await eventsOf(pool, tenant, intent.chargeId)).map((e) => [e.type, e.object_sequence])).toEqual([['charge.reserved', 1]]);
    await recordProviderVoided(pool, tenant, intent.idempotencyKey, null);
    await recordProviderVoided(pool, tenant, intent.idempotencyKey, null);
    const events = await eventsOf(pool, tenant, intent.chargeId);
    expect(events.map((e) => [e.type, e.object_sequence])).toEqual([['charge.reserved', 1], ['charge.cancelled', 2]]);
    expect(renderEvent(events[1]!, { audit: true }).data.object).toEqual(await chargeNow(pool, tenant, intent.idempotencyKey));
  });

  it('a ledger charge’s steps write its events themselves, in their own statements: a rolled-back step leaves none, numbering continues after a replay', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-direct' });
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 250);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(
        'SELECT * FROM ledger_try($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)',
        [...intentParams(intent), 60_000, null, null],
      );
      // Inside the step's transaction, before COMMIT: the step itself has written the event.
      const inside = await client.query('SELECT type, object_sequence FROM events WHERE tenant = $1 AND object_id = $2', [tenant, intent.chargeId]);
      expect(inside.rows).toEqual([{ type: 'charge.reserved', object_sequence: 1 }]);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await eventsOf(pool, tenant, intent.chargeId)).toEqual([]);
    expect(await readCharge(pool, tenant, intent.idempotencyKey)).toBeNull();
    await tryHold(pool, intent, 60_000);
    await tryHold(pool, intent, 60_000);
    await cancelHold(pool, intent, 'cancelled_by_caller');
    await expect(confirmHold(pool, tenant, intent.idempotencyKey, null)).rejects.toThrow();
    expect((await eventsOf(pool, tenant, intent.chargeId)).map((e) => [e.type, e.object_sequence])).toEqual([['charge.reserved', 1], ['charge.cancelled', 2]]);
  });
});

describe('no change without its event, no event without its change', () => {
  it('a step whose transaction fails after its change leaves neither the change nor its event', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-abort' });
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 900);
    await tryHold(pool, intent, 60_000);
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SELECT * FROM ledger_confirm($1, $2, $3)', [tenant, intent.idempotencyKey, null]);
      // The step's change is made; the process dies (or anything fails) before COMMIT.
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect((await readCharge(pool, tenant, intent.idempotencyKey))!.holdState).toBe('TRIED');
    expect((await eventsOf(pool, tenant, intent.chargeId)).map((e) => e.type)).toEqual(['charge.reserved']);
  });

  it('an event that cannot be written fails the step at COMMIT: the charge stays as it was, nothing moved', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-refuse' });
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 900);
    await tryHold(pool, intent, 60_000);
    const before = await pool.query('SELECT posted_minor, pending_minor FROM accounts WHERE tenant = $1 ORDER BY id', [tenant]);
    // Superuser fault injection in this scratch ledger only: every new event of this tenant is refused.
    await pool.query(`ALTER TABLE events ADD CONSTRAINT refuse_test_tenant CHECK (tenant <> '${tenant}') NOT VALID`);
    try {
      await expect(confirmHold(pool, tenant, intent.idempotencyKey, null)).rejects.toThrow(/refuse_test_tenant/);
      await expect(cancelHold(pool, intent, 'cancelled_by_caller')).rejects.toThrow(/refuse_test_tenant/);
      await expect(deposit(pool, tenant, 'payer', 5, newKey('dep'))).rejects.toThrow(/refuse_test_tenant/);
      await expect(tryHold(pool, ledgerIntent(tenant, newKey(), 'payer', 'payee', 1), 60_000)).rejects.toThrow(/refuse_test_tenant/);
    } finally {
      await pool.query('ALTER TABLE events DROP CONSTRAINT refuse_test_tenant');
    }
    expect((await readCharge(pool, tenant, intent.idempotencyKey))!.holdState).toBe('TRIED');
    expect((await pool.query('SELECT posted_minor, pending_minor FROM accounts WHERE tenant = $1 ORDER BY id', [tenant])).rows).toEqual(before.rows);
    expect((await pool.query('SELECT count(*)::int AS n FROM charges WHERE tenant = $1', [tenant])).rows[0].n).toBe(1);
    expect((await pool.query("SELECT count(*)::int AS n FROM transfers WHERE tenant = $1 AND kind <> 'deposit'", [tenant])).rows[0].n).toBe(0);
    // The same step, once events can be written again, commits with its event.
    await confirmHold(pool, tenant, intent.idempotencyKey, null);
    expect((await eventsOf(pool, tenant, intent.chargeId)).map((e) => e.type)).toEqual(['charge.reserved', 'charge.succeeded']);
  });

  it('events are append-only: no update, no delete', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-append' });
    await expect(pool.query("UPDATE events SET type = 'charge.succeeded' WHERE tenant = $1", [tenant])).rejects.toThrow(/append-only/);
    await expect(pool.query('DELETE FROM events WHERE tenant = $1', [tenant])).rejects.toThrow(/append-only/);
  });

  it('the invariants find the outbox and the ledger matching, and name an event whose object is missing or a decided charge without its event', async () => {
    const { pool } = ledger;
    const tenant = await fundedTenant(pool, { label: 'ev-invariants' });
    await openAccount(pool, tenant, 'third');
    const outbox = ['outbox_decisions_have_events', 'outbox_events_have_objects', 'outbox_sequences_gapless'];
    const broken = async () =>
      (await checkLedgerInvariants(pool, tenant)).filter((check) => outbox.includes(check.name) && check.violations > 0).map((check) => check.name);
    const names = (await checkLedgerInvariants(pool, tenant)).map((check) => check.name);
    expect(names).toEqual(expect.arrayContaining(outbox));
    const intent = ledgerIntent(tenant, newKey(), 'payer', 'payee', 100);
    await tryHold(pool, intent, 60_000);
    await confirmHold(pool, tenant, intent.idempotencyKey, null);
    expect(await broken()).toEqual([]);
    // Superuser, this scratch ledger only: a decided charge written past the writers (straight into
    // the table, not by a step, so neither a step nor a trigger writes its event), and an event
    // written by hand for an object that does not exist.
    const bare = ledgerIntent(tenant, newKey(), 'payer', 'payee', 100);
    await pool.query(
      `INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id, payee_account_id,
                            currency, amount_minor, capture_mode, hold_state, failure_reason)
       VALUES ($1, $2, $3, $4, $5, 'payer', 'payee', 'USD', 100, 'automatic', 'CANCELLED', 'cancelled_by_caller')`,
      [tenant, bare.idempotencyKey, bare.chargeId, bare.fingerprint, bare.request.orderId],
    );
    expect(await broken()).toEqual(['outbox_decisions_have_events']);
    await pool.query(
      `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
       VALUES (ledger_event_id(), $1, 'charge.succeeded', 'charge', 'ch_nosuchcharge', 2, '{"object": {}}')`,
      [tenant],
    );
    expect(await broken()).toEqual(['outbox_decisions_have_events', 'outbox_events_have_objects', 'outbox_sequences_gapless']);
  });
});

describe('an existing ledger upgraded to the outbox', () => {
  it('objects from before the writers get one event each, their state then, and the outbox invariants hold', async () => {
    // The ledger as it was before migration 245: every migration up to 240, with today's functions.
    const { pool, url, drop } = await scratchLedgerBefore('1763800000245');
    try {
      const tenant = await fundedTenant(pool, { label: 'ev-upgrade' });
      const succeeded = ledgerIntent(tenant, newKey(), 'payer', 'payee', 500);
      await tryHold(pool, succeeded, 60_000);
      await confirmHold(pool, tenant, succeeded.idempotencyKey, null);
      const refund = await refundCharge(pool, refundIntent(tenant, succeeded.idempotencyKey, 100));
      const held = ledgerIntent(tenant, newKey(), 'payer', 'payee', 300);
      await tryHold(pool, held, 60_000);
      // Today's ledger steps write their charge events themselves, so here (the table exists since
      // 240, unguarded until 245) they did; a ledger from before the outbox had none.
      await pool.query('DELETE FROM events');
      expect((await pool.query('SELECT count(*)::int AS n FROM events')).rows[0].n).toBe(0);

      await migrateLedger(url.toString());
      const types = async (id: string) => (await eventsOf(pool, tenant, id)).map((e) => [e.type, e.object_sequence]);
      // Refunded in part: its last charge event would have been charge.succeeded; the object shows the refund.
      expect(await types(succeeded.chargeId)).toEqual([['charge.succeeded', 1]]);
      expect(renderEvent((await eventsOf(pool, tenant, succeeded.chargeId))[0]!).data.object).toMatchObject({ status: 'partially_refunded' });
      expect(await types(held.chargeId)).toEqual([['charge.reserved', 1]]);
      expect(await types(refund.refund.id)).toEqual([['refund.succeeded', 1]]);
      expect((await pool.query("SELECT count(*)::int AS n FROM events WHERE tenant = $1 AND type = 'deposit.credited'", [tenant])).rows[0].n).toBe(1);
      const outbox = (await checkLedgerInvariants(pool, null)).filter((check) => check.name.startsWith('outbox_'));
      expect(outbox.map((check) => [check.name, check.violations])).toEqual([
        ['outbox_decisions_have_events', 0],
        ['outbox_events_have_objects', 0],
        ['outbox_sequences_gapless', 0],
      ]);
      // And from here on the writers write: the held charge's Confirm is its second event.
      await confirmHold(pool, tenant, held.idempotencyKey, null);
      expect(await types(held.chargeId)).toEqual([['charge.reserved', 1], ['charge.succeeded', 2]]);
    } finally {
      await drop();
    }
  });
});

describe('a ledger with events upgraded to the steps writing them', () => {
  it('a ledger at migration 295 with events of every kind migrates: the numbering goes on, nothing twice, the outbox invariants hold', async () => {
    const { pool, url, drop } = await scratchLedgerBefore('1763800000300');
    try {
      const indexes = async () => (await pool.query<{ indexname: string }>("SELECT indexname FROM pg_indexes WHERE tablename = 'events' ORDER BY indexname")).rows.map((row) => row.indexname);
      expect(await indexes()).toContain('events_by_object');
      const tenant = await fundedTenant(pool, { label: 'ev-upgrade-295' });
      const held = ledgerIntent(tenant, newKey(), 'payer', 'payee', 300);
      await tryHold(pool, held, 60_000);
      const card = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
      await tryProviderHold(pool, card, 60_000);
      await beginProviderAuthorize(pool, tenant, card.idempotencyKey);
      await recordProviderAuthorized(pool, tenant, card.idempotencyKey, 'pi_upgrade295', 'requires_action', { type: 'use_stripe_sdk' });
      const tombstone = ledgerIntent(tenant, newKey(), 'payer', 'payee', 100);
      await cancelHold(pool, tombstone, 'cancelled_by_caller');
      const types = async (id: string) => (await eventsOf(pool, tenant, id)).map((e) => [e.type, e.object_sequence]);
      expect(await types(card.chargeId)).toEqual([['charge.reserved', 1], ['charge.requires_action', 2]]);

      await migrateLedger(url.toString());
      expect(await indexes()).not.toContain('events_by_object');
      await confirmHold(pool, tenant, held.idempotencyKey, null);
      await recordProviderAuthorized(pool, tenant, card.idempotencyKey, 'pi_upgrade295', 'authorized', null);
      const fresh = ledgerIntent(tenant, newKey(), 'payer', 'payee', 200);
      await tryHold(pool, fresh, 60_000);
      await confirmHold(pool, tenant, fresh.idempotencyKey, null);
      await cancelHold(pool, tombstone, 'cancelled_by_caller');
      expect(await types(held.chargeId)).toEqual([['charge.reserved', 1], ['charge.succeeded', 2]]);
      expect(await types(card.chargeId)).toEqual([['charge.reserved', 1], ['charge.requires_action', 2], ['charge.reserved', 3]]);
      expect(await types(tombstone.chargeId)).toEqual([['charge.cancelled', 1]]);
      expect(await types(fresh.chargeId)).toEqual([['charge.reserved', 1], ['charge.succeeded', 2]]);
      const outbox = (await checkLedgerInvariants(pool, null)).filter((check) => check.name.startsWith('outbox_'));
      expect(outbox.map((check) => [check.name, check.violations])).toEqual([
        ['outbox_decisions_have_events', 0],
        ['outbox_events_have_objects', 0],
        ['outbox_sequences_gapless', 0],
      ]);
    } finally {
      await drop();
    }
  });
});

describe('the events table’s checks', () => {
  it('accept exactly what the patterns they replaced accepted (id, type, object_type, object_id), boundaries included', async () => {
    // The patterns of migration 1763800000240, written with bounded repeats (costly in PostgreSQL's
    // regular expressions); migration 1763800000300 states the same rules as unbounded repeats and
    // lengths. Each sample is inserted in a savepoint and rolled back: the table keeps nothing.
    const patterns: Record<'id' | 'type' | 'object_type' | 'object_id', string> = {
      id: '^evt_[A-Za-z0-9]{16,64}$',
      type: '^[a-z][a-z_]{0,31}(\\.[a-z][a-z_]{0,31}){1,3}$',
      object_type: '^[a-z][a-z_]{0,31}$',
      object_id: '^[\\x21-\\x7e]{1,255}$',
    };
    const a = (n: number) => 'a'.repeat(n);
    const samples: Record<keyof typeof patterns, string[]> = {
      id: ['evt_' + a(15), 'evt_' + a(16), 'evt_' + 'Z9'.repeat(32), 'evt_' + a(65), 'evt_' + a(16) + '\n', 'evt_' + a(15) + '-', 'EVT_' + a(16), 'evt_' + a(15) + 'é', 'evt_'],
      type: [
        'charge.succeeded', 'a.b', 'a.b.c.d', 'a.b.c.d.e', 'a', 'charge.', '.charge', 'a..b', 'a_b.c_d', '_a.b', 'a.B', 'a.b\n',
        a(32) + '.b', a(33) + '.b', 'a.' + a(32), 'a.' + a(33), 'a.b.' + a(32), 'a.b.' + a(33), 'a.b.c.' + a(32), 'a.b.c.' + a(33), 'a.b-c',
      ],
      object_type: ['charge', 'webhook_endpoint', a(32), a(33), '_a', 'a_', 'A', '', 'web hook', 'a\n'],
      object_id: ['ch_x', '!', '~', ' ', '\x7f', 'x'.repeat(255), 'x'.repeat(256), '', 'ché', 'a\nb', 'a b'],
    };
    const tenant = await fundedTenant(ledger.pool, { label: 'ev-checks' });
    const client = await ledger.pool.connect();
    try {
      await client.query('BEGIN');
      for (const column of Object.keys(patterns) as (keyof typeof patterns)[]) {
        for (const [n, value] of samples[column].entries()) {
          const row = { id: `evt_${newKey('c').replace(/[^A-Za-z0-9]/g, '').padEnd(20, '0').slice(0, 40)}`, type: 'charge.succeeded', object_type: 'charge', object_id: `ch_checks_${column}_${n}` };
          row[column] = value;
          const expected = (await client.query<{ ok: boolean }>('SELECT $1::text ~ $2::text AS ok', [value, patterns[column]])).rows[0]!.ok;
          await client.query('SAVEPOINT sample');
          const accepted = await client
            .query(
              `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data) VALUES ($1, $2, $3, $4, $5, 1, '{"object": {}}')`,
              [row.id, tenant, row.type, row.object_type, row.object_id],
            )
            .then(
              () => true,
              (error: { constraint?: string }) => {
                // Refused by this column's own check, not by anything else.
                expect(error.constraint, `${column} ${JSON.stringify(value)}`).toBe(`events_${column}_check`);
                return false;
              },
            );
          await client.query('ROLLBACK TO SAVEPOINT sample');
          expect(accepted, `${column} ${JSON.stringify(value)}`).toBe(expected);
        }
      }
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});

describe('one status rule', () => {
  it('the ledger’s ledger_charge_status names every row’s status as statusOfHold does', async () => {
    const holdStates: HoldState[] = ['DECLINED', 'TRIED', 'CONFIRMED', 'CANCELLED'];
    const providerStates = [null, 'authorizing', 'requires_action', 'authorized', 'captured', 'voided', 'declined'];
    const amounts: Array<[number, number]> = [[0, 0], [100, 0], [100, 40], [100, 100]];
    for (const hold of holdStates) {
      for (const provider of providerStates) {
        for (const [captured, refunded] of amounts) {
          const { rows } = await ledger.pool.query<{ status: string }>('SELECT ledger_charge_status($1, $2, $3, $4) AS status', [hold, captured, refunded, provider]);
          expect(rows[0]!.status, `${hold} ${provider} ${captured}/${refunded}`).toBe(statusOfHold(hold, captured, refunded, provider));
        }
      }
    }
  });
});

/**
 * A ledger database of its own, migrated up to (not including) the migration whose file name starts
 * with `firstMigrationNotRun`, with today's functions: an existing ledger before an upgrade.
 */
async function scratchLedgerBefore(firstMigrationNotRun: string): Promise<{ pool: LedgerPool; url: URL; drop: () => Promise<void> }> {
  const admin = new pg.Client({ connectionString: inject('stack').adminDatabaseUrl });
  await admin.connect();
  const name = `scratch_upgrade_${newKey('db').replace(/[^a-z0-9]/g, '_')}`;
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(inject('stack').adminDatabaseUrl);
  url.pathname = `/${name}`;
  const pool = createLedgerPool({ databaseUrl: url.toString(), maxConnections: 2 });
  const drop = async (): Promise<void> => {
    await pool.end();
    await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
    await admin.end();
  };
  try {
    const migrations = fileURLToPath(new URL('../src/ledger/migrations', import.meta.url));
    const before = readdirSync(migrations).filter((file) => /^\d+_.*\.sql$/.test(file) && file < firstMigrationNotRun).length;
    const client = await pool.connect();
    try {
      await runner({ dbClient: client, noLock: true, dir: migrations, direction: 'up', migrationsTable: 'ledger_migrations', count: before, log: () => {} });
      for (const source of ledgerFunctionSources()) await client.query(source.sql);
    } finally {
      client.release();
    }
  } catch (error) {
    await drop();
    throw error;
  }
  return { pool, url, drop };
}
