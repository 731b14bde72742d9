import { readFileSync } from 'node:fs';
import type { TLSConfig } from '@temporalio/client';
import { maskToken } from '../support/redact.js';

/**
 * How every connection this program makes to an external Temporal is secured: TLS (server
 * verification, optionally a client certificate for mTLS) and an API key. The variables are the
 * ones the Temporal CLI and SDKs read (environment configuration), so one set of exports serves
 * `temporal` and chargeguard alike. The `*_PATH` files are read once, at start; a missing or
 * unreadable file stops the start with the variable's name.
 */
export const temporalSecurityVariables = [
  'TEMPORAL_API_KEY',
  'TEMPORAL_TLS',
  'TEMPORAL_TLS_CLIENT_CERT_PATH',
  'TEMPORAL_TLS_CLIENT_CERT_DATA',
  'TEMPORAL_TLS_CLIENT_KEY_PATH',
  'TEMPORAL_TLS_CLIENT_KEY_DATA',
  'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
  'TEMPORAL_TLS_SERVER_CA_CERT_DATA',
  'TEMPORAL_TLS_SERVER_NAME',
  'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION',
] as const;

export type TemporalSecurityVariable = (typeof temporalSecurityVariables)[number];
export type TemporalSecuritySettings = Partial<Record<TemporalSecurityVariable | 'TEMPORAL_ADDRESS', string | undefined>>;

export interface TemporalConnectionSecurity {
  /** null: plaintext (the embedded dev server, or TEMPORAL_TLS=false). */
  tls: TLSConfig | null;
  apiKey: string | null;
  /** One line for logs: what is on, never a secret. */
  summary: string;
}

/** A setting that cannot work; the message names the variable. */
export class TemporalConnectionConfigError extends Error {}

export const plaintextTemporal: TemporalConnectionSecurity = { tls: null, apiKey: null, summary: 'plaintext, no API key' };

/**
 * Builds the security of the connections to TEMPORAL_ADDRESS from the settings (the validated
 * config, or the environment). TLS is on when TEMPORAL_TLS=true, when any certificate or server
 * name is given, or when an API key is (Temporal Cloud accepts keys over TLS only), unless
 * TEMPORAL_TLS=false says otherwise.
 */
export function temporalConnectionSecurity(settings: TemporalSecuritySettings): TemporalConnectionSecurity {
  const value = (name: TemporalSecurityVariable): string | undefined => {
    const raw = settings[name];
    return raw === undefined || raw.trim() === '' ? undefined : raw;
  };
  const given = temporalSecurityVariables.filter((name) => value(name) !== undefined);
  if (given.length === 0) return plaintextTemporal;
  if (!settings.TEMPORAL_ADDRESS?.trim()) {
    throw new TemporalConnectionConfigError(
      `${given.join(', ')} set without TEMPORAL_ADDRESS: the embedded dev server speaks plaintext only; ` +
        'point TEMPORAL_ADDRESS at the Temporal these settings are for, or unset them',
    );
  }

  const tlsSwitch = booleanSetting('TEMPORAL_TLS', value('TEMPORAL_TLS'));
  if (booleanSetting('TEMPORAL_TLS_DISABLE_HOST_VERIFICATION', value('TEMPORAL_TLS_DISABLE_HOST_VERIFICATION')) === true) {
    // The TypeScript SDK has no such switch (Temporal's docs: not every SDK applies it); accepting
    // it silently would leave an operator believing verification is off when it is not, or the reverse.
    throw new TemporalConnectionConfigError(
      'TEMPORAL_TLS_DISABLE_HOST_VERIFICATION=true is not supported by this client: set TEMPORAL_TLS_SERVER_NAME to the name ' +
        "in the server's certificate instead",
    );
  }
  const apiKey = value('TEMPORAL_API_KEY') ?? null;
  const clientCert = pemSetting('TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_CERT_DATA', value);
  const clientKey = pemSetting('TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_CLIENT_KEY_DATA', value);
  const serverCa = pemSetting('TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_SERVER_CA_CERT_DATA', value);
  const serverName = value('TEMPORAL_TLS_SERVER_NAME')?.trim();
  if ((clientCert === undefined) !== (clientKey === undefined)) {
    const [has, lacks] = clientCert === undefined ? ['the client key', 'TEMPORAL_TLS_CLIENT_CERT_PATH'] : ['the client certificate', 'TEMPORAL_TLS_CLIENT_KEY_PATH'];
    throw new TemporalConnectionConfigError(`mTLS needs both halves: ${has} is set but ${lacks} (or its _DATA form) is not`);
  }

  const tlsDetailsGiven = clientCert !== undefined || serverCa !== undefined || serverName !== undefined;
  if (tlsSwitch === false && tlsDetailsGiven) {
    throw new TemporalConnectionConfigError(
      'TEMPORAL_TLS=false contradicts the TLS certificate or server name settings that are set: remove one or the other',
    );
  }
  const tlsOn = tlsSwitch ?? (tlsDetailsGiven || apiKey !== null);
  if (!tlsOn) {
    return { tls: null, apiKey, summary: `plaintext (TEMPORAL_TLS=false), API key ${maskToken(apiKey ?? undefined)}` };
  }
  const tls: TLSConfig = {
    ...(serverName !== undefined ? { serverNameOverride: serverName } : {}),
    ...(serverCa !== undefined ? { serverRootCACertificate: serverCa } : {}),
    ...(clientCert !== undefined && clientKey !== undefined ? { clientCertPair: { crt: clientCert, key: clientKey } } : {}),
  };
  const parts = [
    clientCert !== undefined ? 'mTLS (client certificate)' : 'TLS',
    serverCa !== undefined ? 'server verified against TEMPORAL_TLS_SERVER_CA_CERT' : 'server verified against the system CAs',
    ...(serverName !== undefined ? [`server name ${serverName}`] : []),
    `API key ${maskToken(apiKey ?? undefined)}`,
  ];
  return { tls, apiKey, summary: parts.join(', ') };
}

/** The security part of a client `Connection`'s options. */
export function clientConnectionSecurity(security: TemporalConnectionSecurity): { tls: TLSConfig | false; apiKey?: string } {
  return { tls: security.tls ?? false, ...(security.apiKey !== null ? { apiKey: security.apiKey } : {}) };
}

/** The security part of a worker's `NativeConnection` options. */
export function nativeConnectionSecurity(security: TemporalConnectionSecurity): { tls: TLSConfig | false; apiKey?: string } {
  return clientConnectionSecurity(security);
}

/** Go's strconv.ParseBool spellings, which the Temporal CLI accepts; anything else is a typo, not a no. */
function booleanSetting(name: TemporalSecurityVariable, raw: string | undefined): boolean | undefined {
  if (raw === undefined) return undefined;
  const text = raw.trim();
  if (['1', 't', 'T', 'true', 'TRUE', 'True'].includes(text)) return true;
  if (['0', 'f', 'F', 'false', 'FALSE', 'False'].includes(text)) return false;
  throw new TemporalConnectionConfigError(`${name}=${text} is not a boolean: use true or false`);
}

const pemMaxBytes = 1024 * 1024;

/** PEM from a file (read now) or inline; both at once is ambiguous, as Temporal's docs say. */
function pemSetting(
  pathName: TemporalSecurityVariable,
  dataName: TemporalSecurityVariable,
  value: (name: TemporalSecurityVariable) => string | undefined,
): Buffer | undefined {
  const path = value(pathName)?.trim();
  const data = value(dataName);
  if (path !== undefined && data !== undefined) {
    throw new TemporalConnectionConfigError(`${pathName} and ${dataName} are both set: use one of them`);
  }
  if (data !== undefined) return checkedPem(dataName, Buffer.from(data, 'utf8'));
  if (path === undefined) return undefined;
  let content: Buffer;
  try {
    content = readFileSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : (error as Error).message;
    throw new TemporalConnectionConfigError(`${pathName}=${path} cannot be read: ${why}`);
  }
  return checkedPem(`${pathName} (${path})`, content);
}

function checkedPem(what: string, content: Buffer): Buffer {
  if (content.length > pemMaxBytes) throw new TemporalConnectionConfigError(`${what} is larger than ${pemMaxBytes} bytes: not a PEM certificate or key`);
  if (!content.toString('utf8').includes('-----BEGIN ')) {
    throw new TemporalConnectionConfigError(`${what} holds no PEM block (-----BEGIN …): expected a PEM certificate or key`);
  }
  return content;
}
