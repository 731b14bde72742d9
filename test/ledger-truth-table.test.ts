import { describe, expect, it } from 'vitest';
import type { ChargeIntent, HoldState } from '../src/domain/charge.js';
import { deposit } from '../src/ledger/accounts.js';
import { cancelHold, confirmHold, readCharge, tryHold, type LedgerCharge } from '../src/ledger/charges.js';
import { LedgerRefusalError } from '../src/ledger/errors.js';
import { balanceOf, captureCount, expectLedgerInvariants, fundedTenant, ledgerIntent, newKey, useHarness } from './support/harness.js';

// Every cell of the ledger truth table (docs/contract.md, Ledger), each operation run five times at
// once and once more afterwards: every run must give the same answer and move money at most once.

const h = useHarness();

const holdTtlMs = 60_000;
const startingBalanceMinor = 10_000;
const concurrentRuns = 5;

type Op = 'try' | 'confirm' | 'cancel';
type Start = 'none' | HoldState;

interface Cell {
  tenant: string;
  key: string;
  intent: ChargeIntent;
}

async function newCell(amountMinor = 1_000): Promise<Cell> {
  const tenant = await fundedTenant(h, { label: 'tt', payerMinor: startingBalanceMinor });
  const key = newKey();
  return { tenant, key, intent: ledgerIntent(tenant, key, 'payer', 'payee', amountMinor) };
}

function run(cell: Cell, op: Op): Promise<LedgerCharge> {
  switch (op) {
    case 'try':
      return tryHold(h.pool, cell.intent, holdTtlMs);
    case 'confirm':
      return confirmHold(h.pool, cell.tenant, cell.key, null);
    case 'cancel':
      return cancelHold(h.pool, cell.intent, 'requested_by_caller');
  }
}

/** Brings a fresh cell into the given hold state through the ledger's own operations. */
async function arrange(start: Start): Promise<Cell> {
  if (start === 'DECLINED') {
    const cell = await newCell(startingBalanceMinor + 1);
    expect((await run(cell, 'try')).holdState).toBe('DECLINED');
    return cell;
  }
  const cell = await newCell();
  if (start === 'TRIED' || start === 'CONFIRMED') await run(cell, 'try');
  if (start === 'CONFIRMED') await run(cell, 'confirm');
  if (start === 'CANCELLED') {
    await run(cell, 'try');
    await run(cell, 'cancel');
  }
  return cell;
}

type Answer = { holdState: HoldState } | { refused: string };

async function answer(promise: Promise<LedgerCharge>): Promise<Answer> {
  try {
    return { holdState: (await promise).holdState };
  } catch (error) {
    if (error instanceof LedgerRefusalError) return { refused: error.type };
    throw error;
  }
}

/** Runs the operation concurrently, then once more, and checks all answers are the one expected. */
async function runRepeatedly(cell: Cell, op: Op, expected: Answer): Promise<void> {
  const concurrent = await Promise.all(Array.from({ length: concurrentRuns }, () => answer(run(cell, op))));
  const after = await answer(run(cell, op));
  for (const a of [...concurrent, after]) expect(a).toEqual(expected);
}

async function balances(cell: Cell) {
  const payer = await balanceOf(h.pool, cell.tenant, 'payer');
  const payee = await balanceOf(h.pool, cell.tenant, 'payee');
  return { payerPosted: payer.postedMinor, payerPending: payer.pendingMinor, payeePosted: payee.postedMinor };
}

const untouched = { payerPosted: startingBalanceMinor, payerPending: 0, payeePosted: 0 };
const held = { payerPosted: startingBalanceMinor, payerPending: 1_000, payeePosted: 0 };
const captured = { payerPosted: startingBalanceMinor - 1_000, payerPending: 0, payeePosted: 1_000 };

interface Row {
  op: Op;
  start: Start;
  expected: Answer;
  balancesAfter: ReturnType<typeof Object>;
  stateAfter: HoldState | null;
}

const table: Row[] = [
  { op: 'try', start: 'none', expected: { holdState: 'TRIED' }, balancesAfter: held, stateAfter: 'TRIED' },
  { op: 'try', start: 'DECLINED', expected: { holdState: 'DECLINED' }, balancesAfter: untouched, stateAfter: 'DECLINED' },
  { op: 'try', start: 'TRIED', expected: { holdState: 'TRIED' }, balancesAfter: held, stateAfter: 'TRIED' },
  { op: 'try', start: 'CONFIRMED', expected: { holdState: 'CONFIRMED' }, balancesAfter: captured, stateAfter: 'CONFIRMED' },
  { op: 'try', start: 'CANCELLED', expected: { refused: 'HoldCancelled' }, balancesAfter: untouched, stateAfter: 'CANCELLED' },
  { op: 'confirm', start: 'none', expected: { refused: 'HoldNotTried' }, balancesAfter: untouched, stateAfter: null },
  { op: 'confirm', start: 'DECLINED', expected: { refused: 'HoldDeclined' }, balancesAfter: untouched, stateAfter: 'DECLINED' },
  { op: 'confirm', start: 'TRIED', expected: { holdState: 'CONFIRMED' }, balancesAfter: captured, stateAfter: 'CONFIRMED' },
  { op: 'confirm', start: 'CONFIRMED', expected: { holdState: 'CONFIRMED' }, balancesAfter: captured, stateAfter: 'CONFIRMED' },
  { op: 'confirm', start: 'CANCELLED', expected: { refused: 'HoldCancelled' }, balancesAfter: untouched, stateAfter: 'CANCELLED' },
  { op: 'cancel', start: 'none', expected: { holdState: 'CANCELLED' }, balancesAfter: untouched, stateAfter: 'CANCELLED' },
  { op: 'cancel', start: 'DECLINED', expected: { holdState: 'DECLINED' }, balancesAfter: untouched, stateAfter: 'DECLINED' },
  { op: 'cancel', start: 'TRIED', expected: { holdState: 'CANCELLED' }, balancesAfter: untouched, stateAfter: 'CANCELLED' },
  { op: 'cancel', start: 'CONFIRMED', expected: { refused: 'HoldAlreadyCaptured' }, balancesAfter: captured, stateAfter: 'CONFIRMED' },
  { op: 'cancel', start: 'CANCELLED', expected: { holdState: 'CANCELLED' }, balancesAfter: untouched, stateAfter: 'CANCELLED' },
];

describe('ledger truth table: every cell, five at once and once more', () => {
  it.each(table)('$op when the hold is $start', async ({ op, start, expected, balancesAfter, stateAfter }) => {
    const cell = await arrange(start);
    await runRepeatedly(cell, op, expected);
    expect(await balances(cell)).toEqual(balancesAfter);
    expect((await readCharge(h.pool, cell.tenant, cell.key))?.holdState ?? null).toBe(stateAfter);
    expect(await captureCount(h.pool, cell.tenant, cell.key)).toBe(stateAfter === 'CONFIRMED' ? 1 : 0);
    await expectLedgerInvariants(h.pool, cell.tenant);
  });
});

describe('ledger edge cases', () => {
  it('a Try declined for lack of funds stays declined after the payer is funded', async () => {
    const cell = await newCell(startingBalanceMinor + 1);
    expect((await run(cell, 'try')).charge.declineCode).toBe('insufficient_funds');
    await deposit(h.pool, cell.tenant, 'payer', 1_000_000, 'funded-later');
    expect((await run(cell, 'try')).holdState).toBe('DECLINED');
    expect((await balanceOf(h.pool, cell.tenant, 'payer')).pendingMinor).toBe(0);
    await expectLedgerInvariants(h.pool, cell.tenant);
  });

  it('Try with another fingerprint under the same key is refused and reserves nothing', async () => {
    const cell = await newCell();
    await run(cell, 'try');
    const other = { ...cell.intent, fingerprint: 'f'.repeat(64), request: { ...cell.intent.request, amountMinor: 2_000 } };
    await expect(answer(tryHold(h.pool, other, holdTtlMs))).resolves.toEqual({ refused: 'IdempotencyConflict' });
    expect(await balances(cell)).toEqual(held);
    await expectLedgerInvariants(h.pool, cell.tenant);
  });

  it('Try and Cancel racing on a fresh key: either the hold is released or it never happened', async () => {
    for (let round = 0; round < 10; round++) {
      const cell = await newCell();
      const answers = await Promise.all([answer(run(cell, 'try')), answer(run(cell, 'cancel'))]);
      // Whatever the order, the end state is CANCELLED with nothing held and nothing moved.
      expect(answers[1]).toEqual({ holdState: 'CANCELLED' });
      expect(answers[0]).toSatisfy(
        (a: Answer) => ('holdState' in a && a.holdState === 'TRIED') || ('refused' in a && a.refused === 'HoldCancelled'),
      );
      expect(await balances(cell)).toEqual(untouched);
      await expectLedgerInvariants(h.pool, cell.tenant);
    }
  });

  it('Confirm and Cancel racing on a held charge: exactly one wins and the money matches the winner', async () => {
    for (let round = 0; round < 10; round++) {
      const cell = await arrange('TRIED');
      const [confirmed, cancelled] = await Promise.all([answer(run(cell, 'confirm')), answer(run(cell, 'cancel'))]);
      const state = (await readCharge(h.pool, cell.tenant, cell.key))!.holdState;
      if (state === 'CONFIRMED') {
        expect(confirmed).toEqual({ holdState: 'CONFIRMED' });
        expect(cancelled).toEqual({ refused: 'HoldAlreadyCaptured' });
        expect(await balances(cell)).toEqual(captured);
      } else {
        expect(state).toBe('CANCELLED');
        expect(cancelled).toEqual({ holdState: 'CANCELLED' });
        expect(confirmed).toEqual({ refused: 'HoldCancelled' });
        expect(await balances(cell)).toEqual(untouched);
      }
      await expectLedgerInvariants(h.pool, cell.tenant);
    }
  });

  it('the journal refuses updates and deletes', async () => {
    const cell = await arrange('CONFIRMED');
    await expect(h.pool.query('UPDATE journal_entries SET amount_minor = amount_minor WHERE tenant = $1', [cell.tenant])).rejects.toThrow(
      /append-only/,
    );
    await expect(h.pool.query('DELETE FROM transfers WHERE tenant = $1', [cell.tenant])).rejects.toThrow(/append-only/);
  });
});
