import { execFile } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);

/** A folder of PEM files: `ca`, `rogue-ca`, `server`, `client`, `rogue-client` (`.pem` and `.key` each). */
export interface TestPki {
  dir: string;
  path(name: string): string;
}

/**
 * A CA and leaf certificates (P-256 keys, valid for a day), made with the openssl CLI (node:crypto
 * cannot sign X.509 certificates): a server certificate for `serverName` that also allows client
 * authentication (a Temporal server's own clients of its frontend present it), a client
 * certificate for `clientName`, and a client certificate from another CA.
 */
export async function makeTestPki(options: { serverName: string; clientName: string }): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), 'chargeguard-pki-'));
  const openssl = (args: string[]) => execFileAsync('openssl', args, { cwd: dir });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const makeCa = (name: string) =>
    openssl([
      'req', '-x509', ...ec, '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '1', '-subj', `/CN=${name}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ]);
  const makeLeaf = async (name: string, ca: string, cn: string, extensions: string) => {
    await writeFile(join(dir, `${name}.ext`), `${extensions}\nbasicConstraints=CA:FALSE\n`);
    await openssl(['req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`]);
    await openssl([
      'x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial',
      '-out', `${name}.pem`, '-days', '1', '-extfile', `${name}.ext`,
    ]);
  };
  await makeCa('ca');
  await makeCa('rogue-ca');
  await makeLeaf('server', 'ca', options.serverName, `subjectAltName=DNS:${options.serverName}\nextendedKeyUsage=serverAuth,clientAuth`);
  await makeLeaf('client', 'ca', options.clientName, `subjectAltName=DNS:${options.clientName}\nextendedKeyUsage=clientAuth`);
  await makeLeaf('rogue-client', 'rogue-ca', 'rogue-client', 'subjectAltName=DNS:rogue-client\nextendedKeyUsage=clientAuth');
  return { dir, path: (name) => join(dir, name) };
}
