/**
 * What the webhook deliverer beside the worker costs a charge at one caller when no endpoint exists
 * (P1 at N = 1, where the bench runs the deliverer as a deployed worker does). Not part of `npm run
 * bench`: run it with `npx tsx bench/experiments/charge-deliverer-ab.ts [rounds] [charges-per-block]`
 * on a quiet machine. On a fresh bench stack with an in-process worker (eager start), one caller
 * makes charges through ChargeService one at a time, in blocks: the production deliverer and pruner
 * (src/runtime/webhook-deliverer.ts, the configuration's defaults) running, then stopped, the order
 * alternating each round (on off, off on, …) so drift falls on both. Printed: p50 and mean of a
 * charge per side and the on ÷ off ratio of each, with PostgreSQL's statements per second of the
 * deliverer's idle polling (pg_stat_database's xact_commit over a quiet block).
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.js';
import { startWebhookDeliverer } from '../../src/runtime/webhook-deliverer.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { startBenchStack } from '../lib/bench-stack.js';
import { openPopulation } from '../lib/population.js';
import { mean, openInProcessSession, quantile, timedCharges } from './in-process-charges.js';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';

const rounds = Number(process.argv[2] ?? 6);
const perBlock = Number(process.argv[3] ?? 40);
const warmup = 30;

const dataDir = join(tmpdir(), `chargeguard-deliverer-ab-${process.pid}`);
const stack = await startBenchStack({ dataDir, sqlitePragmas: [...defaultSqlitePragmas], keepData: false, log: (l) => console.error(l) });
try {
  const session = await openInProcessSession(stack, dataDir, 'ab');
  const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 2 });
  try {
    const population = await openPopulation(ledger, { tenant: 'ab', payers: 2_000, payees: 200 });
    const oneCharge = timedCharges(session, population);
    const config = loadConfig({ ...process.env, WEBHOOK_DELIVERY: 'on', WEBHOOK_ALLOW_HTTP: 'on', WEBHOOK_ALLOW_LOOPBACK: 'on' });
    const startDeliverer = () => startWebhookDeliverer(config, stack.databaseUrl, { log: (line) => console.error(`deliverer: ${line}`) })!;
    const commits = async (): Promise<number> =>
      Number((await ledger.query<{ n: string }>('SELECT sum(xact_commit)::text AS n FROM pg_stat_database')).rows[0]!.n);

    // The deliverer's own statements when nothing else runs: transactions per second, with and without it.
    const quietMs = 4_000;
    const idleRate = async (): Promise<number> => {
      const before = await commits();
      await new Promise((resolve) => setTimeout(resolve, quietMs));
      return ((await commits()) - before - 1) / (quietMs / 1000);
    };
    const idleOff = await idleRate();
    const probe = startDeliverer();
    const idleOn = await idleRate();
    await probe.stop();

    for (let i = 0; i < warmup; i++) await oneCharge();
    const on: number[] = [];
    const off: number[] = [];
    const perRound: string[] = [];
    for (let round = 0; round < rounds; round++) {
      const order = round % 2 === 0 ? ['on', 'off'] : ['off', 'on'];
      const block: Record<string, number[]> = { on: [], off: [] };
      for (const side of order) {
        const deliverer = side === 'on' ? startDeliverer() : null;
        for (let i = 0; i < perBlock; i++) block[side]!.push(await oneCharge());
        await deliverer?.stop();
      }
      on.push(...block.on!);
      off.push(...block.off!);
      perRound.push((quantile(block.on!, 0.5) / quantile(block.off!, 0.5)).toFixed(3));
      console.error(`round ${round + 1}: p50 on ${quantile(block.on!, 0.5).toFixed(2)} ms, off ${quantile(block.off!, 0.5).toFixed(2)} ms`);
    }
    console.log(`\nOne caller, ChargeService.charge, ${rounds} rounds of ${perBlock} charges per side\n`);
    console.log('| deliverer | p50 | mean | p90 |');
    console.log('|---|---:|---:|---:|');
    for (const [name, xs] of [['running (no endpoint)', on], ['stopped', off]] as const) {
      console.log(`| ${name} | ${quantile(xs, 0.5).toFixed(2)} ms | ${mean(xs).toFixed(2)} ms | ${quantile(xs, 0.9).toFixed(2)} ms |`);
    }
    console.log(`\np50 running ÷ stopped: ${(quantile(on, 0.5) / quantile(off, 0.5)).toFixed(3)} (per round ${perRound.join(' ')}); mean ${(mean(on) / mean(off)).toFixed(3)}`);
    console.log(`PostgreSQL transactions per second with nothing else running: deliverer stopped ${idleOff.toFixed(1)}, running ${idleOn.toFixed(1)}`);
  } finally {
    await ledger.end();
    await session.close();
  }
} finally {
  await stack.stop();
}
