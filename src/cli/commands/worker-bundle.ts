import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * A prebuilt workflow bundle (`npm run build`) names the workflow code it was made of, so that a
 * worker given one with `--bundle` can refuse a bundle of other workflow code: a worker whose
 * workflows differ from its peers' replays their histories differently, which Temporal reports as
 * nondeterminism on executions that were fine.
 *
 * The workflow code is every file of the folders workflow code may import from (the lint rules
 * allow workflows/ and src/domain/ only; activities as types, which compile to nothing). Its hash
 * is recorded for both forms it runs in, TypeScript sources under tsx and tsc's output in a build,
 * so a worker of either form checks the bundle against the code it runs.
 */
export const workflowSourceDirs = ['workflows', join('src', 'domain')] as const;

export type CodeForm = 'typescript' | 'javascript';
export type WorkflowSourceHashes = Record<CodeForm, string>;

/** The bundle's first line: a comment, so the bundle stays the JavaScript the worker evaluates. */
const headerPrefix = '// chargeguard-workflow-sources ';

function isSource(name: string, form: CodeForm): boolean {
  return form === 'typescript' ? name.endsWith('.ts') && !name.endsWith('.d.ts') : name.endsWith('.js');
}

// Walked by hand: Dirent.parentPath, which readdir's `recursive` needs, is newer than Node 20.11.
async function filesUnder(dir: string, form: CodeForm): Promise<string[]> {
  const found: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) found.push(...(await filesUnder(path, form)));
    else if (entry.isFile() && isSource(entry.name, form)) found.push(path);
  }
  return found;
}

/** SHA-256 over each workflow source file's path (relative to `codeRoot`, `/`-separated) and bytes, in path order. */
export async function workflowSourcesHash(codeRoot: string, form: CodeForm): Promise<string> {
  const files = (await Promise.all(workflowSourceDirs.map((dir) => filesUnder(join(codeRoot, dir), form)))).flat();
  const named = files.map((file) => ({ file, name: relative(codeRoot, file).split(sep).join('/') }));
  named.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const hash = createHash('sha256');
  for (const { file, name } of named) {
    hash.update(`${name}\0`);
    hash.update(await readFile(file));
    hash.update('\0');
  }
  return hash.digest('hex');
}

/** The line the build puts before the bundle's code. */
export function workflowBundleHeader(hashes: WorkflowSourceHashes): string {
  return `${headerPrefix}${JSON.stringify(hashes)}\n`;
}

/** The workflow code this process runs: sources under tsx, tsc's output in a build. */
function runningCode(): { codeRoot: string; form: CodeForm } {
  const self = import.meta.url;
  return { codeRoot: fileURLToPath(new URL('../../../', self)), form: self.endsWith('.js') ? 'javascript' : 'typescript' };
}

function recordedHashes(code: string): Partial<WorkflowSourceHashes> | undefined {
  if (!code.startsWith(headerPrefix)) return undefined;
  try {
    const parsed: unknown = JSON.parse(code.slice(headerPrefix.length, code.indexOf('\n')));
    return typeof parsed === 'object' && parsed !== null ? (parsed as Partial<WorkflowSourceHashes>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The bundle at `path` if it was built from the workflow code this process runs; otherwise an error
 * saying what is wrong with it and how to get a right one. Reads the whole bundle (a few MB, once
 * per start).
 */
export async function checkedWorkflowBundle(path: string): Promise<{ codePath: string }> {
  const codePath = resolve(path);
  let code: string;
  try {
    code = await readFile(codePath, 'utf8');
  } catch (error) {
    throw new Error(`--bundle ${codePath}: cannot read the workflow bundle (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const { codeRoot, form } = runningCode();
  const recorded = recordedHashes(code)?.[form];
  if (typeof recorded !== 'string') {
    throw new Error(`--bundle ${codePath}: not a bundle made by \`npm run build\` (it names no workflow sources); build one, or start without --bundle to bundle at start`);
  }
  const running = await workflowSourcesHash(codeRoot, form);
  if (recorded !== running) {
    throw new Error(
      `--bundle ${codePath}: built from other workflow code than this worker runs (sources ${recorded.slice(0, 12)}, running ${running.slice(0, 12)}); ` +
        'rebuild it from this code (`npm run build`), or start without --bundle to bundle at start',
    );
  }
  return { codePath };
}
