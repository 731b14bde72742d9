import type { Command } from 'commander';
import { ValidationError } from '../../domain/errors.js';
import { assertProvider } from '../../domain/identifiers.js';
import {
  assertWebhookSecretId,
  defaultRotationOverlapSeconds,
  maxRotationOverlapSeconds,
  secretState,
  type WebhookSecretRecord,
} from '../../service/webhooks.js';
import { addOutputOption, openCliLedger, print, runCommand } from './surface.js';

/**
 * The signing secrets of payment providers' callbacks. A secret is printed once, by `add` or
 * `rotate`; `list` and `revoke` show ids and dates only.
 */

function secretToJson(record: WebhookSecretRecord, nowMs: number) {
  return {
    id: record.id,
    provider: record.provider,
    state: secretState(record, nowMs),
    created_at: record.createdAt,
    expires_at: record.expiresAt,
    revoked_at: record.revokedAt,
  };
}

function describeSecret(record: WebhookSecretRecord, nowMs: number): string {
  const state = secretState(record, nowMs);
  const until = record.expiresAt ? `  expires ${record.expiresAt}` : '  expires never';
  const revoked = record.revokedAt ? `  revoked ${record.revokedAt}` : '';
  return `${record.id}  provider ${record.provider}  ${state}  created ${record.createdAt}${until}${revoked}`;
}

function overlapOption(text: string | undefined): number {
  if (text === undefined) return defaultRotationOverlapSeconds;
  const value = /^[0-9]{1,9}$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(value) || value > maxRotationOverlapSeconds) {
    throw new ValidationError([
      { field: '--overlap-seconds', message: `must be a whole number of seconds from 0 to ${maxRotationOverlapSeconds} (30 days)` },
    ]);
  }
  return value;
}

export function registerWebhookSecretsCommand(program: Command): void {
  const secrets = program
    .command('webhook-secrets')
    .description("payment providers' webhook signing secrets (kept in the database so the server can verify HMACs; printed once)");

  const add = secrets
    .command('add')
    .description("make a signing secret for a provider's callbacks to POST /v1/webhooks/<provider>; printed once")
    .argument('<provider>', 'the provider, as it appears in the callback URL: a-z 0-9 _ - (1-32)');
  addOutputOption(add);
  add.action((provider: string, options: { json?: boolean }) =>
    runCommand(options, async () => {
      assertProvider(provider, '<provider>');
      const cli = await openCliLedger();
      try {
        const { secret, record } = await cli.webhookSecrets.add(provider);
        print(
          options,
          { ...secretToJson(record, Date.now()), secret },
          `${secret}\n(${record.id} for provider ${provider}: give it to the provider now, it is not shown again)`,
        );
      } finally {
        await cli.close();
      }
    }),
  );

  const list = secrets.command('list').description('secrets by id, state and dates, never their values; all providers unless --provider');
  list.option('--provider <name>', 'only this provider');
  addOutputOption(list);
  list.action((options: { provider?: string; json?: boolean }) =>
    runCommand(options, async () => {
      if (options.provider !== undefined) assertProvider(options.provider, '--provider');
      const cli = await openCliLedger();
      try {
        const found = await cli.webhookSecrets.list(options.provider ?? null);
        const nowMs = Date.now();
        print(
          options,
          found.map((record) => secretToJson(record, nowMs)),
          found.length === 0 ? 'no webhook secrets' : found.map((record) => describeSecret(record, nowMs)).join('\n'),
        );
      } finally {
        await cli.close();
      }
    }),
  );

  const rotate = secrets
    .command('rotate')
    .description("a new secret for the provider (printed once); its current secrets keep verifying for --overlap-seconds, then stop")
    .argument('<provider>')
    .option('--overlap-seconds <n>', `how long the current secrets stay valid beside the new one (default ${defaultRotationOverlapSeconds}, 0: stop now)`);
  addOutputOption(rotate);
  rotate.action((provider: string, options: { overlapSeconds?: string; json?: boolean }) =>
    runCommand(options, async () => {
      assertProvider(provider, '<provider>');
      const overlapSeconds = overlapOption(options.overlapSeconds);
      const cli = await openCliLedger();
      try {
        const rotated = await cli.webhookSecrets.rotate(provider, overlapSeconds);
        const nowMs = Date.now();
        const expiring = rotated.expiring.map((record) => `  ${describeSecret(record, nowMs)}`).join('\n');
        print(
          options,
          { ...secretToJson(rotated.record, nowMs), secret: rotated.secret, expiring: rotated.expiring.map((record) => secretToJson(record, nowMs)) },
          `${rotated.secret}\n(${rotated.record.id} for provider ${provider}: give it to the provider now, it is not shown again)\n` +
            `until then these keep verifying:\n${expiring}`,
        );
      } finally {
        await cli.close();
      }
    }),
  );

  const revoke = secrets.command('revoke').description('stop a secret verifying anything, at once (by its id, whk_…)').argument('<secret-id>');
  addOutputOption(revoke);
  revoke.action((id: string, options: { json?: boolean }) =>
    runCommand(options, async () => {
      assertWebhookSecretId(id);
      const cli = await openCliLedger();
      try {
        const revoked = await cli.webhookSecrets.revoke(id);
        print(options, secretToJson(revoked, Date.now()), describeSecret(revoked, Date.now()));
      } finally {
        await cli.close();
      }
    }),
  );
}
