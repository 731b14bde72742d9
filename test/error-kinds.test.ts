import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { createApiKey, principalForApiKey } from '../src/auth/api-keys.js';
import { chargeActorOf } from '../src/auth/principal.js';
import { exitCodeFor } from '../src/cli/commands/surface.js';
import { problemFor } from '../src/http/problem.js';
import { outputSchemas } from '../src/mcp/output-schemas.js';
import { errorResult } from '../src/mcp/tool-results.js';
import { AccountConflictError } from '../src/service/accounts-service.js';
import { errorKinds, type ErrorKindName } from '../src/domain/error-kinds.js';
import {
  ChargeDeclinedError,
  ChargeStateConflictError,
  ForbiddenError,
  IdempotencyConflictError,
  MandateExceededError,
  NotFoundError,
  OverloadedError,
  RateLimitedError,
  RefundNotAuthorizedError,
  UnauthorizedError,
  UnavailableError,
  ValidationError,
} from '../src/domain/errors.js';
import { chargeBody, fundedTenant, newKey, useHarness } from './support/harness.js';

/** One error of every kind: a kind added to the table and missing here fails to compile. */
const oneOfEach: Record<ErrorKindName, () => unknown> = {
  validation_error: () => new ValidationError([{ field: 'amount', message: 'must be at least 1' }]),
  unauthorized: () => new UnauthorizedError('the API key is unknown, revoked or expired'),
  forbidden: () => new ForbiddenError('accounts.open', 'agent keys may not open accounts'),
  mandate_exceeded: () => new MandateExceededError('max_amount', 'amount 5000 exceeds this key\'s largest charge of 1000'),
  refund_not_authorized: () => new RefundNotAuthorizedError('the acting key may not refund for this tenant'),
  not_found: () => new NotFoundError('no charge with idempotency key k'),
  charge_state_conflict: () => new ChargeStateConflictError('ChargeAlreadySucceeded', 'refund it instead'),
  account_conflict: () => new AccountConflictError('account payer exists with currency EUR'),
  idempotency_conflict: () => new IdempotencyConflictError('key k was first used for another request'),
  charge_declined: () => new ChargeDeclinedError('insufficient_funds', 'declined'),
  rate_limited: () => new RateLimitedError('rate_limited', 'key', 2, 'over the key\'s request rate'),
  open_holds_exceeded: () => new RateLimitedError('open_holds_exceeded', 'tenant', 1, 'too many open holds'),
  overloaded: () => new OverloadedError(1, 'this process is deciding as many new charges as it can'),
  service_unavailable: () => new UnavailableError('database', 'PostgreSQL did not answer'),
  internal_error: () => new TypeError('a bug'),
};

describe('error kinds: one table, every surface reads it', () => {
  // What the SDK declares for a tool (draft-07), so every kind's tool error is checked against it.
  const ajv = new Ajv({ allErrors: true });
  const validators = Object.entries(outputSchemas).map(([name, schema]) => ({
    name,
    validate: ajv.compile(z.toJSONSchema(schema, { target: 'draft-7', io: 'output' })),
  }));

  for (const [name, make] of Object.entries(oneOfEach) as [ErrorKindName, () => unknown][]) {
    const kind = errorKinds[name];
    it(`${name}: HTTP ${kind.status}, MCP ${kind.retry}, exit ${kind.exitCode}`, () => {
      const problem = problemFor(make(), 3);
      expect(problem.body).toMatchObject({ type: name, status: kind.status, title: kind.title });

      const tool = errorResult(make());
      expect(tool.isError).toBe(true);
      expect((tool.structuredContent as any).error).toMatchObject({ type: name, retry: kind.retry, next_step: kind.nextStep });
      expect((tool.content[0] as { text: string }).text).toContain(kind.nextStep);
      for (const { name: tool_, validate } of validators) {
        expect(validate(tool.structuredContent), `${tool_}: ${ajv.errorsText(validate.errors)}`).toBe(true);
      }

      expect(exitCodeFor(make())).toBe(kind.exitCode);
    });
  }

  it("docs/api.md's table of errors on every surface is the table's", () => {
    const doc = readFileSync(resolve(import.meta.dirname, '../docs/api.md'), 'utf8');
    const table = /<!-- error-kinds:start -->([\s\S]*?)<!-- error-kinds:end -->/.exec(doc)?.[1] ?? '';
    const rows = [...table.matchAll(/^\| `(\w+)` \| (\d+) \| `(\w+)` \| (\d+) \|$/gm)].map(([, type, status, retry, exit]) => [type, Number(status), retry, Number(exit)]);
    expect(rows).toEqual(Object.entries(errorKinds).map(([type, kind]) => [type, kind.status, kind.retry, kind.exitCode]));
  });

  it('the protocol headers go with their kinds: WWW-Authenticate with 401, Retry-After with 429 and 503', () => {
    expect(problemFor(oneOfEach.unauthorized(), 3).headers).toEqual({ 'www-authenticate': 'Bearer realm="chargeguard"' });
    expect(problemFor(oneOfEach.rate_limited(), 3).headers).toEqual({ 'retry-after': '2' });
    expect(problemFor(oneOfEach.service_unavailable(), 3).headers).toEqual({ 'retry-after': '3' });
    expect(problemFor(oneOfEach.rate_limited(), 3).body).toMatchObject({ scope: 'key', 'violated-policies': ['key'] });
  });
});

const h = useHarness();

describe('RefundNotAuthorized from the ledger', () => {
  it('a refund without a key in a tenant that has keys is a 403 refund_not_authorized, "do not retry"; nothing is refunded', async () => {
    const tenant = await fundedTenant(h, { label: 'refund-not-authorized' });
    const { key } = await createApiKey(h.pool, tenant, 'agent');
    const actor = chargeActorOf((await principalForApiKey(h.pool, key))!)!;
    const chargeKey = newKey('keyed');
    const charged = await h.client.charge(tenant, chargeKey, chargeBody({ amount: 700 }), { actor });
    expect(charged.charge.status).toBe('succeeded');

    const refusal = await h.client.refund(tenant, chargeKey, newKey('keyless-refund'), {}).then(
      () => null,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(RefundNotAuthorizedError);
    expect(problemFor(refusal, 1).body).toMatchObject({ type: 'refund_not_authorized', status: 403 });
    expect((errorResult(refusal).structuredContent as any).error.retry).toBe('do_not_retry');
    expect((await h.client.getCharge(tenant, chargeKey)).amountRefundedMinor).toBe(0);
  });
});

describe('module boundaries', () => {
  it('no module under src/api imports src/mcp or src/codec (they are handed to the API as routes)', () => {
    const root = resolve(import.meta.dirname, '..');
    const apiDir = join(root, 'src/api');
    const offending: string[] = [];
    const files = readdirSync(apiDir, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
    expect(files.length).toBeGreaterThan(5);
    for (const file of files) {
      const path = join(apiDir, file);
      for (const [, specifier] of readFileSync(path, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
        if (!specifier!.startsWith('.')) continue;
        const target = relative(root, resolve(join(path, '..'), specifier!));
        if (/^src\/(mcp|codec)\//.test(target)) offending.push(`${relative(root, path)} -> ${target}`);
      }
    }
    expect(offending).toEqual([]);
  });
});
