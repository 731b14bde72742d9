import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { findFreePorts } from '../../src/support/free-port.js';
import { isPortAccepting } from '../../src/support/wait.js';
import { chargeThroughStart, openBrowser, openWorkflowPage, ownStackEnv, printedSessionUrl, runCli, startCodecSession, uiCodecSettings } from '../support/web-ui.js';

describe('the Temporal Web UI that `chargeguard start --cluster` runs beside the Temporal server', () => {
  it(
    'serves the UI on loopback, pointed at the cluster and at the API codec endpoint, and decodes a charge input for an operator with a codec session',
    { timeout: 600_000 },
    async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-cluster-web-ui-'));
      // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
      await chmod(dataDir, 0o755);
      const token = randomBytes(32).toString('base64url');
      const [apiPort, uiPort] = await findFreePorts(2);
      const apiUrl = `http://127.0.0.1:${apiPort}`;
      const uiUrl = `http://127.0.0.1:${uiPort}`;
      const start = runCli(
        ['start', '--cluster', '--workers', '1', '--api-ports', String(apiPort), '--ui-port', String(uiPort)],
        ownStackEnv(dataDir, { CHARGEGUARD_CODEC_TOKEN: token }),
      );
      const browser = await openBrowser();
      try {
        await start.until(/Ctrl-C stops everything\./, 'start --cluster to be running');
        const output = start.output();
        expect(output).toContain(`Temporal Web UI: ${uiUrl}`);
        expect(output).toContain(`decodes payloads through ${apiUrl}/codec`);
        expect(output).not.toContain(token);
        // One step: no codec drawer settings to make by hand.
        expect(output).not.toContain('codec server settings');
        const sessionUrl = printedSessionUrl(output);
        expect(sessionUrl).toBe(`${apiUrl}/codec/session`);
        // The UI server's settings, as the browser reads them: this cluster's codec endpoint, with credentials.
        expect(await uiCodecSettings(uiUrl)).toMatchObject({ Endpoint: `${apiUrl}/codec`, IncludeCredentials: true, PassAccessToken: false });

        const charge = await chargeThroughStart(output, apiUrl);
        const page = await browser.context.newPage();
        // The docs' one step (the session page start printed), then the workflow page: nothing set in the UI.
        await startCodecSession(page, sessionUrl, token);
        const seen = await openWorkflowPage(page, { uiUrl, charge, text: charge.marker, screenshotPath: join('.data', 'web-ui-codec-cluster.png') });
        expect(seen.found, `the decoded input (${charge.marker}) on the workflow page; decode statuses ${seen.decodeStatuses.join(',')}`).toBe(true);
        expect(seen.decodeStatuses.length).toBeGreaterThan(0);
        expect(seen.decodeStatuses.every((status) => status === 200)).toBe(true);
        expect(await page.getByText(`"orderId": "${charge.orderId}"`).count()).toBeGreaterThan(0);

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
