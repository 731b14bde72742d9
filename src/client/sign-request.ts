import { createHash, createHmac, randomBytes } from 'node:crypto';

/**
 * Signs a request for an API key created with `--require-signature` (RFC 9421 HTTP Message
 * Signatures, hmac-sha256): returns the Content-Digest, Signature-Input and Signature headers to
 * add. The request still carries `Authorization: Bearer <key>`.
 *
 * Self-contained on purpose (Node's crypto only), so a client can copy it; it builds the signature
 * base by hand for the few components it signs, which also makes it an independent check of the
 * server's verifier in the tests.
 */

export interface SignRequestInput {
  method: string;
  /** The absolute URL the request is sent to, query included, as the client sends it. */
  url: string;
  /** The request's other headers; an Idempotency-Key or Idempotency-Token among them is covered by the signature. */
  headers?: Record<string, string>;
  /** The exact body bytes sent (a string is sent as UTF-8); none for a GET. */
  body?: string | Uint8Array;
  /** The API key's id (key_…), as `api-keys create` printed it. */
  keyId: string;
  /** The signing secret (cgsig_…) printed once with the key. */
  secret: string;
  /** Single-use per key; 128 random bits by default. */
  nonce?: string;
  /** Seconds since the epoch; now by default. */
  created?: number;
  /** Override the covered components (tests use it to leave one out); the defaults cover what the server requires. */
  components?: string[];
  /** The signature's label in the Signature and Signature-Input dictionaries. */
  label?: string;
}

export interface SignatureHeaders {
  'content-digest': string;
  'signature-input': string;
  signature: string;
}

/** RFC 8941 sf-string: quoted, with backslash and double quote escaped. */
function sfString(text: string): string {
  return `"${text.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

function headerValue(headers: Record<string, string>, name: string): string | undefined {
  const found = Object.entries(headers).find(([key]) => key.toLowerCase() === name);
  return found?.[1];
}

export function signRequest(input: SignRequestInput): SignatureHeaders {
  const url = new URL(input.url);
  const contentDigest = `sha-256=:${createHash('sha256').update(input.body ?? '').digest('base64')}:`;
  const headers: Record<string, string> = { ...input.headers, 'content-digest': contentDigest };
  const components =
    input.components ??
    ['@method', '@target-uri', 'content-digest', ...['idempotency-key', 'idempotency-token'].filter((name) => headerValue(headers, name) !== undefined)];

  const valueOf = (component: string): string => {
    switch (component) {
      case '@method':
        return input.method.toUpperCase();
      case '@target-uri':
        return url.href;
      case '@authority':
        return url.host.toLowerCase();
      case '@path':
        return url.pathname;
      case '@query':
        return url.search === '' ? '?' : url.search;
      default: {
        if (component.startsWith('@')) throw new Error(`signRequest does not derive ${component}`);
        const value = headerValue(headers, component);
        if (value === undefined) throw new Error(`cannot cover ${component}: the request has no such header`);
        return value.trim();
      }
    }
  };

  const created = input.created ?? Math.floor(Date.now() / 1000);
  const nonce = input.nonce ?? randomBytes(16).toString('base64url');
  const signatureParams =
    `(${components.map((c) => `"${c}"`).join(' ')})` +
    `;created=${created};keyid=${sfString(input.keyId)};alg="hmac-sha256";nonce=${sfString(nonce)}`;
  const base = [...components.map((c) => `"${c}": ${valueOf(c)}`), `"@signature-params": ${signatureParams}`].join('\n');
  const mac = createHmac('sha256', Buffer.from(input.secret, 'utf8')).update(base, 'utf8').digest('base64');
  const label = input.label ?? 'sig1';
  return {
    'content-digest': contentDigest,
    'signature-input': `${label}=${signatureParams}`,
    signature: `${label}=:${mac}:`,
  };
}
