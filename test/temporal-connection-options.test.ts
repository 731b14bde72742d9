import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { temporalConnectionOptions } from '../src/runtime/app-context.js';
import {
  clientConnectionSecurity,
  nativeConnectionSecurity,
  plaintextTemporal,
  temporalConnectionSecurity,
  TemporalConnectionConfigError,
  type TemporalSecuritySettings,
} from '../src/runtime/temporal-connection.js';
import { runCli } from './support/cli.js';

// Shapes only: the TLS handshake itself is exercised in test/temporal-mtls.test.ts.
const certPem = '-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n';
const keyPem = '-----BEGIN PRIVATE KEY-----\nMIGHfake\n-----END PRIVATE KEY-----\n';
const caPem = '-----BEGIN CERTIFICATE-----\nMIIBca\n-----END CERTIFICATE-----\n';
const apiKey = 'tcld_apikey_0123456789abcdefghijklmnopqrstuvwxyz';
const address = 'ns.acct.tmprl.cloud:7233';

let dir: string;
const files = { cert: '', key: '', ca: '', notPem: '', subdir: '' };

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'chargeguard-temporal-tls-'));
  files.cert = join(dir, 'client.pem');
  files.key = join(dir, 'client.key');
  files.ca = join(dir, 'ca.pem');
  files.notPem = join(dir, 'notes.txt');
  files.subdir = join(dir, 'certs');
  await writeFile(files.cert, certPem);
  await writeFile(files.key, keyPem);
  await writeFile(files.ca, caPem);
  await writeFile(files.notPem, 'this is not a certificate');
  await mkdir(files.subdir);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function failureOf(settings: TemporalSecuritySettings): string {
  try {
    temporalConnectionSecurity(settings);
  } catch (error) {
    expect(error).toBeInstanceOf(TemporalConnectionConfigError);
    return (error as Error).message;
  }
  throw new Error('expected the settings to be refused');
}

describe('Temporal connection security from the Temporal CLI/SDK variables', () => {
  it('nothing set: plaintext, no API key (the embedded dev server)', () => {
    expect(temporalConnectionSecurity({})).toBe(plaintextTemporal);
    expect(temporalConnectionSecurity({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS: ' ' })).toBe(plaintextTemporal);
    expect(clientConnectionSecurity(plaintextTemporal)).toEqual({ tls: false });
    expect(temporalConnectionOptions('127.0.0.1:7233')).toMatchObject({ address: '127.0.0.1:7233', tls: false });
    expect(temporalConnectionOptions('127.0.0.1:7233')).not.toHaveProperty('apiKey');
  });

  it('an API key turns TLS on (as Temporal Cloud requires), and the summary never shows it', () => {
    const security = temporalConnectionSecurity({ TEMPORAL_ADDRESS: address, TEMPORAL_API_KEY: apiKey });
    expect(security.tls).toEqual({});
    expect(security.apiKey).toBe(apiKey);
    expect(security.summary).toBe(`TLS, server verified against the system CAs, API key *** (${apiKey.length} chars)`);
    expect(clientConnectionSecurity(security)).toEqual({ tls: {}, apiKey });
    expect(nativeConnectionSecurity(security)).toEqual({ tls: {}, apiKey });
    expect(temporalConnectionOptions(address, security)).toMatchObject({ address, tls: {}, apiKey });
  });

  it('an API key with TEMPORAL_TLS=false stays plaintext (a local server behind an authorizing proxy)', () => {
    const security = temporalConnectionSecurity({ TEMPORAL_ADDRESS: address, TEMPORAL_API_KEY: apiKey, TEMPORAL_TLS: 'false' });
    expect(security.tls).toBeNull();
    expect(clientConnectionSecurity(security)).toEqual({ tls: false, apiKey });
    expect(security.summary).not.toContain(apiKey.slice(-8));
  });

  it('TEMPORAL_TLS=true alone: TLS against the system CAs', () => {
    for (const spelling of ['true', 'TRUE', '1', 't']) {
      expect(temporalConnectionSecurity({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS: spelling }).tls).toEqual({});
    }
  });

  it('mTLS: the files are read at start into the client certificate pair, the CA and the server name', () => {
    const security = temporalConnectionSecurity({
      TEMPORAL_ADDRESS: address,
      TEMPORAL_TLS_CLIENT_CERT_PATH: files.cert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: files.key,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: files.ca,
      TEMPORAL_TLS_SERVER_NAME: 'temporal.internal',
    });
    expect(security.tls).toEqual({
      serverNameOverride: 'temporal.internal',
      serverRootCACertificate: Buffer.from(caPem),
      clientCertPair: { crt: Buffer.from(certPem), key: Buffer.from(keyPem) },
    });
    expect(security.apiKey).toBeNull();
    expect(security.summary).toBe(
      'mTLS (client certificate), server verified against TEMPORAL_TLS_SERVER_CA_CERT, server name temporal.internal, API key (not set)',
    );
  });

  it('inline PEM (*_DATA) works as the files do', () => {
    const security = temporalConnectionSecurity({
      TEMPORAL_ADDRESS: address,
      TEMPORAL_TLS_CLIENT_CERT_DATA: certPem,
      TEMPORAL_TLS_CLIENT_KEY_DATA: keyPem,
      TEMPORAL_TLS_SERVER_CA_CERT_DATA: caPem,
    });
    expect(security.tls).toEqual({ serverRootCACertificate: Buffer.from(caPem), clientCertPair: { crt: Buffer.from(certPem), key: Buffer.from(keyPem) } });
  });

  it('loadConfig carries the variables through to the same result', () => {
    const config = loadConfig({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_SERVER_CA_CERT_PATH: files.ca, TEMPORAL_API_KEY: apiKey });
    expect(temporalConnectionSecurity(config)).toMatchObject({ tls: { serverRootCACertificate: Buffer.from(caPem) }, apiKey });
  });

  it('refuses, naming the variable: missing, unreadable or non-PEM files', () => {
    const missing = join(dir, 'missing.pem');
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_SERVER_CA_CERT_PATH: missing })).toBe(
      `TEMPORAL_TLS_SERVER_CA_CERT_PATH=${missing} cannot be read: no such file`,
    );
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_CLIENT_CERT_PATH: files.subdir, TEMPORAL_TLS_CLIENT_KEY_PATH: files.key })).toBe(
      `TEMPORAL_TLS_CLIENT_CERT_PATH=${files.subdir} cannot be read: is a directory`,
    );
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_CLIENT_CERT_PATH: files.cert, TEMPORAL_TLS_CLIENT_KEY_PATH: files.notPem })).toBe(
      `TEMPORAL_TLS_CLIENT_KEY_PATH (${files.notPem}) holds no PEM block (-----BEGIN …): expected a PEM certificate or key`,
    );
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_SERVER_CA_CERT_DATA: 'not pem' })).toMatch(/^TEMPORAL_TLS_SERVER_CA_CERT_DATA holds no PEM block/);
  });

  it('refuses, naming the variable: half a certificate pair, both forms of one file, contradictions, typos', () => {
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_CLIENT_CERT_PATH: files.cert })).toBe(
      'mTLS needs both halves: the client certificate is set but TEMPORAL_TLS_CLIENT_KEY_PATH (or its _DATA form) is not',
    );
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_CLIENT_KEY_PATH: files.key })).toBe(
      'mTLS needs both halves: the client key is set but TEMPORAL_TLS_CLIENT_CERT_PATH (or its _DATA form) is not',
    );
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_SERVER_CA_CERT_PATH: files.ca, TEMPORAL_TLS_SERVER_CA_CERT_DATA: caPem })).toBe(
      'TEMPORAL_TLS_SERVER_CA_CERT_PATH and TEMPORAL_TLS_SERVER_CA_CERT_DATA are both set: use one of them',
    );
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS: 'false', TEMPORAL_TLS_SERVER_CA_CERT_PATH: files.ca })).toMatch(/^TEMPORAL_TLS=false contradicts/);
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS: 'yes' })).toBe('TEMPORAL_TLS=yes is not a boolean: use true or false');
    expect(failureOf({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'true' })).toMatch(
      /^TEMPORAL_TLS_DISABLE_HOST_VERIFICATION=true is not supported by this client: set TEMPORAL_TLS_SERVER_NAME/,
    );
    expect(temporalConnectionSecurity({ TEMPORAL_ADDRESS: address, TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: 'false', TEMPORAL_TLS: 'true' }).tls).toEqual({});
  });

  it('refuses security settings without TEMPORAL_ADDRESS: the embedded dev server has no TLS', () => {
    expect(failureOf({ TEMPORAL_API_KEY: apiKey, TEMPORAL_TLS: 'true' })).toMatch(/^TEMPORAL_API_KEY, TEMPORAL_TLS set without TEMPORAL_ADDRESS/);
  });

  it('`chargeguard worker` with an unreadable certificate refuses to start, naming the variable, before connecting anywhere', async () => {
    const missing = join(dir, 'gone', 'client.pem');
    const result = await runCli(['worker'], {
      // Nothing listens there: a process that got as far as connecting would wait, not fail fast.
      TEMPORAL_ADDRESS: '127.0.0.1:9',
      TEMPORAL_TLS_CLIENT_CERT_PATH: missing,
      TEMPORAL_TLS_CLIENT_KEY_PATH: files.key,
    });
    expect(result.code).not.toBe(0);
    expect(result.stderr).toContain(`TEMPORAL_TLS_CLIENT_CERT_PATH=${missing} cannot be read: no such file`);
  });
});
