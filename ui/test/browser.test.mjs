// Browser test: the built dashboard embedded in the real daemon, driven by
// playwright-core in Debian's chromium. First-run setup → overview → a
// bootstrap token's command → logout → a wrong and then the right password.
// Talks only to 127.0.0.1. The daemon is always killed at the end.
import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { createHmac } from 'node:crypto';
import { chromium } from 'playwright-core';

const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(ui, '..');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const PASSWORD = 'Tunnel-Orchard-Lantern-73';
const T = 15_000; // per UI step

const tmp = mkdtempSync(join(tmpdir(), 'tunnelsvc-ui-'));
// Screenshots stay after the run (in $UI_SHOTS or the temp dir) for a look.
const shots = process.env.UI_SHOTS ?? join(tmp, 'shots');
mkdirSync(shots, { recursive: true });
let daemon;
let firstPassed = false;
const problems = [];
let daemonLog = '';
let context;
let base;

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

async function waitHealthy(url, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (daemon.exitCode !== null) throw new Error(`daemon exited (${daemon.exitCode}):\n${daemonLog}`);
    try {
      if ((await fetch(url, { signal: AbortSignal.timeout(1000) })).ok) return;
    } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 150));
  }
  throw new Error(`daemon not healthy after ${ms} ms:\n${daemonLog}`);
}

function stopDaemon() {
  if (daemon && daemon.exitCode === null && daemon.signalCode === null) daemon.kill('SIGKILL');
}
process.on('exit', stopDaemon);

before(async () => {
  assert.ok(existsSync(join(ui, 'dist', 'index.html')), 'ui/dist is not built; run npm run build first');
  const bin = join(tmp, 'tunnelsvc');
  // After the UI build, so this binary embeds it.
  await promisify(execFile)('go', ['build', '-o', bin, './daemon/cmd/tunnelsvc'], { cwd: repo, timeout: 240_000 });
  const [port, pluginPort, frpsPort, dashPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  base = `http://127.0.0.1:${port}`;
  daemon = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(tmp, 'data'),
    '--system-root', join(tmp, 'root'), '--bin-dir', join(repo, 'bin'),
    '--frps-plugin-listen', `127.0.0.1:${pluginPort}`, '--frps-port', String(frpsPort),
    '--frps-dashboard-listen', `127.0.0.1:${dashPort}`,
    '--ip-echo-urls', `http://127.0.0.1:${port}/nothing`,
    // 127.0.0.1 is not "local" here, so setup needs the one-time code,
    // as it would from a remote browser.
    '--local-nets', '192.0.2.0/24'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (b) => { daemonLog = (daemonLog + b).slice(-20_000); };
  daemon.stdout.on('data', keep);
  daemon.stderr.on('data', keep);
  await waitHealthy(`${base}/healthz`, 20_000);

  context = await chromium.launchPersistentContext(join(tmp, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    timeout: 30_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
    viewport: { width: 1100, height: 900 },
  });
  context.setDefaultTimeout(T);
});

// A picture of the page when a test fails (kept with UI_SHOTS).
afterEach(async (t) => {
  const page = context?.pages()[0];
  if (page && t.passed === false) await page.screenshot({ path: join(shots, 'failure.png'), fullPage: true }).catch(() => {});
});

after(async () => {
  try { await context?.close(); } catch { /* already gone */ }
  stopDaemon();
  if (!process.env.UI_SHOTS && !process.env.UI_KEEP) rmSync(tmp, { recursive: true, force: true });
});

test('setup, overview, bootstrap token, logout and login in chromium', { timeout: 120_000 }, async () => {
  const page = context.pages()[0] ?? await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));

  await page.goto(base + '/');
  await page.getByRole('heading', { name: 'Welcome to tunnelsvc' }).waitFor();
  assert.match(page.url(), /#\/setup$/);

  // A remote browser is told about the setup code (403) and gets a field.
  await page.getByLabel('New password').fill('password');
  await page.getByLabel('Repeat the password').fill('password');
  await page.getByRole('button', { name: 'Set password' }).click();
  await page.getByRole('alert').filter({ hasText: 'X-Setup-Code' }).waitFor();
  await page.getByText('tunnelsvc setup-code', { exact: true }).waitFor();
  await page.getByLabel('Setup code').fill(readFileSync(join(tmp, 'data', 'setup-code'), 'utf8').trim());
  // With the code, the server's own password validation message is shown.
  await page.getByRole('button', { name: 'Set password' }).click();
  const alert = page.getByRole('alert');
  await alert.filter({ hasNotText: 'X-Setup-Code' }).waitFor();
  const msg = await alert.textContent();
  assert.ok(msg.length > 0 && !/setup code/i.test(msg), msg);

  await page.getByLabel('New password').fill(PASSWORD);
  await page.getByLabel('Repeat the password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Set password' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByText('Web proxy', { exact: true }).waitFor();
  await page.getByText('live', { exact: true }).waitFor(); // the log WebSocket connected
  await page.screenshot({ path: join(shots, '1-overview.png'), fullPage: true });

  await page.getByRole('link', { name: 'Machines' }).click();
  await page.getByRole('button', { name: 'Create bootstrap token' }).click();
  const cmd = page.locator('code.cmd');
  await cmd.waitFor();
  const command = await cmd.textContent();
  assert.match(command, /^curl -fsSL http:\/\/127\.0\.0\.1:\d+\/static\/bootstrap\.sh -o bootstrap\.sh && bash bootstrap\.sh \S+$/);
  // Nothing tells the daemon an address machines reach: the page says what to set.
  await page.getByRole('alert').filter({ hasText: 'Set --base-url' }).waitFor();
  await page.getByRole('cell', { name: /^#\d+$/ }).first().waitFor(); // listed as unused
  await page.screenshot({ path: join(shots, '2-machines.png'), fullPage: true });
  await page.setViewportSize({ width: 380, height: 800 });
  await page.screenshot({ path: join(shots, '3-machines-narrow.png'), fullPage: true });
  await page.setViewportSize({ width: 1100, height: 900 });

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByRole('heading', { name: 'Log in to tunnelsvc' }).waitFor();
  await page.getByLabel('Password', { exact: true }).fill('not the password');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('alert').filter({ hasText: 'invalid password' }).waitFor();
  await page.getByLabel('Password', { exact: true }).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.screenshot({ path: join(shots, '4-login-again.png'), fullPage: true });

  assertNoProblems();
  firstPassed = true;
});

// Chromium logs the expected 400/401/403 answers (weak or wrong password,
// missing setup code) as failed loads; anything else (CSP violations,
// script errors) is a failure.
function assertNoProblems() {
  assert.deepEqual(problems.filter((p) => !/the server responded with a status of 40[013]/.test(p)), []);
}

// RFC 6238 code for a base32 secret, to enroll a device like an app would.
function totp(secret, when = Date.now()) {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const c of secret.replace(/=+$/, '').toUpperCase()) bits += alphabet.indexOf(c).toString(2).padStart(5, '0');
  const key = Buffer.from(bits.match(/.{8}/g).map((b) => parseInt(b, 2)));
  const msg = Buffer.alloc(8);
  msg.writeBigUInt64BE(BigInt(Math.floor(when / 1000 / 30)));
  const mac = createHmac('sha1', key).update(msg).digest();
  const o = mac[mac.length - 1] & 0xf;
  return String((mac.readUInt32BE(o) & 0x7fffffff) % 1_000_000).padStart(6, '0');
}

test('security: SSH key download with step-up, 2FA enrollment, login with a backup code', { timeout: 120_000 }, async (t) => {
  assert.ok(firstPassed, 'the first browser test failed, and this one continues in its session');
  const page = context.pages()[0];
  await page.getByRole('link', { name: 'Security' }).click();
  await page.getByRole('heading', { name: 'Security', level: 1 }).waitFor();

  await page.getByLabel('Name', { exact: true }).fill('ui-test-key');
  await page.getByRole('button', { name: 'Generate key' }).click();
  await page.getByText('Generated ui-test-key.').waitFor();
  await page.getByRole('row', { name: /ui-test-key/ }).getByRole('button', { name: 'Download' }).click();
  await page.getByLabel('Your login password').fill('wrong password');
  await page.getByRole('button', { name: 'Download private key' }).click();
  await page.getByRole('alert').filter({ hasText: /password/i }).waitFor();
  await page.getByLabel('Your login password').fill(PASSWORD);
  const [dl] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download private key' }).click()]);
  assert.equal(dl.suggestedFilename(), 'tunnel_id_rsa');
  const keyFile = join(tmp, 'key');
  await dl.saveAs(keyFile);
  assert.match(readFileSync(keyFile, 'utf8'), /PRIVATE KEY/);

  await page.getByRole('button', { name: 'Turn on two-factor authentication' }).click();
  await page.getByRole('img', { name: /QR code/ }).waitFor();
  const secret = (await page.locator('.enroll code').textContent()).trim();
  await page.getByLabel('Code from the app').fill(totp(secret));
  await page.getByLabel('Device name').fill('test phone');
  await page.getByRole('button', { name: 'Confirm' }).click();
  await page.getByText('Backup codes — shown only now.').waitFor();
  const codes = await page.locator('ul.codes li').allTextContents();
  assert.equal(codes.length, 10);
  await page.getByRole('cell', { name: 'test phone' }).waitFor();
  await page.screenshot({ path: join(shots, '5-security.png'), fullPage: true });

  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByRole('heading', { name: 'Log in to tunnelsvc' }).waitFor();
  await page.getByLabel('Password', { exact: true }).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Two-factor authentication' }).waitFor();
  await page.getByLabel('Authentication code').fill('000000');
  await page.getByRole('button', { name: 'Verify' }).click();
  await page.getByRole('alert').waitFor();
  await page.getByLabel('Authentication code').fill(codes[0]);
  await page.getByRole('button', { name: 'Verify' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  assertNoProblems();
});

test('monitoring: metrics token, webhook settings and test delivery', { timeout: 120_000 }, async () => {
  assert.ok(firstPassed, 'the first browser test failed, and this one continues in its session');
  const { createServer: createHttpServer } = await import('node:http');
  const received = [];
  const hook = createHttpServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => { received.push({ url: req.url, body }); res.end('ok'); });
  });
  await new Promise((r) => hook.listen(0, '127.0.0.1', r));
  try {
    const page = context.pages()[0];
    await page.getByRole('link', { name: 'Security' }).click();
    await page.getByRole('heading', { name: 'Metrics & notifications' }).waitFor();

    // Without a token /metrics is closed; the one the page shows opens it.
    assert.equal((await fetch(`${base}/metrics`)).status, 401);
    await page.getByRole('button', { name: 'Create token' }).click();
    await page.getByText('Metrics token — shown only now.').waitFor();
    const token = (await page.locator('.callout code.cmd').textContent()).trim();
    const scrape = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(scrape.status, 200);
    const metrics = await scrape.text();
    assert.match(metrics, /^tunnelsvc_machines\{status="online"\} 0$/m);
    // go build without -ldflags: main's version is "dev".
    assert.match(metrics, /^tunnelsvc_build_info\{goversion="go[^"]+",version="dev"\} 1$/m);
    await page.getByText(/A token exists/).waitFor();

    // A URL the server refuses shows its words; a good one is saved and tested.
    await page.getByLabel('Webhook URL').fill('ftp://127.0.0.1/x');
    await page.getByRole('button', { name: 'Save notifications' }).click();
    await page.getByRole('alert').filter({ hasText: 'http or https URL with a host' }).waitFor();
    await page.getByLabel('Webhook URL').fill(`http://127.0.0.1:${hook.address().port}/hook`);
    await page.getByLabel('Preset').selectOption('json');
    await page.getByLabel('Offline delay (minutes)').fill('3');
    await page.getByRole('button', { name: 'Save notifications' }).click();
    await page.getByText('Saved.').waitFor();
    await page.getByRole('button', { name: 'Send test' }).click();
    await page.getByText('test notification delivered').waitFor();
    assert.equal(received.length, 1);
    assert.equal(received[0].url, '/hook');
    assert.equal(JSON.parse(received[0].body).kind, 'test');
    await page.screenshot({ path: join(shots, '6-monitoring.png'), fullPage: true });
    assertNoProblems();
  } finally {
    hook.close();
  }
});
