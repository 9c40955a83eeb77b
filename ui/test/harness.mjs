// Shared by the focused browser tests (layout.test.mjs, trial-*.test.mjs;
// browser.test.mjs takes totp only):
// a real `tunnelsvc serve` on free loopback ports with a temporary data dir
// and system root, the operator's session for node-side API calls, Debian's
// chromium, and axe-core at 0 serious/critical. Not a test file itself
// (npm test runs test/*.test.mjs).
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';

export const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repo = resolve(ui, '..');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

let built;
/** The daemon binary: UI_DAEMON_BIN, or one built now (it embeds ui/dist). */
async function daemonBin(tmp) {
  if (process.env.UI_DAEMON_BIN) return process.env.UI_DAEMON_BIN;
  assert.ok(existsSync(join(ui, 'dist', 'index.html')), 'ui/dist is not built; run npm run build first');
  built ??= (async () => {
    const bin = join(tmp, 'tunnelsvc');
    await promisify(execFile)('go', ['build', '-o', bin, './daemon/cmd/tunnelsvc'], { cwd: repo, timeout: 240_000 });
    return bin;
  })();
  return built;
}

/** A daemon with the operator password set and a session for call();
 * extra: more `serve` flags (e.g. --static-dir). */
export async function startDaemon(name, password, extra = []) {
  const tmp = mkdtempSync(join(tmpdir(), `tunnelsvc-${name}-`));
  const bin = await daemonBin(tmp);
  const [port, plugin, frps, dash, gate, dnsPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort(), freePort()]);
  const base = `http://127.0.0.1:${port}`;
  const lo = 21000 + Math.floor(Math.random() * 80) * 100;
  const proc = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(tmp, 'data'),
    '--system-root', join(tmp, 'root'), '--bin-dir', join(repo, 'bin'), '--server-host', '127.0.0.1',
    '--frps-plugin-listen', `127.0.0.1:${plugin}`, '--frps-port', String(frps),
    '--frps-dashboard-listen', `127.0.0.1:${dash}`, '--gate-listen', `127.0.0.1:${gate}`,
    '--tunnel-ports', `${lo}-${lo + 99}`,
    // Nothing answers there: no public address, no DNS answer, quickly.
    '--ip-echo-urls', `${base}/nothing`, '--dns-server', `127.0.0.1:${dnsPort}`, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const keep = (b) => { log = (log + b).slice(-20_000); };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  const end = Date.now() + 20_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`daemon exited (${proc.exitCode}):\n${log}`);
    try { if ((await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(1000) })).ok) break; } catch { /* not yet */ }
    if (Date.now() > end) throw new Error(`the daemon did not answer:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  let cookie = '';
  const raw = async (method, path, body) => {
    const res = await fetch(base + path, {
      method, headers: { 'Content-Type': 'application/json', Cookie: cookie },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const set = res.headers.get('set-cookie');
    if (set) cookie = set.split(';')[0];
    const text = await res.text();
    let data;
    try { data = JSON.parse(text); } catch { data = text; }
    return { status: res.status, data: data?.data, error: data?.error, text };
  };
  const call = async (method, path, body) => {
    const r = await raw(method, path, body);
    assert.ok(r.status < 300, `${method} ${path}: ${r.status} ${r.text}`);
    return r.data;
  };
  await call('POST', '/api/auth/setup', { password });
  await call('POST', '/api/auth/login', { password });
  return {
    base, call, raw, proc, tmp,
    log: () => log,
    /** A machine joined through the API (no agent answers it). */
    async machine(mname, username = 'pi') {
      const t = await call('POST', '/api/bootstrap/tokens', { label: `for ${mname}` });
      const r = await fetch(`${base}/api/bootstrap`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: t.token, name: mname, username }),
      });
      assert.equal(r.status, 200, await r.text());
      return (await call('GET', '/api/machines')).find((m) => m.name === mname);
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        const gone = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await gone;
      }
      if (!process.env.UI_KEEP) rmSync(tmp, { recursive: true, force: true });
    },
  };
}

export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM, headless: true, timeout: 30_000,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

/** A page logged in at base, at the given viewport. */
export async function loggedIn(browser, d, password, viewport, route = 'overview') {
  const phone = viewport.width < 500;
  const context = await browser.newContext({ viewport, isMobile: phone, hasTouch: phone });
  context.setDefaultTimeout(15_000);
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') page.problems.push(`console: ${m.text()}`); });
  await page.goto(`${d.base}/#/${route}`);
  await page.getByLabel(/^Password \*$/).fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('navigation', { name: 'Main' }).waitFor();
  return page;
}

/** axe-core in the current colour scheme: the serious and critical
 * violations, as lines (none is the goal). */
export async function axe(page, name) {
  const dark = await page.evaluate(() => matchMedia('(prefers-color-scheme: dark)').matches);
  const a = new AxeBuilder({ page }).setLegacyMode().options({ resultTypes: ['violations'] });
  if (dark) a.withRules(['color-contrast', 'link-in-text-block']);
  else a.withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice']);
  const t0 = Date.now();
  const r = await a.analyze();
  if (process.env.UI_TIMING) console.log(`axe ${name} (${dark ? 'dark' : 'light'}): ${Date.now() - t0} ms`);
  return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${name} (${dark ? 'dark' : 'light'}): ${v.id} [${v.impact}] ${v.help}: ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
}

// RFC 6238 code for a base32 secret, as an authenticator app computes it.
export function totp(secret, when = Date.now()) {
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
