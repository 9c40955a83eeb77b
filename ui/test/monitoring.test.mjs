// Browser test of Security → Metrics & notifications against the real
// daemon on 127.0.0.1: the /metrics bearer token made in the page opens
// /metrics (closed without it), a webhook URL the server refuses shows its
// words, and a good one is saved and gets the test notification, delivered
// to a receiver on 127.0.0.1. The daemon is killed at the end.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { createServer as createHTTPServer } from 'node:http';
import { daemonBinary, launch } from './harness.mjs';

const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(ui, '..');
const PASSWORD = 'Meter-Reading-Harbor-42';
const tmp = mkdtempSync(join(tmpdir(), 'tunnelsvc-monitoring-'));
let daemon;
let daemonLog = '';
let browser;
let base;
let hook;
const received = [];

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

before(async () => {
  const bin = await daemonBinary();
  const [port, plugin, frps, dash, gate] = [await freePort(), await freePort(), await freePort(), await freePort(), await freePort()];
  base = `http://127.0.0.1:${port}`;
  daemon = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(tmp, 'data'),
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
  hook = createHTTPServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => { received.push({ url: req.url, body }); res.end('ok'); });
  });
  await new Promise((r) => hook.listen(0, '127.0.0.1', r));
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  hook?.close();
  if (daemon && daemon.exitCode === null) daemon.kill('SIGKILL');
  rmSync(tmp, { recursive: true, force: true });
});

test('monitoring: metrics token, webhook settings and test delivery', { timeout: 120_000 }, async () => {
  const page = await browser.newPage();
  page.setDefaultTimeout(15_000);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  await page.goto(`${base}/#/security/monitoring`);
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Metrics & notifications', level: 1 }).waitFor();

  // Without a token /metrics is closed; the one the page shows opens it.
  assert.equal((await fetch(`${base}/metrics`)).status, 401);
  await page.getByRole('button', { name: 'Create token' }).click();
  await page.getByText('Metrics token — shown only now.').waitFor();
  const token = (await page.locator('.callout code.cmd').textContent()).trim();
  assert.equal((await fetch(`${base}/metrics`, { headers: { Authorization: 'Bearer wrong' } })).status, 401);
  const scrape = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(scrape.status, 200);
  const metrics = await scrape.text();
  assert.match(metrics, /^tunnelsvc_machines\{status="online"\} 0$/m);
  assert.match(metrics, /^tunnelsvc_build_info\{goversion="go[^"]+",version="[^"]+"\} 1$/m);
  await page.getByText(/A token exists/).waitFor();

  // A URL the server refuses shows its words at the field, which they
  // leave as soon as it is edited; a good one is saved and tested.
  const url = page.getByLabel('Webhook URL');
  await url.fill('ftp://127.0.0.1/x');
  await page.getByRole('button', { name: 'Save notifications' }).click();
  await url.and(page.locator('[aria-invalid="true"]')).waitFor();
  const said = await url.evaluate((el) => el.getAttribute('aria-describedby').split(' ').map((id) => document.getElementById(id).textContent).join(' '));
  assert.match(said, /Webhook URL must be an http or https URL with a host/);
  await url.fill(`http://127.0.0.1:${hook.address().port}/hook`);
  assert.equal(await url.getAttribute('aria-invalid'), null);
  await page.getByLabel('Preset').selectOption('json');
  await page.getByLabel('Offline delay (minutes)').fill('3');
  await page.getByRole('button', { name: 'Save notifications' }).click();
  await page.getByText('Saved.').waitFor();
  await page.getByRole('button', { name: 'Send test' }).click();
  await page.getByText('test notification delivered').waitFor();
  assert.equal(received.length, 1);
  assert.equal(received[0].url, '/hook');
  assert.equal(JSON.parse(received[0].body).kind, 'test');
  assert.deepEqual(problems, []);
});

test('API tokens: created and shown once, used as a bearer, read-only when read, revoked', { timeout: 120_000 }, async () => {
  const page = await browser.newPage();
  page.setDefaultTimeout(15_000);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  // A new page is a new browser context: it logs in (waiting for the
  // form, which shows once the page asked the daemon).
  await page.goto(`${base}/#/security/tokens`);
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'API tokens', level: 1 }).waitFor();
  await page.getByText('No API tokens yet.').waitFor();

  const form = page.getByRole('form', { name: 'New API token' });
  await form.getByLabel(/^Name/).fill('grafana');
  await form.getByLabel('Scope').selectOption('read');
  await form.getByLabel(/^Expires in/).fill('30');
  await form.getByRole('button', { name: 'Create token' }).click();
  await page.getByText('API token “grafana” — shown only now.').waitFor();
  const token = (await page.locator('.callout code.cmd').textContent()).trim();
  assert.match(token, /^tsvc_/);
  const row = page.getByRole('row').filter({ hasText: 'grafana' });
  await row.getByText('read (GET only)').waitFor();

  // The token reads, and only reads.
  const auth = { Authorization: `Bearer ${token}` };
  assert.equal((await fetch(`${base}/api/machines`, { headers: auth })).status, 200);
  const post = await fetch(`${base}/api/bootstrap/tokens`, { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' }, body: '{}' });
  assert.equal(post.status, 403);
  assert.match((await post.json()).error, /read-only/);
  // Its use shows.
  await page.reload();
  await row.getByText(/from 127\.0\.0\.1/).waitFor();

  await row.getByRole('button', { name: 'Revoke grafana' }).click();
  await page.getByRole('alertdialog', { name: 'Revoke the API token “grafana”?' }).getByRole('button', { name: 'Revoke the token' }).click();
  await page.getByText('Revoked “grafana”.').waitFor();
  await page.getByText('No API tokens yet.').waitFor();
  assert.equal((await fetch(`${base}/api/machines`, { headers: auth })).status, 401);
  assert.deepEqual(problems, []);
});
