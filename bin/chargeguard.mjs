#!/usr/bin/env node
// The chargeguard CLI (`npm run cli -- …`, or this file on PATH): runs the compiled JavaScript in
// dist/, not the TypeScript sources under tsx, which compiled every module again on every call
// (3-7 s a command). dist/ is rebuilt here, once, when the sources changed since it was built
// (build/sources-stamp.mjs); concurrent calls wait for one build instead of racing it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import module from 'node:module';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { sourcesStamp, stampFileName } from '../build/sources-stamp.mjs';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const outDir = join(repoRoot, 'dist');
const lockDir = `${outDir}.lock`;
/** A build takes well under a minute; a lock this old was left by a build that died. */
const staleLockMs = 10 * 60 * 1000;
/** How long a call waits for another call's build before giving up. */
const lockWaitMs = 15 * 60 * 1000;
const lockPollMs = 200;

const builtStamp = () => {
  try {
    return readFileSync(join(outDir, stampFileName), 'utf8').trim();
  } catch {
    return null;
  }
};

const sleep = (ms) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

function holderGone() {
  let pid;
  try {
    pid = Number(readFileSync(join(lockDir, 'pid'), 'utf8'));
    process.kill(pid, 0);
  } catch (error) {
    // No pid file yet (the holder is just writing it) counts as held, unless the lock is old.
    if (pid !== undefined && error.code === 'ESRCH') return true;
  }
  const ageMs = Date.now() - (statSync(lockDir, { throwIfNoEntry: false })?.mtimeMs ?? Date.now());
  return ageMs > staleLockMs;
}

function withBuildLock(body) {
  const deadlineMs = Date.now() + lockWaitMs;
  for (;;) {
    try {
      mkdirSync(lockDir);
      break;
    } catch (error) {
      if (error.code !== 'EEXIST') throw error;
      if (holderGone()) {
        rmSync(lockDir, { recursive: true, force: true });
        continue;
      }
      if (Date.now() > deadlineMs) throw new Error(`another build of the CLI holds ${lockDir} for over ${lockWaitMs / 60_000} minutes; remove it if no build is running`);
      sleep(lockPollMs);
    }
  }
  try {
    writeFileSync(join(lockDir, 'pid'), String(process.pid));
    body();
  } finally {
    rmSync(lockDir, { recursive: true, force: true });
  }
}

/** dist/ built from the sources as they are now, building it if it is not. */
function ensureBuilt() {
  const wanted = sourcesStamp(repoRoot);
  if (builtStamp() === wanted) return;
  withBuildLock(() => {
    // Another call may have built it while this one waited.
    if (builtStamp() === sourcesStamp(repoRoot)) return;
    process.stderr.write('chargeguard: compiling the CLI into dist/ (the sources changed since it was built; once per change)…\n');
    // On stderr: a command's stdout (its JSON) stays the command's own.
    const build = spawnSync(process.execPath, ['--import', 'tsx', join(repoRoot, 'build', 'build.ts'), outDir, '--no-workflow-bundle'], {
      cwd: repoRoot,
      stdio: ['ignore', 2, 2],
    });
    if (build.status !== 0) {
      process.stderr.write(`chargeguard: the build failed (${build.error?.message ?? `exit ${build.status ?? build.signal}`}); \`npm run build\` shows why\n`);
      process.exit(1);
    }
  });
}

ensureBuilt();
// Node 22.1+: V8 keeps the compiled code of dist/ and node_modules between calls (a no-op before).
module.enableCompileCache?.();
const args = process.argv.slice(2);
// The top-level help lists every command, which would load every command's module: the build
// recorded it (build/build.ts), and it is printed from there.
if (args.length === 1 && ['--help', '-h', 'help'].includes(args[0])) {
  const help = (() => {
    try {
      return readFileSync(join(outDir, 'cli-help.txt'), 'utf8');
    } catch {
      return null;
    }
  })();
  if (help !== null) {
    process.stdout.write(help);
    process.exit(0);
  }
}
await import(pathToFileURL(join(outDir, 'src', 'cli', 'main.js')).href);
