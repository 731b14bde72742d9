/**
 * What the event writes in the ledger's Try and Confirm cost a whole charge at one caller (P1 at
 * N = 1), end to end, in one process. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/charge-sql-ab.ts <commit> [rounds] [charges-per-block]` on a quiet
 * machine. The worker's client code is the same at both commits; only the SQL functions differ. So
 * on one fresh bench stack with an in-process worker (eager start), one caller makes charges through
 * ChargeService one at a time, in blocks: with this tree's ledger_try and ledger_confirm, then with
 * the commit's (repeatable/06 and 07 read with `git show`, replaced in place), the order alternating
 * each round so drift falls on both. The events the older functions do not write are missing in this
 * scratch ledger, which is thrown away. Printed: p50 and mean of a charge per side, and their ratios.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { startBenchStack } from '../lib/bench-stack.js';
import { openPopulation } from '../lib/population.js';
import { mean, openInProcessSession, quantile, timedCharges } from './in-process-charges.js';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';

const olderCommit = process.argv[2];
if (olderCommit === undefined) throw new Error('usage: charge-sql-ab.ts <commit> [rounds] [charges-per-block]');
const rounds = Number(process.argv[3] ?? 6);
const perBlock = Number(process.argv[4] ?? 40);
const stepFiles = ['06_ledger_try.sql', '07_ledger_confirm.sql'];
const functionsOf = {
  older: stepFiles.map((file) => execFileSync('git', ['show', `${olderCommit}:src/ledger/migrations/repeatable/${file}`], { encoding: 'utf8' })),
  tree: stepFiles.map((file) => readFileSync(new URL(`../../src/ledger/migrations/repeatable/${file}`, import.meta.url), 'utf8')),
};
const warmup = 30;

const dataDir = join(tmpdir(), `chargeguard-charge-sql-ab-${process.pid}`);
const stack = await startBenchStack({ dataDir, sqlitePragmas: [...defaultSqlitePragmas], keepData: false, log: (l) => console.error(l) });
try {
  const session = await openInProcessSession(stack, dataDir, 'ab');
  const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 2 });
  try {
    const population = await openPopulation(ledger, { tenant: 'ab', payers: 2_000, payees: 200 });
    const oneCharge = timedCharges(session, population);
    const useFunctions = async (side: 'older' | 'tree'): Promise<void> => {
      for (const sql of functionsOf[side]) await ledger.query(sql);
    };
    for (let i = 0; i < warmup; i++) await oneCharge();
    const events = async (): Promise<number> => Number((await ledger.query<{ n: string }>('SELECT count(*)::text AS n FROM events')).rows[0]!.n);
    const on: number[] = [];
    const off: number[] = [];
    // on: this tree's functions (events written); off: the older commit's.
    const perRound: string[] = [];
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? ['on', 'off'] : ['off', 'on'];
      const block: Record<string, number[]> = { on: [], off: [] };
      for (const side of order) {
        await useFunctions(side === 'on' ? 'tree' : 'older');
        for (let i = 0; i < perBlock; i++) block[side]!.push(await oneCharge());
      }
      on.push(...block.on!);
      off.push(...block.off!);
      perRound.push((quantile(block.on!, 0.5) / quantile(block.off!, 0.5)).toFixed(3));
      console.error(`round ${round + 1} (events so far ${await events()}): p50 on ${quantile(block.on!, 0.5).toFixed(2)} ms, off ${quantile(block.off!, 0.5).toFixed(2)} ms`);
    }
    console.log(`\nOne caller, ChargeService.charge, ${rounds} rounds of ${perBlock} charges per side\n`);
    console.log('| ledger functions | p50 | mean | p90 |');
    console.log('|---|---:|---:|---:|');
    for (const [name, xs] of [['this tree\'s Try and Confirm', on], [`${olderCommit}'s`, off]] as const) {
      console.log(`| ${name} | ${quantile(xs, 0.5).toFixed(2)} ms | ${mean(xs).toFixed(2)} ms | ${quantile(xs, 0.9).toFixed(2)} ms |`);
    }
    console.log(`\np50 this tree ÷ older: ${(quantile(on, 0.5) / quantile(off, 0.5)).toFixed(3)} (per round ${perRound.join(' ')}); mean ${(mean(on) / mean(off)).toFixed(3)}`);
  } finally {
    await ledger.end();
    await session.close();
  }
} finally {
  await stack.stop();
}
