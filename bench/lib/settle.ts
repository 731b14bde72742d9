import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { requestCheckpoint } from '../../src/ledger/maintenance.js';
import type { BenchContext } from './context.js';

const execFileAsync = promisify(execFile);

/**
 * Flushes what earlier phases left for the disk to do before a Temporal phase starts. The dev
 * server's SQLite (rollback journal, synchronous=FULL) fsyncs several times per write, and a
 * PostgreSQL checkpoint of the ledger-only phases' writes, landing minutes later, slowed those
 * fsyncs enough to cut a later phase's throughput by more than half. CHECKPOINT needs a superuser
 * (the embedded server's); against another DATABASE_URL it may be refused, which only costs noise.
 */
export async function settleDisk(ctx: BenchContext): Promise<void> {
  await requestCheckpoint(ctx.ledger);
  await execFileAsync('sync', [], { timeout: 120_000 }).catch((error: unknown) =>
    // Not fatal: the next phase may only meet a flush it would have been spared.
    process.stderr.write(`settling the disk: sync failed: ${(error as Error).message}\n`),
  );
}
