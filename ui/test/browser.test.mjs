// Browser test: the built dashboard embedded in the real daemon, driven by
// playwright-core in Debian's chromium, the whole first-operator journey at
// desktop (1280 px) and phone (390 px) width: setup → domain → token → a
// machine registered through the API opens its page by itself → tunnels
// with their links → 2FA → logout and login with a code → key download →
// the audit log shows each step. axe-core checks every page in light and
// dark; any serious or critical violation fails. Talks only to 127.0.0.1
// (the daemon, and a fake IP-echo and DNS server for the getting-started
// check). Screenshots of every page are kept in $UI_SHOTS (or a temp dir);
// a failing step saves one named after it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { createSocket } from 'node:dgram';
import { axeBuilder, axeSchemes, daemonBinary, launch, totp } from './harness.mjs';

const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(ui, '..');
const PASSWORD = 'Tunnel-Orchard-Lantern-73';
const PUBLIC_IP = '203.0.113.7'; // what the fake IP echo says
const DNS_IP = '203.0.113.9'; // what the fake DNS says router.<domain> is: a mismatch
const T = 15_000; // per UI step

const tmp = mkdtempSync(join(tmpdir(), 'tunnelsvc-ui-'));
const shots = process.env.UI_SHOTS ?? join(tmp, 'shots');
mkdirSync(shots, { recursive: true });
let bin;
let browser;
let echo;
let dns;
const daemons = new Set();
let axeRuns = 0;

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

// A DNS server on loopback: A records for router.* answer DNS_IP, anything
// else answers with no records.
function fakeDNS() {
  return new Promise((res) => {
    const sock = createSocket('udp4');
    sock.on('message', (q, rinfo) => {
      let i = 12;
      const labels = [];
      while (q[i] !== 0) { labels.push(q.subarray(i + 1, i + 1 + q[i]).toString()); i += q[i] + 1; }
      const qtype = q.readUInt16BE(i + 1);
      const question = q.subarray(12, i + 5);
      const answer = qtype === 1 && labels[0] === 'router';
      const head = Buffer.alloc(12);
      q.copy(head, 0, 0, 2);
      head.writeUInt16BE(0x8180, 2);
      head.writeUInt16BE(1, 4);
      head.writeUInt16BE(answer ? 1 : 0, 6);
      const rr = answer ? Buffer.concat([Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]), Buffer.from(DNS_IP.split('.').map(Number))]) : Buffer.alloc(0);
      sock.send(Buffer.concat([head, question, rr]), rinfo.port, rinfo.address);
    });
    sock.bind(0, '127.0.0.1', () => res(sock));
  });
}

class Daemon {
  constructor(name, extra = []) {
    this.dir = join(tmp, name);
    this.extra = extra;
    this.log = '';
  }
  async start() {
    this.port ??= await freePort();
    this.pluginPort ??= await freePort();
    this.frpsPort ??= await freePort();
    // Not the default gate and frps-dashboard ports: another daemon on the
    // machine (another checkout's tests) may hold them.
    this.gatePort ??= await freePort();
    this.dashPort ??= await freePort();
    this.base = `http://127.0.0.1:${this.port}`;
    this.proc = spawn(bin, ['serve', '--listen', `127.0.0.1:${this.port}`, '--data-dir', join(this.dir, 'data'),
      '--system-root', join(this.dir, 'root'), '--bin-dir', join(repo, 'bin'),
      '--frps-plugin-listen', `127.0.0.1:${this.pluginPort}`, '--frps-port', String(this.frpsPort),
      '--gate-listen', `127.0.0.1:${this.gatePort}`, '--frps-dashboard-listen', `127.0.0.1:${this.dashPort}`,
      '--ip-echo-urls', `http://127.0.0.1:${echo.address().port}/`,
      '--dns-server', `127.0.0.1:${dns.address().port}`, ...this.extra], { stdio: ['ignore', 'pipe', 'pipe'] });
    daemons.add(this);
    const keep = (b) => { this.log = (this.log + b).slice(-20_000); };
    this.proc.stdout.on('data', keep);
    this.proc.stderr.on('data', keep);
    const end = Date.now() + 20_000;
    while (Date.now() < end) {
      if (this.proc.exitCode !== null) throw new Error(`daemon exited (${this.proc.exitCode}):\n${this.log}`);
      try {
        if ((await fetch(`${this.base}/healthz`, { signal: AbortSignal.timeout(1000) })).ok) return;
      } catch { /* not yet */ }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`daemon not healthy after 20 s:\n${this.log}`);
  }
  async kill() {
    if (!this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const gone = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGKILL');
    await gone;
  }
}
process.on('exit', () => { for (const d of daemons) if (d.proc?.exitCode === null) d.proc.kill('SIGKILL'); });

before(async () => {
  assert.ok(existsSync(join(ui, 'dist', 'index.html')), 'ui/dist is not built; run npm run build first');
  // After the UI build, so this binary embeds it. UI_DAEMON_BIN names a
  // binary built elsewhere instead (it must embed this ui/dist).
  bin = await daemonBinary();
  echo = createHttpServer((_, res) => res.end(PUBLIC_IP));
  await new Promise((r) => echo.listen(0, '127.0.0.1', r));
  dns = await fakeDNS();
  browser = await launch();
});

after(async () => {
  if (axeRuns) console.log(`# axe-core ran ${axeRuns} times`);
  try { await browser?.close(); } catch { /* already gone */ }
  for (const d of daemons) await d.kill();
  echo?.close();
  dns?.close();
  if (!process.env.UI_SHOTS && !process.env.UI_KEEP) rmSync(tmp, { recursive: true, force: true });
});


// The text that describes an input (its hint and its error), once the
// input is marked invalid.
async function errorOf(input) {
  await input.and(input.page().locator('[aria-invalid="true"]')).waitFor();
  return input.evaluate((el) => (el.getAttribute('aria-describedby') ?? '').split(' ')
    .map((id) => document.getElementById(id)?.textContent ?? '').join(' '));
}

/** One journey: a fresh daemon, a fresh browser context at one width. */
function journey(size, viewport, opts = {}) {
  const findings = [];
  const minor = new Set();
  let page;
  let context;
  let daemon;
  const problems = [];

  // axe in light and dark (in dark only the colour rules: the page is the
  // same but for its colours; the colour rules run at the desktop width
  // only, see axeBuilder), no
  // sideways scroll; with UI_SHOTS a screenshot of each.
  async function look(name) {
    const t0 = Date.now();
    for (const scheme of axeSchemes(viewport.width)) {
      await page.emulateMedia({ colorScheme: scheme });
      if (process.env.UI_SHOTS) await page.screenshot({ path: join(shots, `${size}-${name}-${scheme}.png`), fullPage: true });
      // Legacy mode runs axe in the page itself: no blank page per run
      // (the dashboard has no frames).
      const r = await axeBuilder(page, scheme).analyze();
      axeRuns++;
      for (const v of r.violations) {
        if (v.impact === 'serious' || v.impact === 'critical') {
          findings.push(`${name} (${scheme}): ${v.id} [${v.impact}] ${v.help}: ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
        } else {
          minor.add(`${v.id} [${v.impact}]`);
        }
      }
    }
    await page.emulateMedia({ colorScheme: 'light' });
    const over = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(over <= 0, `${name} at ${size}: ${over} px of sideways scrolling`);
    assert.deepEqual(findings, [], 'axe found serious or critical violations');
    if (process.env.UI_TIMING) console.log(`look ${size} ${name}: ${Date.now() - t0} ms`);
  }

  // Steps run in order, each in its own test; after a failure the rest
  // would only time out, so the journey stops there.
  let failed = '';
  async function step(t, name, fn) {
    if (failed) return;
    failed = name;
    await t.test(name, async () => {
      try {
        await fn();
      } catch (e) {
        const file = join(shots, `failure-${size}-${name.replace(/\W+/g, '-')}.png`);
        await page?.screenshot({ path: file, fullPage: true }).catch(() => {});
        e.message += `\n(screenshot: ${file})\n${daemon?.log.split('\n').slice(-15).join('\n')}`;
        throw e;
      }
      failed = '';
    });
  }

  const heading = (name) => page.getByRole('heading', { level: 1, name });
  const nav = (name) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
  // The heading has focus after each navigation.
  async function focusedHeading(name) {
    await heading(name).waitFor();
    await page.waitForFunction((n) => document.activeElement?.tagName === 'H1' && document.activeElement.textContent === n, name, { timeout: T });
  }

  return async (t) => {
    daemon = new Daemon(size, opts.remote ? ['--local-nets', '192.0.2.0/24'] : []);
    await daemon.start();
    const base = daemon.base;
    context = await browser.newContext({ viewport, isMobile: size === 'phone', hasTouch: size === 'phone' });
    context.setDefaultTimeout(T);
    page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    let secret = '';
    let secret2 = '';
    let machineId = 0;

    try {
      await step(t, '1. setup', async () => {
        await page.goto(base + '/');
        await heading('Welcome to tunnelsvc').waitFor();
        assert.match(page.url(), /#\/setup$/);
        // Focus starts in the first field.
        assert.equal(await page.evaluate(() => document.activeElement?.id && document.querySelector(`label[for="${document.activeElement.id}"]`)?.textContent), 'New password *');
        await look('setup');
        // The skip link is the first thing Tab reaches... on dashboard pages;
        // here a weak password gets the server's words, tied to the field.
        await page.getByLabel('New password').fill('password');
        await page.getByLabel('Repeat the password').fill('password');
        await page.getByRole('button', { name: 'Set password' }).click();
        if (opts.remote) {
          // A remote browser is told about the setup code.
          assert.match(await errorOf(page.getByLabel('Setup code')), /X-Setup-Code/);
          await page.getByText('tunnelsvc setup-code', { exact: true }).waitFor();
          await page.getByLabel('Setup code').fill(readFileSync(join(daemon.dir, 'data', 'setup-code'), 'utf8').trim());
          await page.getByRole('button', { name: 'Set password' }).click();
        }
        const weak = await errorOf(page.getByLabel('New password'));
        assert.ok(weak.length > 'At least 8 characters and not easy to guess.'.length && !/setup code/i.test(weak), weak);
        await page.getByLabel('New password').fill(PASSWORD);
        await page.getByLabel('Repeat the password').fill(PASSWORD);
        await page.getByRole('button', { name: 'Set password' }).click();
        await focusedHeading('Overview');
        await page.getByText('live', { exact: true }).waitFor(); // the stream is connected
        // Every recommended package the server lacks is named, with its use.
        const status = await page.evaluate(() => fetch('/api/local/status').then((r) => r.json()));
        assert.ok(Array.isArray(status.data.missing), JSON.stringify(status.data));
        for (const m of status.data.missing) {
          await page.getByRole('status').filter({ hasText: `${m.package} — needed for ${m.needed_for}` }).waitFor();
        }
      });

      await step(t, '2. domain', async () => {
        // Getting started: the password is done and a next step is named.
        const list = page.getByRole('list').filter({ hasText: 'Password' });
        await list.getByText('Done:').first().waitFor();
        await page.getByText('Next step:').waitFor();
        await page.getByLabel('Domain').fill('example.test');
        await page.getByLabel('Server host').fill('127.0.0.1');
        await page.getByRole('button', { name: 'Check DNS' }).click();
        // The DNS answer is compared with the detected public address.
        await page.getByRole('alert').filter({ hasText: `resolves to ${DNS_IP}, but this server's public address is ${PUBLIC_IP}` }).waitFor();
        await page.getByRole('button', { name: 'Install', exact: true }).click();
        // No systemd here: the install fails, and its failure replaces "running".
        const outcome = page.getByText(/^Last install: failed/);
        await outcome.waitFor();
        assert.equal(await page.getByText('Install is running').count(), 0);
        // The checklist compares the DNS answer with the detected address too.
        await page.getByText(/Next step: .*resolves to 203\.0\.113\.9.*203\.0\.113\.7/).waitFor();
        await look('overview');
        // The live log is not read aloud line by line.
        const log = page.getByRole('list', { name: 'Operation log' });
        assert.equal(await log.getAttribute('aria-live'), null);
        assert.equal(await log.getAttribute('role'), null);
        // A skip link comes first and leads to the heading.
        await page.reload();
        await heading('Overview').waitFor();
        await page.keyboard.press('Tab');
        const skip = page.getByRole('link', { name: 'Skip to content' });
        assert.equal(await skip.evaluate((el) => el === document.activeElement), true);
        await page.keyboard.press('Enter');
        await focusedHeading('Overview');

        if (opts.restart) {
          // The daemon goes away: one banner says so, and it goes by itself.
          await daemon.kill();
          const banner = page.getByRole('alert').filter({ hasText: 'The daemon is not answering' });
          await banner.waitFor();
          await daemon.start();
          await banner.waitFor({ state: 'hidden' });
          await page.getByText('live', { exact: true }).waitFor();
          // The stored outcome survived the restart.
          await page.reload();
          await page.getByText(/^Last install: failed/).waitFor();
        }
      });

      let token = '';
      await step(t, '3. token', async () => {
        await nav('Machines').click();
        await focusedHeading('Machines');
        await page.getByLabel('Label').fill('nas in the cellar');
        await page.getByRole('button', { name: 'Create bootstrap token' }).click();
        const cmd = page.locator('code.cmd');
        await cmd.waitFor();
        const command = await cmd.textContent();
        assert.match(command, /^curl -fsSL http:\/\/127\.0\.0\.1:\d+\/static\/bootstrap\.sh -o bootstrap\.sh && bash bootstrap\.sh \S+$/);
        token = command.split(' ').pop();
        // Step 2 saved a server host, so the command names it and no warning
        // says what to set.
        assert.equal(await page.getByRole('alert').filter({ hasText: 'Set --base-url' }).count(), 0);
        await page.getByRole('button', { name: 'Copy the join command' }).waitFor();
        await page.getByRole('status').filter({ hasText: 'Waiting for the machine to join…' }).waitFor();
        const row = page.getByRole('row').filter({ hasText: 'nas in the cellar' });
        // A pending token shows its label, when it was made and when it expires;
        // revoking asks first.
        await row.getByText(/^(just now|\d+ s ago)$/).waitFor();
        await row.getByText(/^in (60|59) min$/).waitFor();
        await row.getByRole('button', { name: 'Revoke nas in the cellar' }).click();
        const revoke = page.getByRole('alertdialog', { name: 'Revoke nas in the cellar?' });
        await revoke.getByRole('button', { name: 'Cancel' }).click();
        await revoke.waitFor({ state: 'detached' });
        await row.waitFor();
        await look('machines-join');
      });

      await step(t, '4. a machine joins by itself', async () => {
        const r = await fetch(`${base}/api/bootstrap`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ token, name: 'nas-1', username: 'pi' }),
        });
        assert.equal(r.status, 200, await r.text());
        // The waiting page turns into the machine's page.
        await focusedHeading('nas-1');
        machineId = Number(page.url().match(/#\/machines\/(\d+)$/)[1]);
        await page.getByText('never connected').first().waitFor();
        // It runs the config it joined with.
        await page.getByText('config applied (generation 1)').waitFor();
        const ssh = await page.locator('code.cmd').textContent();
        assert.match(ssh, /^ssh .*-p \d+ pi@/);
        await page.getByRole('button', { name: 'Copy the SSH command for nas-1' }).waitFor();
        await look('machine');

        // Names are unique: a second machine, then a rename onto its name.
        const t2 = await page.request.post(`${base}/api/bootstrap/tokens`, { data: { label: 'second' } });
        const tok2 = (await t2.json()).data.token;
        const r2 = await fetch(`${base}/api/bootstrap`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ token: tok2, name: 'nas-2', username: 'pi' }),
        });
        assert.equal(r2.status, 200);
        let other;
        if (opts.twoTabs) {
          other = await context.newPage();
          await other.goto(`${base}/#/machines`);
          await other.getByRole('link', { name: 'nas-1' }).waitFor();
        }
        await page.getByRole('button', { name: 'Rename nas-1' }).click();
        await page.getByLabel('New name').fill('nas-2');
        await page.getByRole('button', { name: 'Save name' }).click();
        assert.match(await errorOf(page.getByLabel('New name')), /machine name already in use/);
        await page.getByLabel('New name').fill('nas-cellar');
        await page.getByRole('button', { name: 'Save name' }).click();
        await heading('nas-cellar').waitFor();
        if (other) {
          // The other tab follows without a reload.
          await other.getByRole('link', { name: 'nas-cellar' }).waitFor();
          await other.close();
        }
      });

      await step(t, '5. tunnels', async () => {
        const form = page.getByRole('form', { name: 'New tunnel' });
        const name = form.getByLabel('Name');
        // The pattern compiles in Chrome (an invalid one is ignored) and
        // matches the server's rule.
        await name.fill('-wiki');
        assert.equal(await name.evaluate((el) => el.validity.patternMismatch), true);
        await name.fill('Wiki-1');
        assert.equal(await name.inputValue(), 'wiki-1'); // lower-cased as the server would
        assert.equal(await name.evaluate((el) => el.validity.patternMismatch), false);
        // The same rule as the server's, as its API description states it.
        const rule = readFileSync(join(repo, 'daemon/api/openapi.yaml'), 'utf8')
          .match(/TunnelInput:[\s\S]*?name:\s*\n\s*type: string\s*\n\s*pattern: (\S+)/)[1];
        assert.equal(`^${await name.getAttribute('pattern')}$`, rule);
        await name.fill('-wiki');
        await form.getByLabel('Local port').fill('8080');
        await form.getByLabel('Subdomain').fill('wiki');
        await form.getByRole('button', { name: 'Create tunnel' }).click();
        assert.match(await errorOf(name), /letters, digits and hyphens/);
        // Required fields are marked.
        assert.equal(await form.locator('label', { hasText: 'Local port' }).textContent(), 'Local port *');

        // The session ends while typing: a dialog logs in again, and the
        // tunnel is still created with what was typed.
        await name.fill('wiki');
        await context.clearCookies();
        await form.getByRole('button', { name: 'Create tunnel' }).click();
        const dlg = page.getByRole('dialog', { name: 'Your session expired' });
        await dlg.waitFor();
        await dlg.getByLabel('Password').fill(PASSWORD);
        await dlg.getByRole('button', { name: 'Log in' }).click();
        await dlg.waitFor({ state: 'hidden' });
        const link = page.getByRole('link', { name: 'https://wiki.example.test' });
        await link.waitFor();
        assert.equal(await link.getAttribute('href'), 'https://wiki.example.test');
        const row = page.getByRole('row').filter({ has: link });
        // No agent answers here: the tunnel waits for its machine to apply
        // the new config, and says so in words.
        await row.getByText('pending', { exact: true }).waitFor();
        // In a few words; the daemon's sentence opens under them.
        const why = row.locator('details.why').first();
        await why.locator('summary').getByText(/^waiting for its machine/).waitFor();
        assert.match(await why.locator('p').textContent(), /^waiting for nas-cellar to apply config generation \d+/);
        // The machine's config line says so too (in the DOM: on a phone
        // its card may be folded).
        const config = page.locator('[data-config-state="pending"]');
        await config.waitFor({ state: 'attached' });
        assert.match(await config.textContent(), /^pending since .+: .+/);
        // And how it reaches the tunnel server: directly, not yet connected.
        const transport = page.locator('[data-transport="tcp"]');
        await transport.waitFor({ state: 'attached' });
        assert.equal(await transport.textContent(), "Direct connects directly (tcp, to the tunnel server's port); not connected yet");

        // A TCP tunnel shows host:port.
        await form.getByLabel('Kind').selectOption('tcp');
        await name.fill('db');
        await form.getByLabel('Local port').fill('5432');
        await form.getByRole('button', { name: 'Create tunnel' }).click();
        await page.getByRole('row').filter({ hasText: 'db' }).getByText(/^[\w.-]+:\d+$/).waitFor();

        // A public UDP tunnel shows host:port, its kind and that it is public.
        await form.getByLabel('Kind').selectOption('udp');
        await name.fill('voip');
        await form.getByLabel('Local port').fill('5060');
        await form.getByLabel(/^Public/).check();
        await form.getByRole('button', { name: 'Create tunnel' }).click();
        const voip = page.getByRole('row').filter({ hasText: 'voip' });
        await voip.getByText(/^[\w.-]+:\d+$/).waitFor();
        await voip.locator('.badge').getByText('UDP', { exact: true }).waitFor();
        await voip.getByText('public port', { exact: true }).waitFor();

        // An HTTP site served twice (here by the same machine on two
        // ports), failover, with a health check: each part is listed.
        await form.getByLabel('Kind').selectOption('http');
        await name.fill('pool');
        await form.getByLabel('Local port').fill('8090');
        await form.getByLabel('Subdomain').fill('pool');
        await form.getByRole('button', { name: 'Add a machine' }).click();
        await form.getByLabel('Its local port').fill('8091');
        await form.getByLabel('Health check path').fill('/healthz');
        await form.getByLabel('Own domains').fill('Pool.Example.ORG');
        await form.getByRole('button', { name: 'Create tunnel' }).click();
        const pool = page.getByRole('row').filter({ hasText: 'pool' });
        // Its own domain, with the record DNS needs.
        await pool.getByRole('link', { name: 'https://pool.example.org' }).waitFor();
        await pool.getByText('DNS: a CNAME record pool.example.org → router.example.test (or an A/AAAA record with the same address as router.example.test)').waitFor();
        await pool.getByText('Served by 2 machines (failover, in this order), checked every 10 s at /healthz').waitFor();
        await pool.locator('[data-target="nas-cellar"]').getByText(/:8091/).waitFor();
        // Its health in words: not checked yet, or (once the daemon's first
        // check ran: nothing runs the machine's tunnel client here) why it is down.
        await pool.locator('[data-target="nas-cellar"]').first().getByText(/not checked yet|nothing listens on tunnel port \d+: nas-cellar's tunnel client is not connected/).waitFor();
        // The machine's page lists the part it serves beyond the tunnel's
        // own port.
        const mp = await page.context().newPage();
        await mp.goto(page.url().replace(/#.*$/, '#/machines'));
        await mp.getByRole('link', { name: 'nas-cellar' }).first().click();
        await mp.locator('[data-serves="pool"]').getByText(/^pool \(https:\/\/pool\.example\.test\) from port 8091: (pending|offline)/).waitFor({ state: 'attached' });
        await mp.close();

        // Editing uses PATCH.
        const patched = page.waitForRequest((r) => r.method() === 'PATCH' && /\/api\/tunnels\/\d+$/.test(r.url()));
        await page.getByRole('button', { name: 'Edit wiki' }).click();
        const edit = page.getByRole('dialog', { name: 'Edit tunnel wiki' });
        await edit.getByLabel('Local port').fill('8081');
        await edit.getByRole('button', { name: 'Save changes' }).click();
        await patched;
        await edit.waitFor({ state: 'hidden' });
        await page.getByRole('row').filter({ has: link }).getByText(/local port 8081$/).waitFor();
        await page.getByRole('status').filter({ hasText: 'Saved the changes to wiki.' }).waitFor();

        // Deleting asks first, naming the tunnel; cancelling keeps it.
        await page.getByRole('button', { name: 'Delete db' }).click();
        const ask = page.getByRole('alertdialog', { name: 'Delete tunnel db?' });
        await ask.getByRole('button', { name: 'Delete db' }).waitFor();
        await ask.getByRole('button', { name: 'Cancel' }).click();
        await ask.waitFor({ state: 'hidden' });
        await look('machine-tunnels');
        await nav('Tunnels').click();
        await focusedHeading('Tunnels');
        await page.getByRole('link', { name: 'nas-cellar' }).first().waitFor();
        await look('tunnels');
      });

      await step(t, '6. 2FA', async () => {
        await nav('Security').click();
        await focusedHeading('Two-factor authentication');
        await page.getByRole('button', { name: 'Turn on two-factor authentication' }).click();
        await page.getByRole('img', { name: /QR code/ }).waitFor();
        secret = (await page.locator('code.secret').textContent()).replace(/\s+/g, '');
        await page.getByLabel('Code from the app').fill(totp(secret));
        await page.getByLabel('Device name').fill('phone');
        await page.getByRole('button', { name: 'Confirm' }).click();
        await page.getByText('Backup codes — shown only now.').waitFor();
        const codes = await page.locator('ul.codes li').allTextContents();
        assert.equal(codes.length, 10);
        const [file] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download codes' }).click()]);
        assert.equal(file.suggestedFilename(), 'tunnelsvc-backup-codes.txt');
        const saved = join(tmp, `${size}-codes.txt`);
        await file.saveAs(saved);
        assert.ok(codes.every((c) => readFileSync(saved, 'utf8').includes(c)));
        await page.getByRole('button', { name: 'Remove phone' }).waitFor();
        await look('security-2fa');
        // A second device (its own replay guard) for the key download.
        await page.getByRole('button', { name: 'Add another device' }).click();
        await page.getByRole('img', { name: /QR code/ }).waitFor();
        secret2 = (await page.locator('code.secret').textContent()).replace(/\s+/g, '');
        await page.getByLabel('Code from the app').fill(totp(secret2));
        await page.getByLabel('Device name').fill('tablet');
        await page.getByRole('button', { name: 'Confirm' }).click();
        await page.getByRole('button', { name: 'Remove tablet' }).waitFor();
        // Turning 2FA off is dangerous: it asks, with a one-time-code field
        // (not masked: a code is no password).
        await page.getByRole('button', { name: 'Turn off two-factor authentication' }).click();
        const off = page.getByRole('alertdialog', { name: 'Turn off two-factor authentication?' });
        const offCode = off.getByLabel(/^Code from your authenticator app, or a backup code/);
        assert.deepEqual(await offCode.evaluate((el) => [el.type, el.inputMode, el.autocomplete]), ['text', 'numeric', 'one-time-code']);
        await look('security-2fa-off-dialog');
        await off.getByRole('button', { name: 'Cancel' }).click();
      });

      await step(t, '7. logout, login with a code', async () => {
        await page.getByRole('button', { name: 'Log out' }).click();
        await heading('Log in to tunnelsvc').waitFor();
        await look('login');
        await page.getByLabel(/^Password \*$/).fill('not the password');
        await page.getByRole('button', { name: 'Log in' }).click();
        assert.match(await errorOf(page.getByLabel(/^Password \*$/)), /invalid password/);
        // Back to the page asked for, after logging in.
        await page.goto(`${base}/#/security/keys`);
        await heading('Log in to tunnelsvc').waitFor();
        await page.getByLabel(/^Password \*$/).fill(PASSWORD);
        await page.getByRole('button', { name: 'Log in' }).click();
        await heading('Two-factor authentication').waitFor();
        await page.getByLabel('Authentication code').fill(totp(secret, Date.now() + 30_000));
        await page.getByRole('button', { name: 'Verify' }).click();
        await focusedHeading('SSH keys');
      });

      await step(t, '8. key download', async () => {
        await page.getByLabel('Name', { exact: true }).fill('laptop-key');
        await page.getByRole('button', { name: 'Generate key' }).click();
        await page.getByText('Generated laptop-key.').waitFor();
        await page.getByRole('button', { name: 'Download laptop-key' }).click();
        const dlg = page.getByRole('dialog', { name: 'Download the private key of laptop-key' });
        const code = dlg.getByLabel('Code from your authenticator app');
        assert.equal(await code.getAttribute('type'), 'text');
        await code.fill('000000');
        await dlg.getByRole('button', { name: 'Download private key' }).click();
        // A wrong code is said at the code.
        assert.match(await errorOf(code), /invalid code/);
        await code.fill(totp(secret2, Date.now() + 30_000));
        const [dl] = await Promise.all([page.waitForEvent('download'), dlg.getByRole('button', { name: 'Download private key' }).click()]);
        assert.equal(dl.suggestedFilename(), 'tunnel_id_rsa');
        const keyFile = join(tmp, `${size}-key`);
        await dl.saveAs(keyFile);
        assert.match(readFileSync(keyFile, 'utf8'), /PRIVATE KEY/);
        await dlg.waitFor({ state: 'hidden' });
        // Machines that got a key are counted.
        await page.getByRole('row').filter({ hasText: /default/ }).getByText(/^2 machines$/).waitFor();
        await look('security-keys');
        for (const [link, h1, name] of [['Ban tool', 'Ban tool', 'security-ban'], ['Firewall', 'Firewall', 'security-firewall']]) {
          await page.getByRole('navigation', { name: 'Security' }).getByRole('link', { name: link }).click();
          await focusedHeading(h1);
          await look(name);
        }
        // svc mode lists the ports it opens and warns about lock-out.
        await page.getByLabel('Mode', { exact: true }).selectOption('svc');
        await page.getByRole('button', { name: 'Apply' }).click();
        const svc = page.getByRole('alertdialog', { name: 'Let tunnelsvc take over the firewall?' });
        await svc.getByText(/^TCP 22, 80, 443/).waitFor();
        await svc.getByText(/Lock-out/).waitFor();
        await look('security-firewall-svc-dialog');
        await svc.getByRole('button', { name: 'Cancel' }).click();
      });

      await step(t, '9. the audit log shows each step', async () => {
        await page.getByRole('navigation', { name: 'Security' }).getByRole('link', { name: 'Audit log' }).click();
        await focusedHeading('Audit log');
        const log = page.getByRole('table', { name: 'Audit log' });
        for (const what of [/^Token created$/, /^Machine registered$/, /^Machine renamed$/, /^Tunnel created$/, /^Tunnel updated$/,
          /^Install started$/, /^2FA enabled$/, /^SSH key downloaded$/, /^Login success$/, /^Set-up$/]) {
          await log.getByText(what).first().waitFor();
        }
        // Names, not ids.
        await log.getByRole('row').filter({ hasText: 'Machine renamed' }).filter({ hasText: 'nas-cellar' }).first().waitFor();
        await look('security-audit');
        await page.getByLabel('Show').selectOption('machine');
        await log.getByText(/^Tunnel created$/).first().waitFor({ state: 'detached' });
        await log.getByText(/^Machine registered$/).first().waitFor();
        // Every word stays whole: no cell is narrower than its longest word.
        const broken = await page.evaluate(() => [...document.querySelectorAll('td')].filter((td) => {
          const words = (td.textContent ?? '').split(/\s+/).filter((w) => /^[A-Za-z]+$/.test(w));
          const probe = document.createElement('span');
          td.append(probe);
          const wide = words.some((w) => { probe.textContent = w; return probe.getBoundingClientRect().width > td.clientWidth + 1; });
          probe.remove();
          return wide;
        }).length);
        assert.equal(broken, 0);
      });

      assert.equal(failed, '', `the journey stopped at step "${failed}"`);
      // Chromium logs the expected answers (a weak or wrong password or
      // code, a missing setup code, a taken name, an agent that cannot be
      // reached, the daemon's restart) as failed loads; anything else, CSP
      // violations and script errors included, fails. A load cut by the
      // restart fails with whichever socket error the moment gives: reset,
      // refused, closed, not connected, or an empty response.
      const expected = /the server responded with a status of (40[013]|409|502)|net::ERR_(CONNECTION_(RESET|REFUSED|CLOSED)|SOCKET_NOT_CONNECTED|EMPTY_RESPONSE)/;
      assert.deepEqual(problems.filter((p) => !expected.test(p)), []);
      if (minor.size) t.diagnostic(`axe, moderate or minor at ${size}: ${[...minor].join(', ')}`);
    } finally {
      await context.close();
      await daemon.kill();
    }
  };
}

test('the journey at desktop width (1280 px)', { timeout: 150_000 }, journey('desktop', { width: 1280, height: 900 }, { remote: true, restart: true, twoTabs: true }));
test('the journey at phone width (390 px)', { timeout: 150_000 }, journey('phone', { width: 390, height: 844 }));
