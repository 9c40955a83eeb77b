// Browser test of a full data disk against the real daemon on 127.0.0.1,
// its data directory on an 8 MiB tmpfs (root only: mounting needs
// CAP_SYS_ADMIN). Filled: the page shows the disk-full banner as it loads,
// and a login puts the server's disk-full message at the password field.
// With the filler removed the banner goes by itself and the login works,
// with no reload and no restart of the daemon.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { daemonBinary, launch } from './harness.mjs';

const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(ui, '..');
const PASSWORD = 'Full-Disk-Lighthouse-17';
const root = process.getuid?.() === 0;
const tmp = mkdtempSync(join(tmpdir(), 'tunnelsvc-disk-'));
const data = join(tmp, 'data');
const run = promisify(execFile);
let mounted = false;
let daemon;
let daemonLog = '';
let browser;
let base;

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

// Writes a file in dir until the file system refuses (ENOSPC).
function fill(dir) {
  const path = join(dir, 'filler');
  const fd = openSync(path, 'wx');
  const chunk = Buffer.alloc(64 << 10);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (e) {
    if (e.code !== 'ENOSPC') throw e;
  } finally {
    closeSync(fd);
  }
  return path;
}

before(async () => {
  if (!root) return;
  mkdirSync(data);
  await run('mount', ['-t', 'tmpfs', '-o', 'size=8m,mode=0700', 'tmpfs', data]);
  mounted = true;
  const bin = await daemonBinary();
  const [port, plugin, frps, dash, gate] = [await freePort(), await freePort(), await freePort(), await freePort(), await freePort()];
  base = `http://127.0.0.1:${port}`;
  daemon = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', data,
    '--system-root', join(tmp, 'root'), '--bin-dir', join(repo, 'bin'),
    '--frps-plugin-listen', `127.0.0.1:${plugin}`, '--frps-port', String(frps),
    '--frps-dashboard-listen', `127.0.0.1:${dash}`, '--gate-listen', `127.0.0.1:${gate}`,
    '--ip-echo-urls', `http://127.0.0.1:${port}/nothing`], { stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (b) => { daemonLog = (daemonLog + b).slice(-20_000); };
  daemon.stdout.on('data', keep);
  daemon.stderr.on('data', keep);
  const end = Date.now() + 20_000;
  for (;;) {
    try { if ((await fetch(`${base}/healthz`)).ok) break; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`the daemon did not answer:\n${daemonLog}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const setup = await fetch(`${base}/api/auth/setup`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) });
  assert.equal(setup.status, 200, await setup.text());
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  if (daemon && daemon.exitCode === null) daemon.kill('SIGKILL');
  if (mounted) await run('umount', ['-l', data]).catch(() => {});
  rmSync(tmp, { recursive: true, force: true });
});

test('full data disk: banner and the message at the password field, gone once space is freed', {
  timeout: 120_000, skip: root ? false : 'needs root (CAP_SYS_ADMIN) to mount a tmpfs for the data directory',
}, async () => {
  const page = await browser.newPage();
  page.setDefaultTimeout(15_000);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  const filler = fill(data);

  await page.goto(`${base}/#/overview`);
  const banner = page.getByRole('alert').filter({ hasText: 'The data disk is full' });
  await banner.waitFor();
  assert.equal((await banner.textContent()).trim(),
    `The data disk is full (${data}): logins and changes cannot be saved. Free space on it; this message goes away by itself once writes work again.`);

  const full = `the data disk is full (${data}): free space on it, then try again`;
  const pw = page.getByLabel(/^Password \*$/);
  await pw.fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  const atField = page.locator('.field-error', { hasText: full });
  await atField.waitFor();
  assert.equal(await pw.getAttribute('aria-invalid'), 'true');
  assert.match(await pw.getAttribute('aria-describedby'), new RegExp(await atField.getAttribute('id')));

  rmSync(filler);
  await banner.waitFor({ state: 'hidden', timeout: 20_000 });
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();
  assert.deepEqual(problems, [], daemonLog);
});
