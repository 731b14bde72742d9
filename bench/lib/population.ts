import { createAccount, deposit } from '../../src/ledger/accounts.js';
import type { LedgerPool } from '../../src/ledger/pool.js';
import { runBounded } from './load.js';

/** The accounts one scenario charges between, all in one tenant of its own. */
export interface Population {
  tenant: string;
  payers: string[];
  payees: string[];
}

/** Enough for every charge a phase can make: the bench measures charges, not declines. */
const payerDepositMinor = 1_000_000_000_000;

export async function openPopulation(
  pool: LedgerPool,
  options: { tenant: string; payers: number; payees: number },
): Promise<Population> {
  const payers = Array.from({ length: options.payers }, (_, i) => `payer-${String(i).padStart(5, '0')}`);
  const payees = Array.from({ length: options.payees }, (_, i) => `payee-${String(i).padStart(5, '0')}`);
  await runBounded(payers.length + payees.length, 8, async (i) => {
    const id = i < payers.length ? payers[i]! : payees[i - payers.length]!;
    const created = await createAccount(pool, { tenant: options.tenant, id, currency: 'USD', allowOverdraft: false });
    if ('conflict' in created) throw new Error(`account ${id} exists with other settings`);
    if (i < payers.length) await deposit(pool, options.tenant, id, payerDepositMinor, `bench-open-${id}`);
  });
  return { tenant: options.tenant, payers, payees };
}

/** Picks an account for the n-th charge of a phase. */
export type Picker = (sequence: number) => string;

/** Every account in turn: no two concurrent charges share an account while there are more accounts than callers. */
export function spreadPicker(accounts: readonly string[], offset = 0): Picker {
  return (sequence) => accounts[(sequence + offset) % accounts.length]!;
}

/**
 * `hotShare` of the charges go to the first `hotCount` accounts (evenly), the rest spread over the
 * others: P4's "10 accounts take 90% of the traffic". Deterministic in the sequence number.
 */
export function skewedPicker(accounts: readonly string[], hotCount: number, hotShare: number): Picker {
  const cold = accounts.slice(hotCount);
  return (sequence) => {
    const draw = mix(sequence);
    if (draw % 1000 < hotShare * 1000) return accounts[(draw >>> 10) % hotCount]!;
    return cold[(draw >>> 10) % cold.length]!;
  };
}

/** A 32-bit integer hash (splitmix-style): spreads consecutive sequence numbers. */
function mix(value: number): number {
  let x = (value + 0x9e3779b9) >>> 0;
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b) >>> 0;
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35) >>> 0;
  return (x ^ (x >>> 16)) >>> 0;
}
