import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';

/**
 * The ledger's functions and trigger functions, one source file each (`NN_<function>.sql`, one
 * `CREATE OR REPLACE FUNCTION`): the current definition of each, in one place. The versioned
 * migrations keep the history (they restate whole functions as they were then); after they have
 * run, every file here is applied again, in file-name order, in one transaction, inside the same
 * migration lock. A fresh database and one migrated long ago therefore end with the same functions.
 *
 * The folder sits inside migrations/ so it ships wherever the migrations do; node-pg-migrate reads
 * only files, never subfolders.
 *
 * Re-creating an unchanged function only makes prepared plans replan. A change of a function's
 * result type cannot be done with CREATE OR REPLACE: a versioned migration drops the function
 * first (and callers' prepared plans of the old result type fail once; see charges.ts).
 * Versioned migrations run before this step, so none of them may rely on a definition made here.
 */
const repeatableDir = fileURLToPath(new URL('./migrations/repeatable', import.meta.url));

const sourceFilePattern = /^\d{2}_([a-z_]+)\.sql$/;

export interface LedgerFunctionSource {
  /** The function the file defines, from its name. */
  name: string;
  file: string;
  sql: string;
}

/** Every function source, in the order they are applied; `dir` reads a copy (experiments). */
export function ledgerFunctionSources(dir: string = repeatableDir): LedgerFunctionSource[] {
  const files = readdirSync(dir).filter((file) => file.endsWith('.sql')).sort();
  return files.map((file) => {
    const name = sourceFilePattern.exec(file)?.[1];
    // A file that does not say which function it holds, or in what order, would be applied in
    // an order nobody chose.
    if (name === undefined) throw new Error(`ledger function source ${file} is not named NN_<function>.sql`);
    return { name, file, sql: readFileSync(join(dir, file), 'utf8') };
  });
}

/** The current definition of one ledger function, as its source file has it. */
export function ledgerFunctionSource(name: string, dir: string = repeatableDir): LedgerFunctionSource {
  const source = ledgerFunctionSources(dir).find((candidate) => candidate.name === name);
  if (!source) throw new Error(`no ledger function source defines ${name}`);
  return source;
}

/** (Re)creates every ledger function, all or none. The caller holds the migration lock. */
export async function applyLedgerFunctions(client: pg.ClientBase, log: (line: string) => void): Promise<void> {
  const sources = ledgerFunctionSources();
  await client.query('BEGIN');
  try {
    for (const source of sources) {
      try {
        await client.query(source.sql);
      } catch (error) {
        // Rethrown as it is: its SQLSTATE tells the caller whether waiting for the database helps.
        log(`ledger function source ${source.file} failed: ${(error as Error).message}`);
        throw error;
      }
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => log(`rolling back the ledger functions failed: ${(rollbackError as Error).message}`));
    throw error;
  }
  log(`ledger functions applied: ${sources.map((source) => source.name).join(', ')}`);
}
