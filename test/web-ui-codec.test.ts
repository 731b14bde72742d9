import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { codecEndpointUrl, codecSessionCookie, loopbackUiOrigins, registerCodecRoutes, withCodecCorsOrigins } from '../src/codec/codec-routes.js';
import { codecSessionTtlMs, codecSessionValid, codecSessionValue } from '../src/codec/codec-token.js';
import { EncryptionCodec } from '../src/codec/encryption-codec.js';
import { parsePayloadKeyRing } from '../src/codec/key-ring.js';
import { findFreePorts } from '../src/support/free-port.js';
import { isPortAccepting } from '../src/support/wait.js';
import { waitFor } from './support/harness.js';
import { chargeThroughStart, openBrowser, openWorkflowPage, ownStackEnv, printedSessionUrl, runCli, startCodecSession, uiCodecSettings } from './support/web-ui.js';

const token = randomBytes(32).toString('base64url');
const uiOrigin = 'http://127.0.0.1:18233';

describe('the codec session (the Web UI presents the codec token as a cookie)', () => {
  const ring = parsePayloadKeyRing(`k1:${randomBytes(32).toString('base64')}`)!;
  let nowMs = Date.parse('2026-01-01T00:00:00Z');
  let app: FastifyInstance;
  beforeAll(async () => {
    app = Fastify();
    await registerCodecRoutes(app, { ring, token, corsOrigins: [uiOrigin], nowMs: () => nowMs });
    await app.ready();
  });
  afterAll(async () => {
    await app?.close();
  });

  const sealedBody = async () => {
    const [sealed] = await new EncryptionCodec(ring, { onUndecodable: 'throw', plaintext: 'refuse' }).encode([
      { metadata: { encoding: Buffer.from('json/plain') }, data: Buffer.from('{"amount":4321}') },
    ]);
    return {
      payloads: [
        {
          metadata: Object.fromEntries(Object.entries(sealed!.metadata!).map(([name, value]) => [name, Buffer.from(value!).toString('base64')])),
          data: Buffer.from(sealed!.data!).toString('base64'),
        },
      ],
    };
  };
  const decodeWithCookie = async (cookie: string | null) =>
    app.inject({
      method: 'POST',
      url: '/codec/decode',
      headers: { 'content-type': 'application/json', origin: uiOrigin, ...(cookie === null ? {} : { cookie }) },
      payload: JSON.stringify(await sealedBody()),
    });

  it('serves a form, refuses a missing or wrong token naming the field, and sets an HttpOnly, SameSite=Strict cookie scoped to /codec for the right one', async () => {
    const form = await app.inject({ method: 'GET', url: '/codec/session' });
    expect(form.statusCode).toBe(200);
    expect(form.headers['content-type']).toContain('text/html');
    expect(form.headers['content-security-policy']).toContain("default-src 'none'");
    expect(form.body).toContain('name="token"');

    const post = (payload: string) => app.inject({ method: 'POST', url: '/codec/session', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload });
    const missing = await post('other=1');
    expect(missing.statusCode).toBe(400);
    expect(missing.json()).toMatchObject({ type: 'validation_error', errors: [{ field: 'token' }] });
    const wrong = await post(`token=${token}x`);
    expect(wrong.statusCode).toBe(401);
    expect(wrong.headers['set-cookie']).toBeUndefined();

    const right = await post(new URLSearchParams({ token }).toString());
    expect(right.statusCode).toBe(200);
    const setCookie = String(right.headers['set-cookie']);
    expect(setCookie).toMatch(new RegExp(`^${codecSessionCookie}=\\d+\\.[A-Za-z0-9_-]{43}; Path=/codec; Max-Age=${codecSessionTtlMs / 1000}; HttpOnly; SameSite=Strict$`));
    // The browser holds a MAC, never the token.
    expect(setCookie).not.toContain(token);
    const cookie = setCookie.split(';')[0]!;

    const decoded = await decodeWithCookie(cookie);
    expect(decoded.statusCode).toBe(200);
    expect(decoded.headers['access-control-allow-origin']).toBe(uiOrigin);
    expect(decoded.headers['access-control-allow-credentials']).toBe('true');
    expect(Buffer.from((decoded.json() as { payloads: Array<{ data: string }> }).payloads[0]!.data, 'base64').toString()).toBe('{"amount":4321}');
  });

  it('refuses a session that expired, was altered, was minted under another token, or is no session at all', async () => {
    const { value, expiresAtMs } = codecSessionValue(token, nowMs);
    expect(codecSessionValid(token, value, nowMs)).toBe(true);
    const [expiry, mac] = value.split('.') as [string, string];
    const cases: Array<[string, string | null]> = [
      ['none', null],
      ['altered expiry', `${Number(expiry) + 1}.${mac}`],
      ['altered MAC', `${expiry}.${mac.slice(0, 10)}${mac[10] === 'A' ? 'B' : 'A'}${mac.slice(11)}`],
      // The last character's two unused bits: another spelling of the same bytes is not the MAC either.
      ['respelled MAC', `${expiry}.${mac.slice(0, -1)}${String.fromCharCode(mac.charCodeAt(42) ^ 1)}`],
      ['another token', codecSessionValue(`${token}x`, nowMs).value],
      ['the token itself', token],
    ];
    for (const [what, presented] of cases) {
      expect(codecSessionValid(token, presented, nowMs), what).toBe(false);
      const refused = await decodeWithCookie(presented === null ? null : `${codecSessionCookie}=${presented}`);
      expect(refused.statusCode, what).toBe(401);
      expect(refused.body).not.toContain('4321');
    }
    const saved = nowMs;
    nowMs = expiresAtMs;
    try {
      expect((await decodeWithCookie(`${codecSessionCookie}=${value}`)).statusCode).toBe(401);
    } finally {
      nowMs = saved;
    }
  });

  it('allows the UI origin of the port start picked, besides the configured ones, each once', () => {
    expect(withCodecCorsOrigins('http://127.0.0.1:8233, http://localhost:8233', loopbackUiOrigins(9233))).toBe(
      'http://127.0.0.1:8233,http://localhost:8233,http://127.0.0.1:9233,http://localhost:9233',
    );
    expect(withCodecCorsOrigins('http://127.0.0.1:8233', loopbackUiOrigins(8233))).toBe('http://127.0.0.1:8233,http://localhost:8233');
    expect(codecEndpointUrl('0.0.0.0', 3000)).toBe('http://127.0.0.1:3000/codec');
    expect(codecEndpointUrl('::1', 3000)).toBe('http://[::1]:3000/codec');
  });
});

describe('the Web UI that `chargeguard start` runs', () => {
  it(
    'decodes a charge input after the one step the docs name (the codec session page start prints), in a real browser, and shows only ciphertext without it',
    { timeout: 400_000 },
    async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-web-ui-'));
      // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
      await chmod(dataDir, 0o755);
      const [apiPort, uiPort] = await findFreePorts(2);
      const apiUrl = `http://127.0.0.1:${apiPort}`;
      const uiUrl = `http://127.0.0.1:${uiPort}`;
      // docs/operations.md, dev shape: start with a codec token, nothing else.
      const start = runCli(['start', '--port', String(apiPort), '--ui-port', String(uiPort)], ownStackEnv(dataDir, { CHARGEGUARD_CODEC_TOKEN: token }));
      const browser = await openBrowser();
      try {
        await start.until(/Ctrl-C stops everything\./, 'start to be running');
        const output = start.output();
        expect(output).toContain(`Temporal Web UI: ${uiUrl}`);
        expect(output).toContain(`decodes payloads through ${apiUrl}/codec`);
        // One step: no codec drawer settings to make by hand.
        expect(output).not.toContain('codec server settings');
        expect(output).not.toContain(token);
        const sessionUrl = printedSessionUrl(output);
        expect(sessionUrl).toBe(`${apiUrl}/codec/session`);
        // The UI's settings, as the browser reads them: this API's codec endpoint, sending the session cookie.
        expect(await uiCodecSettings(uiUrl)).toMatchObject({ Endpoint: `${apiUrl}/codec`, IncludeCredentials: true, PassAccessToken: false });
        const charge = await chargeThroughStart(output, apiUrl);

        // Without a session: the UI's decode calls are refused, the input stays ciphertext.
        const stranger = await browser.context.newPage();
        const refusedStatuses: number[] = [];
        stranger.on('response', (response) => {
          if (response.url().endsWith('/codec/decode')) refusedStatuses.push(response.status());
        });
        await stranger.goto(`${uiUrl}/namespaces/default/workflows/${encodeURIComponent(charge.workflowId)}/${charge.runId}/history`);
        await waitFor(async () => refusedStatuses.includes(401), { timeoutMs: 60_000, intervalMs: 200, what: 'the UI to call /codec/decode' });
        expect(await stranger.getByText(charge.marker).count()).toBe(0);
        await stranger.close();

        // The docs' one step, then the workflow page: nothing set in the UI.
        const page = await browser.context.newPage();
        await startCodecSession(page, sessionUrl, token);
        const seen = await openWorkflowPage(page, { uiUrl, charge, text: charge.marker, screenshotPath: join('.data', 'web-ui-codec-dev.png') });
        expect(seen.found, `the decoded input (${charge.marker}) on the workflow page; decode statuses ${seen.decodeStatuses.join(',')}`).toBe(true);
        expect(seen.decodeStatuses.length).toBeGreaterThan(0);
        expect(seen.decodeStatuses.every((status) => status === 200)).toBe(true);
        // The order id and the amount are in the decoded input too (the order id is also a search attribute).
        expect(await page.getByText(`"orderId": "${charge.orderId}"`).count()).toBeGreaterThan(0);
        expect(await page.getByText('"amountMinor": 4321').count()).toBeGreaterThan(0);

        // Stopping start stops the UI server with the rest.
        start.child.kill('SIGTERM');
        expect(await start.exited).toBe(0);
        expect(await isPortAccepting(uiPort!)).toBe(false);
      } finally {
        await browser.close();
        if (start.child.exitCode === null) start.child.kill('SIGKILL');
        await start.exited;
        await rm(dataDir, { recursive: true, force: true });
      }
    },
  );
});
