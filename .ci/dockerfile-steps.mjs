// Runs the Dockerfile's steps without a container engine (CI has none), so that an image whose
// `npm ci` refuses the lock, whose build fails, or whose runtime stage misses a dependency fails CI.
// Each stage gets a fresh folder outside the repository standing for its WORKDIR; COPY copies from
// the repository (or, with --from, from an earlier stage's folder), RUN runs in that folder with the
// stage's ENV, on the node first on PATH. Afterwards the last stage's ENTRYPOINT must print its help
// with production dependencies only, and its worker must accept the bundle the image names.
// An instruction this script does not understand fails it, so it cannot drift from the Dockerfile.
//
//   node .ci/dockerfile-steps.mjs [Dockerfile]
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { isAbsolute, join, relative, resolve } from 'node:path';

const repoRoot = resolve(import.meta.dirname ?? new URL('.', import.meta.url).pathname, '..');
const dockerfile = resolve(process.argv[2] ?? join(repoRoot, 'Dockerfile'));
const scratch = mkdtempSync(join(tmpdir(), 'chargeguard-image-'));
const startedAtMs = Date.now();

/** Instructions, with continuation lines joined and comments dropped. */
function instructions(text) {
  const out = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (pending === '' && (line === '' || line.startsWith('#'))) continue;
    if (line.endsWith('\\')) pending += `${line.slice(0, -1)} `;
    else {
      out.push(pending + line);
      pending = '';
    }
  }
  return out;
}

const stages = [];
let stage = null;
const ignored = new Set(['USER', 'EXPOSE', 'LABEL', 'CMD', 'HEALTHCHECK', 'STOPSIGNAL']);

function stagePath(target) {
  if (!isAbsolute(target)) return join(stage.dir, target);
  const inside = relative(stage.workdir, target);
  if (inside.startsWith('..')) throw new Error(`${target} is outside WORKDIR ${stage.workdir}: not emulated`);
  return join(stage.dir, inside);
}

try {
  for (const instruction of instructions(readFileSync(dockerfile, 'utf8'))) {
    const [keyword, ...rest] = instruction.split(/\s+/);
    const args = instruction.slice(keyword.length).trim();
    switch (keyword.toUpperCase()) {
      case 'FROM': {
        const name = /\s+AS\s+(\S+)$/i.exec(args)?.[1] ?? String(stages.length);
        stage = { name, image: rest[0], dir: mkdtempSync(join(scratch, `${name}-`)), workdir: '/', env: {}, entrypoint: null };
        stages.push(stage);
        console.log(`-- stage ${name} (${rest[0]}: here node ${process.version}) in ${stage.dir}`);
        break;
      }
      case 'WORKDIR':
        stage.workdir = args;
        break;
      case 'ENV': {
        const [name, ...value] = args.split('=');
        if (value.length === 0) throw new Error(`ENV ${args}: only the name=value form is emulated`);
        // A path inside WORKDIR means that folder of the stage here, never the host's /app.
        const text = value.join('=');
        stage.env[name] = text === stage.workdir || text.startsWith(`${stage.workdir}/`) ? stagePath(text) : text;
        break;
      }
      case 'COPY': {
        const from = /^--from=(\S+)\s+/.exec(args);
        const paths = (from ? args.slice(from[0].length) : args).split(/\s+/);
        const destination = paths.pop();
        const source = from ? stages.find((s) => s.name === from[1]) : null;
        if (from && !source) throw new Error(`COPY --from=${from[1]}: no such stage`);
        for (const path of paths) {
          const origin = source ? join(source.dir, relative(source.workdir, path)) : join(repoRoot, path);
          const target = destination.endsWith('/') ? join(stagePath(destination), path.split('/').pop()) : stagePath(destination);
          cpSync(origin, target, { recursive: true, filter: (p) => !p.includes('/node_modules') });
        }
        console.log(`COPY ${args}`);
        break;
      }
      case 'RUN': {
        console.log(`RUN ${args}`);
        const stepStartedAtMs = Date.now();
        execFileSync('bash', ['-euo', 'pipefail', '-c', args], { cwd: stage.dir, env: { ...process.env, ...stage.env }, stdio: 'inherit' });
        console.log(`   (${((Date.now() - stepStartedAtMs) / 1000).toFixed(1)} s)`);
        break;
      }
      case 'ENTRYPOINT':
        stage.entrypoint = JSON.parse(args);
        break;
      default:
        if (!ignored.has(keyword.toUpperCase())) throw new Error(`${keyword}: not emulated; teach .ci/dockerfile-steps.mjs what it means`);
    }
  }

  const last = stages.at(-1);
  if (!last?.entrypoint) throw new Error('the last stage has no ENTRYPOINT (exec form) to check');
  const [command, ...entryArgs] = last.entrypoint;
  const run = (args, env = {}) =>
    spawnSync(command === 'node' ? process.execPath : command, [...entryArgs, ...args], {
      cwd: last.dir,
      env: { ...process.env, ...last.env, ...env },
      encoding: 'utf8',
      timeout: 120_000,
    });
  const help = run(['--help']);
  if (help.status !== 0 || !help.stdout.includes('Usage: chargeguard')) throw new Error(`the image's entrypoint --help failed:\n${help.stdout}${help.stderr}`);
  console.log('entrypoint --help: ok (production dependencies only)');
  // Servers nowhere and a 1 ms wait budget: the worker checks its bundle first, then stops on what follows.
  const bundlePath = last.env.CHARGEGUARD_WORKFLOW_BUNDLE;
  if (!bundlePath) throw new Error('the image sets no CHARGEGUARD_WORKFLOW_BUNDLE for its worker');
  if (last.env.NODE_COMPILE_CACHE && readdirSync(last.env.NODE_COMPILE_CACHE).length === 0) throw new Error(`the image's compile cache ${last.env.NODE_COMPILE_CACHE} is empty`);
  const worker = run(['worker'], {
    TEMPORAL_ADDRESS: '127.0.0.1:1',
    DATABASE_URL: 'postgres://nobody@127.0.0.1:1/nothing',
    DEPENDENCY_WAIT_BUDGET_MS: '1',
  });
  const output = `${worker.stdout}${worker.stderr}`;
  // Whatever stops it next (the database, its payload-key settings) is not this check's business.
  if (/error: --bundle /.test(output) || worker.error) throw new Error(`the image's worker did not accept its bundle:\n${output}`);
  console.log(`worker --bundle ${bundlePath}: accepted (built from the image's workflow code)`);
  console.log(`-- Dockerfile steps passed in ${((Date.now() - startedAtMs) / 1000).toFixed(0)} s`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}

