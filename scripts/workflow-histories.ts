/**
 * What the history recorder (scripts/record-workflow-histories.ts) and the replay test
 * (test/workflow-replay.test.ts) must agree on: where histories live, the manifest that lists
 * them, how patch markers are read out of a history, and the hash of the workflow code.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultPayloadConverter } from '@temporalio/common';
import protoModule from '@temporalio/proto';
import ts from 'typescript';

const proto = protoModule.temporal.api;
export type History = protoModule.temporal.api.history.v1.IHistory;
export type HistoryEvent = protoModule.temporal.api.history.v1.IHistoryEvent;
export const EventType = proto.enums.v1.EventType;

export const repoDir = fileURLToPath(new URL('../', import.meta.url));
export const historiesDir = join(repoDir, 'test', 'histories');
export const manifestPath = join(historiesDir, 'manifest.json');
/** The bundle's entry: what the worker passes to the bundler as workflowsPath. */
export const workflowsEntry = join(repoDir, 'workflows', 'index.ts');
export const codeChangedMessage =
  'workflow code changed since histories were recorded: run npm run record-histories and commit the new histories';

export interface WorkflowCodeHash {
  sha256: string;
  /** The workflow SDK runs inside the bundle too: an upgrade can change what a replay sees. */
  sdk: string;
  /** Per source file (repository-relative, '/'-separated), so a mismatch can say what changed. */
  files: Record<string, string>;
}

export interface HistoryEntry {
  /** Relative to test/histories, '/'-separated. */
  file: string;
  /** The recorder's name for the path through the code that this history took. */
  path: string;
  about: string;
  workflowType: string;
  /** Replay needs it: a history does not carry its workflow id. */
  workflowId: string;
  /** Patch ids of the history's patch markers, in the order they were first recorded. */
  patches: string[];
  events: number;
}

/**
 * Histories recorded from one version of the workflow code. Every generation stays replayable for
 * as long as executions started by that version can still be open or queried.
 */
export interface Generation {
  name: string;
  recordedAt: string | null;
  /** The commit the recorded code was at, and whether it had uncommitted changes. */
  recordedFrom: string | null;
  /** Null for generations recorded before the hash existed. */
  codeHash: WorkflowCodeHash | null;
  note?: string;
  /** Per workflow type: patch ids every history of that type in this generation must carry. */
  requiredPatches: Record<string, string[]>;
  histories: HistoryEntry[];
}

export interface Manifest {
  about: string;
  /** Oldest first; the last one was recorded from the code the hash check compares with. */
  generations: Generation[];
}

export const manifestAbout =
  'Written by npm run record-histories (scripts/record-workflow-histories.ts). Every history listed ' +
  'here is replayed against the current workflow code by test/workflow-replay.test.ts; see docs/deploying-workflow-changes.md.';

export async function readManifest(): Promise<Manifest> {
  return JSON.parse(await readFile(manifestPath, 'utf8')) as Manifest;
}

export async function writeManifest(manifest: Manifest): Promise<void> {
  await writeFile(manifestPath, `${JSON.stringify(manifest, null, 2)}\n`);
}

export function latestGeneration(manifest: Manifest): Generation | undefined {
  return manifest.generations.at(-1);
}

export function decodeHistory(bytes: Uint8Array): History {
  return proto.history.v1.History.decode(bytes);
}

export function encodeHistory(history: History): Uint8Array {
  // Binary protobuf: the exact bytes Temporal serves, with no JSON mapping in between.
  return proto.history.v1.History.encode(history).finish();
}

export async function readHistory(entry: HistoryEntry): Promise<History> {
  return decodeHistory(await readFile(join(historiesDir, ...entry.file.split('/'))));
}

export function workflowTypeOf(history: History): string {
  const started = history.events?.[0]?.workflowExecutionStartedEventAttributes;
  if (!started?.workflowType?.name) throw new Error('history does not start with WorkflowExecutionStarted');
  return started.workflowType.name;
}

/** The marker name the SDK core gives patch markers (patched() and deprecatePatch()). */
export const patchMarkerName = 'core_patch';
/** The marker name of a local activity's result. */
export const localActivityMarkerName = 'core_local_activity';

/**
 * The patch id a patch marker carries. Core 1.24 writes it in the marker's details under
 * `patch-data`, a JSON payload {id, deprecated}; older cores under `patch_id`, the id alone.
 */
export function patchIdOf(event: HistoryEvent): string | null {
  const marker = event.markerRecordedEventAttributes;
  if (event.eventType !== EventType.EVENT_TYPE_MARKER_RECORDED || marker?.markerName !== patchMarkerName) return null;
  const data = marker.details?.['patch-data']?.payloads?.[0];
  const legacy = marker.details?.['patch_id']?.payloads?.[0];
  const decoded: unknown = data ? defaultPayloadConverter.fromPayload(data) : undefined;
  const id: unknown =
    decoded && typeof decoded === 'object' && 'id' in decoded
      ? decoded.id
      : legacy
        ? defaultPayloadConverter.fromPayload(legacy)
        : undefined;
  if (typeof id !== 'string') {
    throw new Error(`patch marker ${String(event.eventId)} carries no patch id this code can read: ${JSON.stringify(marker.details)}`);
  }
  return id;
}

/**
 * The activities a history ran, in the order they were scheduled: local ones from their markers
 * (core writes the activity type into each marker's `data`), remote ones from their scheduled
 * events. What a path checks to know which branch the workflow took.
 */
export function activityTypesOf(history: History): string[] {
  return (history.events ?? []).flatMap((event) => {
    const scheduled = event.activityTaskScheduledEventAttributes?.activityType?.name;
    if (scheduled) return [scheduled];
    const marker = event.markerRecordedEventAttributes;
    if (event.eventType !== EventType.EVENT_TYPE_MARKER_RECORDED || marker?.markerName !== localActivityMarkerName) return [];
    const data = marker.details?.['data']?.payloads?.[0];
    const decoded: unknown = data ? defaultPayloadConverter.fromPayload(data) : undefined;
    const type: unknown = decoded && typeof decoded === 'object' && 'activity_type' in decoded ? decoded.activity_type : undefined;
    if (typeof type !== 'string') throw new Error(`local activity marker ${String(event.eventId)} names no activity type this code can read`);
    return [type];
  });
}

export function patchMarkers(history: History): string[] {
  const ids = (history.events ?? []).map(patchIdOf).filter((id): id is string => id !== null);
  return [...new Set(ids)];
}

// ---------------------------------------------------------------------------------------------
// The workflow code hash.
//
// What counts as a change: the JavaScript each source file of the workflow bundle compiles to,
// token by token, plus the workflow SDK's version. What does not: comments, whitespace and line
// breaks, and TypeScript-only code (types, interfaces, `import type`), none of which reaches the
// bundle. Files reached only through `import type` (activities/) are not part of the bundle and
// are not hashed. A rename of a local variable does count: cheap to re-record, and deciding
// which code changes are "harmless" is exactly what the replay of the older generations is for.
// ---------------------------------------------------------------------------------------------

/** The bundle's own sources: the entry and every relative module it imports for its values. */
export function workflowSources(entry: string = workflowsEntry): string[] {
  const seen = new Set<string>();
  const pending = [resolve(entry)];
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
    for (const statement of source.statements) {
      const specifier = valueImportSpecifier(statement);
      if (specifier?.startsWith('.')) pending.push(resolveRelative(file, specifier));
    }
  }
  return [...seen].sort();
}

function valueImportSpecifier(statement: ts.Statement): string | null {
  if (ts.isImportDeclaration(statement)) {
    if (statement.importClause?.isTypeOnly) return null;
    return ts.isStringLiteral(statement.moduleSpecifier) ? statement.moduleSpecifier.text : null;
  }
  if (ts.isExportDeclaration(statement) && statement.moduleSpecifier && !statement.isTypeOnly) {
    return ts.isStringLiteral(statement.moduleSpecifier) ? statement.moduleSpecifier.text : null;
  }
  return null;
}

function resolveRelative(from: string, specifier: string): string {
  const base = resolve(dirname(from), specifier);
  const candidates = [base.replace(/\.js$/, '.ts'), `${base}.ts`, join(base, 'index.ts'), base];
  const found = candidates.find((candidate) => candidate.endsWith('.ts') && existsSync(candidate));
  if (!found) throw new Error(`${relative(repoDir, from)} imports ${specifier}, which resolves to no TypeScript file`);
  return found;
}

/** The file's emitted JavaScript as a token list: comments, formatting and types gone. */
function normalisedTokens(file: string): string[] {
  const emitted = ts.transpileModule(readFileSync(file, 'utf8'), {
    fileName: file,
    compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, removeComments: true },
  }).outputText;
  const js = ts.createSourceFile(`${file}.js`, emitted, ts.ScriptTarget.Latest, true, ts.ScriptKind.JS);
  const tokens: string[] = [];
  // Walking the tree rather than scanning the text: template literals and regular expressions
  // then come out as whole tokens, so whitespace inside them still counts.
  const visit = (node: ts.Node): void => {
    const children = node.getChildren(js);
    if (children.length === 0) {
      if (node.kind !== ts.SyntaxKind.EndOfFileToken) tokens.push(node.getText(js));
      return;
    }
    children.forEach(visit);
  };
  visit(js);
  return tokens;
}

function sdkVersion(): string {
  const packageJson = join(repoDir, 'node_modules', '@temporalio', 'workflow', 'package.json');
  const { version } = JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string };
  return `@temporalio/workflow@${version}`;
}

export function workflowCodeHash(entry: string = workflowsEntry): WorkflowCodeHash {
  const files: Record<string, string> = {};
  for (const file of workflowSources(entry)) {
    const name = relative(repoDir, file).split(sep).join('/');
    files[name] = createHash('sha256').update(JSON.stringify(normalisedTokens(file))).digest('hex');
  }
  const sdk = sdkVersion();
  const all = createHash('sha256').update(sdk);
  for (const [name, hash] of Object.entries(files)) all.update(`\n${name} ${hash}`);
  return { sha256: all.digest('hex'), sdk, files };
}

/** Which files differ between two hashes, for a message a person can act on. */
export function describeCodeHashChange(recorded: WorkflowCodeHash | null, current: WorkflowCodeHash): string {
  if (!recorded) return 'the newest generation was recorded without a code hash';
  const lines: string[] = [];
  if (recorded.sdk !== current.sdk) lines.push(`workflow SDK: ${recorded.sdk} -> ${current.sdk}`);
  for (const [name, hash] of Object.entries(current.files)) {
    if (!(name in recorded.files)) lines.push(`added:   ${name}`);
    else if (recorded.files[name] !== hash) lines.push(`changed: ${name}`);
  }
  for (const name of Object.keys(recorded.files)) if (!(name in current.files)) lines.push(`removed: ${name}`);
  return lines.join('\n');
}
