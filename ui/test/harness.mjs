// Shared by the focused browser tests (layout.test.mjs, trial-*.test.mjs;
// browser.test.mjs takes totp only):
// a real `tunnelsvc serve` on free loopback ports with a temporary data dir
// and system root, the operator's session for node-side API calls, Debian's
// chromium, and axe-core at 0 serious/critical. Not a test file itself
// (npm test runs test/*.test.mjs).
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, copyFileSync, mkdirSync, readFileSync, chownSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';

export const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repo = resolve(ui, '..');
/** Debian's chromium-headless-shell: the same Chromium as the chromium
 * package, built as the headless shell (no browser UI layer behind the
 * page), which drives the same pages for about two thirds of the CPU. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium-headless-shell';
/** No sandbox (tests run as root), no GPU, and nothing that talks to the
 * network by itself. */
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

let built;
/** The daemon binary every test file runs: UI_DAEMON_BIN (make test-ui
 * passes bin/test/tunnelsvc, built with this ui/dist embedded), or one built
 * now, once per file, in a directory of its own that goes when the file's
 * process exits (not in a daemon's directory, which its stop() removes). */
export async function daemonBinary() {
  if (process.env.UI_DAEMON_BIN) return process.env.UI_DAEMON_BIN;
  assert.ok(existsSync(join(ui, 'dist', 'index.html')), 'ui/dist is not built; run npm run build first');
  built ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tunnelsvc-bin-'));
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
    const bin = join(dir, 'tunnelsvc');
    await promisify(execFile)('go', ['build', '-trimpath', '-o', bin, './daemon/cmd/tunnelsvc'], { cwd: repo, timeout: 240_000 });
    return bin;
  })();
  return built;
}

/** A daemon with the operator password set and a session for call();
 * extra: more `serve` flags (e.g. --static-dir). opts.joinOf: another
 * daemon of the same cluster (same --database) whose sealing key this one
 * gets, as `tunnelsvc edge join` hands it; the password is then already
 * set, and this one only logs in. opts.ports: how many tunnel ports
 * (100 unless given; a machine takes two). */
export async function startDaemon(name, password, extra = [], opts = {}) {
  const tmp = mkdtempSync(join(tmpdir(), `tunnelsvc-${name}-`));
  const bin = await daemonBinary();
  if (opts.joinOf) {
    mkdirSync(join(tmp, 'data'), { mode: 0o700 });
    copyFileSync(join(opts.joinOf.tmp, 'data', 'secret.key'), join(tmp, 'data', 'secret.key'));
  }
  const [port, plugin, frps, dash, gate, dnsPort] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort(), freePort()]);
  const base = `http://127.0.0.1:${port}`;
  const lo = 21000 + Math.floor(Math.random() * 80) * 100;
  const proc = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(tmp, 'data'),
    '--system-root', join(tmp, 'root'), '--bin-dir', join(repo, 'bin'), '--server-host', '127.0.0.1',
    '--frps-plugin-listen', `127.0.0.1:${plugin}`, '--frps-port', String(frps),
    '--frps-dashboard-listen', `127.0.0.1:${dash}`, '--gate-listen', `127.0.0.1:${gate}`,
    // Two ports a machine (its SSH and its agent); opts.ports for a fleet.
    '--tunnel-ports', `${lo}-${lo + (opts.ports ?? 100) - 1}`,
    // Nothing answers there: no public address, no DNS answer, quickly.
    '--ip-echo-urls', `${base}/nothing`, '--dns-server', `127.0.0.1:${dnsPort}`, ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  // frps's dashboard API, as the daemon asks it which machines' tunnel
  // clients are connected now (GET /api/clients?status=online): the
  // machines frpLogin logged in, until frpLogout. No frps runs here, and
  // without this answer the daemon (rightly) records every machine offline
  // once nothing has answered there for 10 s.
  const connected = new Set();
  const frpsApi = createHttpServer((req, res) => {
    if (req.url === '/api/clients?status=online') {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify([...connected].map((user) => ({ user, online: true }))));
      return;
    }
    res.statusCode = 404;
    res.end('404 page not found');
  });
  await new Promise((r) => frpsApi.listen(dash, '127.0.0.1', r));
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
  if (!opts.joinOf) await call('POST', '/api/auth/setup', { password });
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
      const text = await r.text();
      assert.equal(r.status, 200, text);
      const registration = JSON.parse(text).data;
      return { ...(await call('GET', '/api/machines')).find((m) => m.name === mname), registration };
    },
    /** What frps tells this daemon's plugin when machine m's tunnel client
     * logs in (frp's server-plugin protocol, op Login). */
    async frpLogin(m) {
      const cfg = m.registration.revtunnel_client_config;
      const user = cfg.match(/^user = '([^']+)'/m)[1];
      const token = cfg.match(/^\[metadatas\]\ntoken = '([^']+)'/m)[1];
      const r = await fetch(`http://127.0.0.1:${plugin}/frp/plugin?version=0.1.0&op=Login`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ version: '0.1.0', op: 'Login', content: { user, metas: { token }, run_id: 'ui-test', client_address: '127.0.0.1:40000' } }),
      });
      const body = await r.json();
      assert.equal(body.reject, false, JSON.stringify(body));
      connected.add(user);
    },
    /** Runs SQL lines in the daemon's SQLite database with the sqlite3
     * tool: what this box cannot produce by itself, written as the daemon
     * keeps it. */
    sqlite(sql) {
      return new Promise((res, rej) => {
        const c = spawn('sqlite3', ['-bail', join(tmp, 'data', 'tunnelsvc.db')], { stdio: ['pipe', 'ignore', 'pipe'] });
        let err = '';
        c.stderr.on('data', (b) => { err += b; });
        c.on('error', rej);
        c.on('exit', (code) => (code === 0 ? res() : rej(new Error(`sqlite3 exited ${code}: ${err}`))));
        c.stdin.end(sql.join('\n'));
      });
    },
    /** Machine m's tunnel client is gone from frps (as frps lists it). */
    frpLogout(m) {
      connected.delete(m.registration.revtunnel_client_config.match(/^user = '([^']+)'/m)[1]);
    },
    /** frps's dashboard API stops answering (frps stopped). */
    frpsDown() { frpsApi.close(); frpsApi.closeAllConnections(); },
    async stop() {
      frpsApi.close();
      if (proc.exitCode === null && proc.signalCode === null) {
        const gone = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGKILL');
        await gone;
      }
      if (!process.env.UI_KEEP) rmSync(tmp, { recursive: true, force: true });
    },
  };
}

const PG = '/usr/lib/postgresql/15/bin';

/** A throwaway PostgreSQL (Debian's postgresql package, as `make test`
 * installs it): initdb in a temporary directory, the server on a Unix
 * socket there (no TCP), durability off. Under root it runs as the
 * postgres user. Returns the URL of its database and stop(). */
export async function startPostgres() {
  assert.ok(existsSync(`${PG}/initdb`), `no PostgreSQL server (${PG}/initdb): install Debian's postgresql package (make test does)`);
  // The socket's path must stay short: /tmp, not a deep temporary dir.
  const dir = mkdtempSync('/tmp/ui-pg-');
  // The server refuses to run as root: then it runs as the postgres user.
  let as = {};
  if (process.getuid() === 0) {
    const id = async (flag) => Number((await promisify(execFile)('id', [flag, 'postgres'])).stdout);
    as = { uid: await id('-u'), gid: await id('-g') };
    chownSync(dir, as.uid, as.gid);
  }
  await promisify(execFile)(`${PG}/initdb`, ['-D', join(dir, 'data'), '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
    { timeout: 60_000, cwd: dir, ...as });
  const proc = spawn(`${PG}/postgres`, ['-D', join(dir, 'data'), '-k', dir, '-c', 'listen_addresses=',
    '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off', '-c', 'log_min_messages=fatal'],
  { stdio: ['ignore', 'pipe', 'pipe'], cwd: dir, ...as });
  let log = '';
  proc.stdout.on('data', (b) => { log += b; });
  proc.stderr.on('data', (b) => { log += b; });
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGINT'); // a fast shutdown
      await gone;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const end = Date.now() + 30_000;
  // postmaster.pid's last line says "ready" once it accepts connections.
  const ready = () => { try { return /^ready\s*$/m.test(readFileSync(join(dir, 'data', 'postmaster.pid'), 'utf8')); } catch { return false; } };
  while (!ready()) {
    if (proc.exitCode !== null || Date.now() > end) {
      await stop();
      throw new Error(`PostgreSQL did not start:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url: `postgres://postgres@/postgres?host=${dir}&sslmode=disable`, stop };
}

/** Chromium for a test file. */
export function launch() {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, timeout: 30_000, args: CHROMIUM_ARGS });
}

/** Clicks button until target shows, three tries at most: the page may
 * be drawn again under the pointer as the click lands (a table refreshed
 * by the live updates), and a person then clicks again. */
export async function clickFor(button, target, tries = 3) {
  for (let i = 1; ; i++) {
    await button.click();
    try {
      await target.waitFor({ timeout: 8000 });
      return;
    } catch (e) {
      if (i >= tries) throw e;
    }
  }
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

/** The rules about colours. The dashboard's colours do not change with
 * the width (one set of colour variables per scheme), so they run at
 * desktop width only: they are most of axe's time on a page. */
export const COLOUR_RULES = ['color-contrast', 'link-in-text-block'];
export const AXE_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'];

/** Desktop width, where the colour rules run. */
export const isDesktop = (width) => width >= 1000;

/** The colour schemes axe checks a page in at this width: dark (its
 * colour rules alone) at desktop width only. */
export const axeSchemes = (width) => (isDesktop(width) ? ['light', 'dark'] : ['light']);

/** An axe run for page in colour scheme (light: every rule of AXE_TAGS,
 * without the colour rules below desktop width; dark: the colour rules). */
export function axeBuilder(page, scheme) {
  const a = new AxeBuilder({ page }).setLegacyMode().options({ resultTypes: ['violations'] });
  if (scheme === 'dark') return a.withRules(COLOUR_RULES);
  a.withTags(AXE_TAGS);
  if (!isDesktop(page.viewportSize().width)) a.disableRules(COLOUR_RULES);
  return a;
}

/** axe-core in the current colour scheme: the serious and critical
 * violations, as lines (none is the goal). */
export async function axe(page, name) {
  const dark = await page.evaluate(() => matchMedia('(prefers-color-scheme: dark)').matches);
  const a = axeBuilder(page, dark ? 'dark' : 'light');
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

/** axe in light (and, at desktop width, dark) colours: no serious or
 * critical violation; screenshots in $UI_SHOTS. */
export async function noAxe(page, name) {
  const found = [];
  // The colour rules of the dark pass at the desktop width only: colours
  // do not change with the width.
  for (const scheme of axeSchemes(page.viewportSize().width)) {
    await page.emulateMedia({ colorScheme: scheme });
    found.push(...await axe(page, name));
    if (process.env.UI_SHOTS) await page.screenshot({ path: `${process.env.UI_SHOTS}/trial-${name.replace(/\W+/g, '-')}-${scheme}.png`, fullPage: true });
  }
  await page.emulateMedia({ colorScheme: 'light' });
  assert.deepEqual(found, []);
}

export const rowsOf = (page, name) => page.getByRole('table', { name }).locator('tbody tr');
