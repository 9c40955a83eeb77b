// Browser tests of what a new operator's trial found (issue 25), each at
// 1280 px and, where layout matters, 390 px, against one real daemon with
// data made through its API: search and filters, short reasons with the
// details on demand, timeouts and one-time secrets, errors at their field,
// failed joins, the getting-started links, the tunnel form after a
// success, SSH keys, the metrics page, the firewall page, phone sizes and
// the 2FA dialogs. axe-core runs on each page at 0 serious/critical.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { axe, launch, loggedIn, startDaemon } from './harness.mjs';

const PASSWORD = 'Trial-Lantern-Orchid-83';
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
let d;
let browser;
const m = {};

before(async () => {
  d = await startDaemon('trial', PASSWORD);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  m.nas = await d.machine('nas');
  m.cam = await d.machine('camera-hub');
  const tunnel = (machine, name, kind, extra = {}) => d.call('POST', '/api/tunnels', {
    machine_id: machine.id, name, kind, local_port: 8000 + Object.keys(m).length, ...(kind === 'http' ? { subdomain: name } : {}), ...extra,
  });
  m.wiki = await tunnel(m.nas, 'wiki', 'http', { allow_ips: ['203.0.113.0/24'] });
  m.grafana = await tunnel(m.nas, 'grafana', 'http');
  m.db = await tunnel(m.nas, 'db', 'tcp');
  m.rtsp = await tunnel(m.cam, 'rtsp', 'tcp');
  m.photos = await tunnel(m.cam, 'photos', 'http', { access: 'operator' });
  await d.call('POST', `/api/tunnels/${m.wiki.id}/probe`);
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
});

async function noAxe(page, name) {
  const found = [];
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    found.push(...await axe(page, name));
    if (process.env.UI_SHOTS) await page.screenshot({ path: `${process.env.UI_SHOTS}/trial-${name.replace(/\W+/g, '-')}-${scheme}.png`, fullPage: true });
  }
  await page.emulateMedia({ colorScheme: 'light' });
  assert.deepEqual(found, []);
}

const rowsOf = (page, name) => page.getByRole('table', { name }).locator('tbody tr');

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`2. tunnels and machines are searched and filtered (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'tunnels');
    await page.getByRole('heading', { name: 'Tunnels', level: 1 }).waitFor();
    const rows = rowsOf(page, 'Tunnels');
    await page.waitForFunction(() => document.querySelectorAll('table tbody tr').length === 5);
    const search = page.getByRole('searchbox', { name: 'Search' });
    await search.fill('grafana');
    await page.getByText('Showing 1 of 5 tunnels.').waitFor();
    assert.deepEqual(await rows.locator('.main-cell .name').allTextContents(), ['grafana']);
    await search.fill('');
    await page.getByLabel('Machine', { exact: true }).first().selectOption({ label: 'camera-hub' });
    await page.getByText('Showing 2 of 5 tunnels.').waitFor();
    assert.deepEqual((await rows.locator('.main-cell .name').allTextContents()).sort(), ['photos', 'rtsp']);
    await page.getByLabel('Kind', { exact: true }).first().selectOption('tcp');
    await page.getByText('Showing 1 of 5 tunnels.').waitFor();
    assert.deepEqual(await rows.locator('.main-cell .name').allTextContents(), ['rtsp']);
    // The choice survives a live refresh.
    await d.call('PATCH', `/api/tunnels/${m.rtsp.id}`, { local_port: 9000 + viewport.width });
    await rows.getByText(`local port ${9000 + viewport.width}`).waitFor();
    assert.deepEqual(await rows.locator('.main-cell .name').allTextContents(), ['rtsp']);
    await page.getByLabel('Machine', { exact: true }).first().selectOption('');
    await page.getByLabel('Kind', { exact: true }).first().selectOption('');
    // Every HTTP tunnel was probed (after its creation): nothing answers.
    await page.getByLabel('State', { exact: true }).selectOption('down');
    await page.getByText('Showing 3 of 5 tunnels.').waitFor();
    assert.deepEqual((await rows.locator('.main-cell .name').allTextContents()).sort(), ['grafana', 'photos', 'wiki']);
    await search.fill('nothing-like-this');
    await page.getByText('No tunnel matches the search and filters.').waitFor();
    await noAxe(page, `tunnels filtered at ${size}`);
    await page.getByRole('button', { name: 'Clear the filters' }).click();
    await page.waitForFunction(() => document.querySelectorAll('table tbody tr').length === 5);

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Machines' }).click();
    const mrows = rowsOf(page, 'Machines');
    await mrows.nth(1).waitFor();
    await page.getByRole('searchbox', { name: 'Search' }).fill('camera');
    await page.getByText('Showing 1 of 2 machines.').waitFor();
    assert.deepEqual(await mrows.locator('.main-cell .name').allTextContents(), ['camera-hub']);
    await page.getByLabel('State', { exact: true }).selectOption('online');
    await page.getByText('No machine matches the search and filters.').waitFor();
    await noAxe(page, `machines filtered at ${size}`);
    assert.deepEqual(page.problems.filter((p) => !/status of (40[04]|502)/.test(p)), []);
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`3. tables say why in a few words, the details on demand (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'machines');
    const nas = rowsOf(page, 'Machines').filter({ has: page.getByRole('link', { name: 'nas', exact: true }) });
    // No agent answers: the push of nas's config failed.
    const why = nas.locator('details.why');
    await why.locator('summary').getByText('config not delivered: agent not answering').waitFor();
    const full = why.locator('p');
    assert.equal(await full.isVisible(), false);
    assert.match(await full.textContent(), /^config not delivered: .{30,}/);
    await why.locator('summary').click();
    await full.waitFor();
    await noAxe(page, `machines at ${size}`);

    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Tunnels' }).click();
    const wiki = rowsOf(page, 'Tunnels').filter({ hasText: 'https://wiki.example.test' });
    await wiki.getByText('web proxy not answering', { exact: true }).waitFor();
    // The Go error is there, but only when asked for.
    const dial = wiki.getByText(/TLS connection to the web proxy failed: dial tcp/);
    assert.equal(await dial.isVisible(), false);
    await wiki.getByText('web proxy not answering', { exact: true }).click();
    await dial.waitFor();
    assert.equal(await page.locator('main').evaluate((el) => /dial tcp|connection refused/.test(el.innerText.replace(/TLS connection to the web proxy failed: dial tcp[^\n]*/, ''))), false);

    // The agent does not answer: Restart is off, and the reason is said once.
    await page.goto(`${d.base}/#/machines/${m.nas.id}`);
    const agent = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Agent' }) });
    await agent.getByText('not reachable', { exact: true }).waitFor();
    const restart = agent.getByRole('button', { name: 'Restart tunnel client' });
    assert.equal(await restart.isDisabled(), true);
    assert.match(await restart.evaluate((b) => b.getAttribute('aria-describedby') && document.getElementById(b.getAttribute('aria-describedby')).textContent), /cannot be restarted/);
    assert.equal(await agent.getByRole('alert').count(), 0);
    await noAxe(page, `machine at ${size}`);
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`4. a frozen daemon: no answer in 10 s is said, with Try again, and no false empty state; secrets stay (${size} px)`, { timeout: 120_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'machines');
    const label = `cellar pi ${size}`;
    const nav = (name) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
    await page.getByLabel('Label').fill(label);
    await page.getByRole('button', { name: 'Create bootstrap token' }).click();
    const command = await page.locator('code.cmd').textContent();
    assert.match(command, /bootstrap\.sh \S+$/);

    // Elsewhere, a notice leads back to the command; there it is again.
    await nav('Tunnels').click();
    const kept = page.locator('.secrets');
    await kept.getByText(`the join command for ${label}`).waitFor();
    await kept.getByRole('link', { name: 'show it again' }).click();
    await page.getByRole('heading', { name: 'Machines', level: 1 }).waitFor();
    assert.equal(await page.locator('code.cmd').textContent(), command);
    await page.getByRole('status').filter({ hasText: 'Waiting for the machine to join…' }).waitFor();
    assert.equal(await kept.textContent(), '');

    // The daemon freezes: the Tunnels page says so after 10 s and offers to
    // try again; it never claims there is no machine.
    d.proc.kill('SIGSTOP');
    try {
      await nav('Tunnels').click();
      const t0 = Date.now();
      const alert = page.getByRole('alert').filter({ hasText: 'the server is not answering' }).first();
      await alert.waitFor({ timeout: 20_000 });
      assert.ok(Date.now() - t0 >= 9000, `said after ${Date.now() - t0} ms`);
      await alert.getByRole('button', { name: 'Try again' }).waitFor();
      assert.equal(await page.getByText(/add a machine/).filter({ visible: true }).count(), 0);
      assert.equal(await page.getByRole('form', { name: 'New tunnel' }).isVisible(), false);
      await page.getByRole('alert').filter({ hasText: 'The daemon is not answering' }).waitFor();
      await noAxe(page, `tunnels, frozen daemon, ${size}`);
    } finally {
      d.proc.kill('SIGCONT');
    }
    // Back: the page fills by itself.
    await page.getByRole('alert').filter({ hasText: 'The daemon is not answering' }).waitFor({ state: 'detached', timeout: 20_000 });
    await page.getByRole('table', { name: 'Tunnels' }).waitFor();
    await page.getByRole('form', { name: 'New tunnel' }).waitFor();
    assert.equal(await page.getByRole('alert').filter({ hasText: 'the server is not answering' }).count(), 0);

    if (size === '390') {
      // The join command is kept until dismissed, as at 1280.
      await nav('Overview').click();
      await kept.getByRole('button', { name: `Dismiss the join command for ${label}` }).click();
      await page.getByRole('alertdialog', { name: `Dismiss the join command for ${label}?` }).getByRole('button', { name: 'Dismiss' }).click();
      await kept.getByText(`the join command for ${label}`).waitFor({ state: 'detached' });
      await page.context().close();
      return;
    }
    // The metrics token, too, is kept until it is dismissed.
    await page.goto(`${d.base}/#/security/monitoring`);
    await page.getByRole('button', { name: 'Create token' }).click();
    const token = await page.locator('.callout code.cmd').textContent();
    await nav('Overview').click();
    await kept.getByText('the new metrics token').waitFor();
    await kept.getByRole('button', { name: `Dismiss the join command for ${label}` }).click();
    const sure = page.getByRole('alertdialog', { name: `Dismiss the join command for ${label}?` });
    await sure.getByRole('button', { name: 'Dismiss' }).click();
    await kept.getByText(`the join command for ${label}`).waitFor({ state: 'detached' });
    await kept.getByRole('link', { name: 'show it again' }).click();
    assert.equal(await page.locator('.callout code.cmd').textContent(), token);
    await page.getByRole('button', { name: 'I have saved it' }).click();
    await nav('Machines').click();
    await page.getByRole('heading', { name: 'Machines', level: 1 }).waitFor();
    assert.equal(await page.locator('code.cmd').count(), 0);
    assert.equal(await kept.textContent(), '');
    await page.context().close();
  });
}

// The text that describes an input (its hint and its error).
const describedBy = (input) => input.evaluate((el) => (el.getAttribute('aria-describedby') ?? '').split(' ')
  .map((id) => document.getElementById(id)?.textContent ?? '').join(' '));

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`5. the server's errors show at their field, in words (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'tunnels');
    const form = page.getByRole('form', { name: 'New tunnel' });
    await form.waitFor();
    await form.getByLabel('Machine').selectOption({ label: 'nas' });
    await form.getByLabel(/^Name/).fill(`blog-${size}`);
    await form.getByLabel('Local port').fill('2368');
    await form.getByLabel('Subdomain').fill(`blog-${size}`);
    // The shared password says its minimum before anything is typed.
    await form.getByLabel('Access').selectOption('password');
    const pw = form.getByLabel(/^Shared password/);
    assert.match(await describedBy(pw), /At least 8 characters/);
    await pw.fill('Blue-Heron-Canal-12');
    const ips = form.getByLabel('Allowed addresses');
    await ips.fill('10.0.0.0/33, 192.0.2.7, 192.0.2.300');
    await form.getByRole('button', { name: 'Create tunnel' }).click();
    await ips.and(page.locator('[aria-invalid="true"]')).waitFor();
    const said = await describedBy(ips);
    // Every bad entry is named, not only the first.
    assert.match(said, /"10\.0\.0\.0\/33" and "192\.0\.2\.300" are not addresses or CIDRs/);
    assert.doesNotMatch(said, /allow_ips/);
    assert.equal(await ips.evaluate((el) => el === document.activeElement), true);
    // Nothing under the form repeats it.
    assert.equal(await form.locator('.notice').filter({ visible: true }).count(), 0);
    await noAxe(page, `tunnel form error at ${size}`);
    await ips.fill('10.0.0.0/8');
    assert.equal(await ips.getAttribute('aria-invalid'), null);
    await form.getByRole('button', { name: 'Create tunnel' }).click();
    await form.getByText(new RegExp(`^Tunnel blog-${size} created`)).waitFor();
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`6. failed joins show on the Machines page (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'machines');
    const failed = page.getByRole('table', { name: 'Failed join attempts' });
    if (size === '1280') {
      // With the page open: the attempt appears without a reload.
      await failed.or(page.getByText('No failed joins.')).first().waitFor();
      const r = await fetch(`${d.base}/api/bootstrap`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: 'a-token-from-last-year', name: 'old-pi', username: 'pi' }),
      });
      assert.equal(r.status >= 400, true);
    }
    const row = failed.locator('tbody tr').filter({ hasText: '127.0.0.1' });
    await row.getByText('join with a token').waitFor();
    await row.getByText(/token/).last().waitFor();
    assert.equal(await row.locator('td').nth(3).textContent(), 'unknown token');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth));
    await noAxe(page, `failed joins at ${size}`);
    await page.context().close();
  });
}

test('7. getting started: links, a description for each step, each error once', { timeout: 90_000 }, async () => {
  // A daemon of its own: no domain yet.
  const d7 = await startDaemon('overview', PASSWORD);
  try {
    const nas = await d7.machine('nas');
    await d7.call('POST', '/api/tunnels', { machine_id: nas.id, name: 'grafana', kind: 'http', local_port: 3000, subdomain: 'grafana' });
    for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
      const page = await loggedIn(browser, d7, PASSWORD, viewport, 'overview');
      const list = page.getByRole('list').filter({ hasText: 'Password set' });
      await list.getByText('First tunnel reachable').waitFor();
      // Every step but the password links to where it is done.
      assert.equal(await list.getByRole('link', { name: 'Domain and DNS' }).getAttribute('href'), '#install');
      assert.equal(await list.getByRole('link', { name: 'First machine joined' }).getAttribute('href'), '#/machines');
      assert.equal(await list.getByRole('link', { name: 'First tunnel reachable' }).getAttribute('href'), '#/tunnels');
      await list.getByRole('listitem').filter({ hasText: 'Domain and DNS' }).getByText(/DNS A record for router\.<domain>/).waitFor();
      // No domain: no "e.g. grafana." that names none; the tunnel's address to be.
      assert.doesNotMatch(await list.innerText(), /e\.g\. grafana\.\)/);
      if (size === '1280') await list.getByText('http tunnel "grafana" answers at https://grafana.<domain> once a domain is set').waitFor();
      await list.getByRole('link', { name: 'Domain and DNS' }).click();
      assert.equal(await page.getByLabel('Domain', { exact: true }).evaluate((el) => el === document.activeElement), true);
      if (size === '1280') {
        await page.getByLabel('Domain', { exact: true }).fill('example.test');
        await page.getByLabel('Server host').fill('127.0.0.1');
        await page.getByRole('button', { name: 'Install', exact: true }).click();
        await page.getByText(/^Last install: failed/).waitFor();
        await page.reload();
      }
      await page.getByText(/^Last install: failed/).waitFor();
      await page.getByText('Their state is unknown', { exact: false }).waitFor();
      // A DNS server that does not answer (nothing listens on --dns-server
      // here) is named, with what it did, in words.
      await page.getByText(/could not look up router\.example\.test: the DNS server 127\.0\.0\.1:\d+ refused the connection; check --dns-server/).first().waitFor({ state: 'attached' });
      assert.doesNotMatch(await page.locator('main').innerText(), /read udp|dial udp|lookup router\.example\.test on/);
      // The reason of the failure (no systemd here) is said once.
      const said = (await page.locator('main').innerText()).match(/systemd is not available/g) ?? [];
      assert.equal(said.length, 1, await page.locator('main').innerText());
      await noAxe(page, `overview at ${size}`);
      await page.context().close();
    }
  } finally {
    await d7.stop();
  }
});

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`8. the New tunnel form is empty after a success; a saved edit says so (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.cam.id}`);
    const notes = size === '1280' ? 'notes' : 'phone-notes';
    const port = size === '1280' ? '3003' : '3004';
    const form = page.getByRole('form', { name: 'New tunnel' });
    await form.waitFor();
    const create = async (name, port) => {
      await form.getByLabel(/^Name/).fill(name);
      await form.getByLabel('Local port').fill(String(port));
      await form.getByLabel('Subdomain').fill(name);
      await form.getByLabel('Allowed addresses').fill('192.0.2.0/24');
      await form.getByRole('button', { name: 'Create tunnel' }).click();
      await form.getByText(new RegExp(`^Tunnel ${name} created`)).waitFor();
    };
    await create(notes, 3001);
    for (const label of [/^Name/, 'Local port', 'Subdomain', 'Allowed addresses']) assert.equal(await form.getByLabel(label).inputValue(), '', String(label));
    assert.equal(await form.getByLabel('Access').inputValue(), 'public');
    assert.equal(await form.getByLabel(/^Name/).evaluate((el) => el === document.activeElement), true);
    // The next one goes in without a clash.
    await create(`${notes}-2`, 3002);
    assert.equal(await form.getByRole('alert').count(), 0);

    await page.getByRole('button', { name: `Edit ${notes}`, exact: true }).click();
    const edit = page.getByRole('dialog', { name: `Edit tunnel ${notes}` });
    await edit.getByLabel('Local port').fill(port);
    await edit.getByRole('button', { name: 'Save changes' }).click();
    await edit.waitFor({ state: 'detached' });
    await page.getByRole('status').filter({ hasText: `Saved the changes to ${notes}.` }).waitFor();
    await page.getByText(`local port ${port}`).waitFor();
    // Still there once the table has been drawn again.
    await page.getByRole('status').filter({ hasText: `Saved the changes to ${notes}.` }).waitFor();
    await noAxe(page, `machine page after an edit at ${size}`);
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`8b. audit: an access change reads old → new, in words (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.cam.id}`);
    if (size === '1280') {
      await page.getByRole('button', { name: 'Edit notes-2', exact: true }).click();
      const edit = page.getByRole('dialog', { name: 'Edit tunnel notes-2' });
      await edit.getByLabel('Access').selectOption('operator');
      await edit.getByLabel('Allowed addresses').fill('');
      await edit.getByRole('button', { name: 'Save changes' }).click();
      await edit.waitFor({ state: 'detached' });
    }
    await page.goto(`${d.base}/#/security/audit`);
    const row = page.getByRole('table', { name: 'Audit log' }).locator('tbody tr').filter({ hasText: 'notes-2' }).filter({ hasText: 'Tunnel updated' });
    await row.first().waitFor();
    const text = await row.first().innerText();
    assert.match(text, /access public → operators only/);
    assert.match(text, /allow list 192\.0\.2\.0\/24 → any address/);
    assert.doesNotMatch(text, /changed: nothing/);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth));
    await noAxe(page, `audit log at ${size}`);
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`8c. ban tool: one installed check with its reason, the missing part here, the set-up's result alone (${size} px)`, { timeout: 90_000 }, async () => {
    const conf = join(d.tmp, 'root', 'etc', 'fail2ban');
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'security/ban');
    const installed = page.locator('dl.kv dd').first();
    if (size === '1280') {
      // This daemon's system root has no fail2ban configuration: the
      // badge says no, with the reason the set-up fails with.
      await installed.getByText(/^fail2ban is not installed under this daemon's system root: .* has no jail\.conf/).waitFor();
      assert.match(await installed.innerText(), /^no/);
      const settings = page.getByRole('form', { name: 'Ban settings' });
      await settings.getByLabel('Failures before a ban').fill('5');
      await settings.getByLabel('Within (seconds)').fill('600');
      await settings.getByLabel('Ban for (seconds)').fill('3600');
      await settings.getByRole('button', { name: 'Save settings' }).click();
      await settings.locator('.notice:not([hidden])').waitFor();
      await page.getByRole('button', { name: 'Set up the ban tool' }).click();
      await page.getByText(/^Last ban-tool set-up: failed .*has no jail\.conf/).waitFor();
      // Only the set-up's result is said: the settings' message went.
      assert.equal(await settings.locator('.notice:not([hidden])').count(), 0);
      await noAxe(page, 'ban tool, set-up failed');
      // Now with fail2ban's own configuration there: installed, with its
      // version, and the part it lacks here said on this page too.
      mkdirSync(conf, { recursive: true });
      copyFileSync('/etc/fail2ban/jail.conf', join(conf, 'jail.conf'));
      await page.reload();
    }
    await installed.filter({ hasText: /^yes \(.+\)$/ }).waitFor();
    const journal = await promisify(execFile)('python3', ['-c', 'import systemd.journal']).then(() => true, () => false);
    const warning = page.locator('main .notice.warn').filter({ hasText: 'python3-systemd' });
    await page.getByRole('table', { name: 'Jails' }).or(page.getByText('No jails reported.')).first().waitFor();
    assert.equal(await warning.count(), journal ? 0 : 1, `python3 can${journal ? '' : 'not'} import systemd.journal here`);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth));
    await noAxe(page, `ban tool at ${size}`);
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`9. SSH keys: -i in the SSH command, no Delete on the default key, "1 machine trusts" (${size} px)`, { timeout: 60_000 }, async () => {
    if (size === '1280') {
      // A second key, given to one machine only, then the first is the default again.
      const keys = await d.call('GET', '/api/local/ssh-keys');
      const first = keys.find((k) => k.is_default);
      await d.call('POST', '/api/local/ssh-keys/generate', { name: 'kiosk-key', set_default: true });
      m.kiosk = await d.machine('kiosk');
      await d.call('PUT', `/api/local/ssh-keys/${encodeURIComponent(first.id)}/default`);
    }
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.kiosk.id}`);
    const ssh = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'SSH' }) });
    await ssh.getByText('kiosk-key').waitFor();
    assert.match(await ssh.locator('code.cmd').textContent(), /^ssh -i ~\/\.ssh\/tunnel_id_rsa .*-p \d+ pi@/);
    await ssh.getByRole('link', { name: 'Security → SSH keys' }).click();
    await page.getByRole('heading', { name: 'SSH keys', level: 1 }).waitFor();
    const table = page.getByRole('table', { name: 'SSH keys' });
    const def = table.locator('tbody tr').filter({ has: page.locator('.badge', { hasText: 'default' }) });
    await def.getByRole('button', { name: /^Download/ }).waitFor();
    assert.equal(await def.getByRole('button', { name: /^Delete/ }).count(), 0);
    await table.locator('tbody tr').filter({ hasText: 'kiosk-key' }).getByText('1 machine', { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Delete kiosk-key' }).click();
    const dlg = page.getByRole('alertdialog', { name: 'Delete the key kiosk-key?' });
    await dlg.getByText(/^1 machine trusts this key; you can no longer log in to it with it\.$/).waitFor();
    await noAxe(page, `keys delete dialog at ${size}`);
    await dlg.getByRole('button', { name: 'Cancel' }).click();
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`10. metrics: the URL, a scrape snippet, Copy for the token and the 2FA secret (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'security/monitoring');
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: d.base });
    const clipboard = () => page.evaluate(() => navigator.clipboard.readText());
    await page.getByRole('heading', { name: 'Metrics & notifications', level: 1 }).waitFor();
    assert.equal(await page.getByRole('heading', { name: 'Metrics & notifications' }).count(), 1);
    await page.getByText(`${d.base}/metrics`, { exact: true }).waitFor();
    await page.getByRole('button', { name: 'Copy the scrape configuration' }).click();
    const yaml = await clipboard();
    assert.match(yaml, /^scrape_configs:\n {2}- job_name: tunnelsvc\n[\s\S]*credentials_file: \S+\n[\s\S]*targets: \['127\.0\.0\.1:\d+'\]$/);
    await page.getByRole('button', { name: /^(Create|Replace) token$/ }).click();
    const replace = page.getByRole('alertdialog', { name: 'Replace the metrics token?' });
    await page.getByRole('button', { name: 'Copy the metrics token' }).or(replace).first().waitFor();
    if (await replace.isVisible()) await replace.getByRole('button', { name: 'Replace the token' }).click();
    await page.getByRole('button', { name: 'Copy the metrics token' }).click();
    const token = await clipboard();
    assert.equal((await fetch(`${d.base}/metrics`, { headers: { Authorization: `Bearer ${token}` } })).status, 200);
    await page.getByText('Copied.').first().waitFor();
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth));
    await noAxe(page, `metrics at ${size}`);
    await page.getByRole('button', { name: 'I have saved it' }).click();

    // The 2FA secret, in groups of four, copied whole.
    await page.getByRole('navigation', { name: 'Security' }).getByRole('link', { name: /^(Two-factor authentication|2FA)$/ }).click();
    await page.getByRole('button', { name: 'Turn on two-factor authentication' }).click();
    const shown = await page.locator('code.secret').textContent();
    assert.match(shown, /^([A-Z2-7]{4} )+[A-Z2-7]{1,4}$/);
    await page.getByRole('button', { name: 'Copy the secret' }).click();
    assert.equal(await clipboard(), shown.replace(/ /g, ''));
    await noAxe(page, `2fa enrolment at ${size}`);
    await page.context().close();
  });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`11. firewall: words, not false; the modes explained before Apply; Detect IP (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'security/firewall');
    await page.getByRole('table', { name: 'Firewall tools' }).waitFor();
    const text = await page.locator('main').innerText();
    assert.doesNotMatch(text, /\b(false|true|undefined)\b/);
    // Each mode is explained above the Apply button.
    const modes = page.locator('dl.modes');
    for (const m of ['none', 'manual', 'svc']) await modes.locator('dt code', { hasText: m }).waitFor();
    await modes.getByText(/Incoming traffic is dropped except SSH on port 22/).waitFor();
    const [dl, apply] = [await modes.boundingBox(), await page.getByRole('button', { name: 'Apply' }).boundingBox()];
    assert.ok(dl.y + dl.height <= apply.y);
    await noAxe(page, `firewall at ${size}`);
    // The docs' Detect IP is on the set-up form of the Overview.
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Overview' }).click();
    await page.getByRole('button', { name: 'Detect IP' }).click();
    // No IP echo answers here: it says so.
    await page.getByRole('form', { name: 'Install' }).getByRole('alert').waitFor();
    await page.getByRole('link', { name: 'Firewall' }).click();
    await page.getByRole('heading', { name: 'Firewall', level: 1 }).waitFor();
    await page.context().close();
  });
}

test('12. phone: buttons 44 px tall, Security tabs in two rows, access summaries whole', { timeout: 120_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, PHONE, 'overview');
  const short = () => page.evaluate(() => [...document.querySelectorAll('button, .top nav a, .subnav a')]
    .filter((b) => b.getClientRects().length && !b.closest('[hidden], details:not([open]) > :not(summary)'))
    .map((b) => [b.getAttribute('aria-label') || b.textContent.trim(), Math.round(b.getBoundingClientRect().height)])
    .filter(([, hgt]) => hgt < 44).map(([n, hgt]) => `${n}: ${hgt} px`));
  for (const route of ['overview', 'machines', 'tunnels', `machines/${m.nas.id}`, 'security/2fa', 'security/keys', 'security/ban', 'security/firewall', 'security/monitoring', 'security/audit']) {
    await page.goto(`${d.base}/#/${route}`);
    await page.locator('main h1').waitFor();
    await page.waitForLoadState('networkidle');
    assert.deepEqual(await short(), [], `#/${route}`);
    if (route.startsWith('security/')) {
      const rows = await page.locator('.subnav li').evaluateAll((lis) => new Set(lis.map((li) => Math.round(li.getBoundingClientRect().top))).size);
      assert.ok(rows <= 2, `the Security tabs take ${rows} rows`);
    }
    if (route === 'tunnels') {
      const access = page.locator('.access');
      await access.first().waitFor();
      const cut = await access.evaluateAll((els) => els.filter((el) => el.scrollWidth > el.clientWidth + 1
        || el.getBoundingClientRect().right > el.closest('.card').getBoundingClientRect().right).map((el) => el.textContent));
      assert.deepEqual(cut, []);
      await access.filter({ hasText: 'Access: only from 203.0.113.0/24' }).first().waitFor();
    }
  }
  // Dialogs too.
  await page.goto(`${d.base}/#/security/keys`);
  await page.getByRole('button', { name: /^Delete kiosk-key/ }).click();
  assert.deepEqual(await short(), []);
  await page.context().close();
});

// Eleven minutes later, as far as the daemon can tell: each session's
// login and latest step-up are moved 11 minutes back in the database.
async function staleSessions() {
  await promisify(execFile)('sqlite3', [join(d.tmp, 'data', 'tunnelsvc.db'),
    'UPDATE sessions SET created_at = created_at - 660, authenticated_at = authenticated_at - 660']);
}

// The step-up dialog: asked for, answered, gone; the change carried on.
async function stepUp(page, answer, wrong) {
  const dlg = page.getByRole('dialog', { name: 'Confirm it is you' });
  await dlg.waitFor();
  const field = dlg.getByLabel(/^(Your login password|Code from your authenticator app)/);
  if (wrong) {
    await field.fill(wrong);
    await dlg.getByRole('button', { name: 'Confirm and carry on' }).click();
    await field.and(page.locator('[aria-invalid="true"]')).waitFor();
  }
  await field.fill(answer);
  await dlg.getByRole('button', { name: 'Confirm and carry on' }).click();
  await dlg.waitFor({ state: 'detached' });
}

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`12b. sudo mode: a stale session is asked for the password inline, and the change carries on (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'security/monitoring');
    await page.getByRole('heading', { name: 'Metrics & notifications', level: 1 }).waitFor();
    // The metrics token.
    await staleSessions();
    await page.getByRole('button', { name: /^(Create|Replace) token$/ }).click();
    const replace = page.getByRole('alertdialog', { name: 'Replace the metrics token?' });
    await page.getByRole('dialog', { name: 'Confirm it is you' }).or(replace).first().waitFor();
    if (await replace.isVisible()) await replace.getByRole('button', { name: 'Replace the token' }).click();
    await page.getByRole('dialog', { name: 'Confirm it is you' }).waitFor();
    await noAxe(page, `step-up dialog at ${size}`);
    await stepUp(page, PASSWORD, 'not-the-password');
    await page.getByRole('button', { name: 'Copy the metrics token' }).waitFor();
    await page.getByRole('button', { name: 'I have saved it' }).click();
    // Webhooks (loopback: nothing is sent by saving).
    await staleSessions();
    const hook = `http://127.0.0.1:9/hook-${size}`;
    await page.getByLabel(/^Webhook URL/).fill(hook);
    await page.getByRole('button', { name: 'Save notifications' }).click();
    await stepUp(page, PASSWORD);
    await page.getByRole('form', { name: 'Notification settings' }).getByText('Saved.', { exact: true }).waitFor();
    assert.equal((await d.call('GET', '/api/monitoring/notifications')).url, hook);
    // The firewall mode.
    await staleSessions();
    await page.getByRole('navigation', { name: 'Security' }).getByRole('link', { name: 'Firewall' }).click();
    await page.getByRole('table', { name: 'Firewall tools' }).waitFor();
    const want = size === '1280' ? 'manual' : 'none';
    await page.getByLabel('Mode', { exact: true }).selectOption(want);
    await page.getByRole('button', { name: 'Apply' }).click();
    await stepUp(page, PASSWORD);
    await page.locator('main').getByText(new RegExp(`Current mode: .*\\(${want}\\)`)).waitFor();
    assert.equal((await d.call('GET', '/api/local/firewall/detect')).mode, want);
    // The refusals the dialog answered are in the console as network
    // errors (403, and 401 for the wrong password); nothing else is.
    assert.deepEqual(page.problems.filter((p) => !/^console: Failed to load resource: .* (403|401) /.test(p)), []);
    // No webhook left behind for the tests that follow.
    await d.call('POST', '/api/auth/step-up', { password: PASSWORD });
    await d.call('PUT', '/api/monitoring/notifications', { url: '', preset: 'ntfy', offline_minutes: 10 });
    await page.context().close();
  });
}
// RFC 6238 code for a base32 secret, as an authenticator app computes it.
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

// Last: it turns 2FA on.
test('13. 2FA: codes in plain one-time-code fields, no "another device" for one device, errors at the code; no ring round the title', { timeout: 120_000 }, async () => {
  const context = await browser.newContext({ viewport: DESKTOP });
  context.setDefaultTimeout(15_000);
  const page = await context.newPage();
  // Opened by its URL: after logging in with Enter, the title has focus
  // but no focus ring.
  await page.goto(`${d.base}/#/tunnels`);
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.keyboard.press('Enter');
  const h1 = page.getByRole('heading', { name: 'Tunnels', level: 1 });
  await h1.waitFor();
  await page.waitForFunction(() => document.activeElement?.tagName === 'H1');
  assert.equal(await h1.evaluate((el) => getComputedStyle(el).outlineStyle), 'none');

  await page.goto(`${d.base}/#/security/2fa`);
  await page.getByRole('button', { name: 'Turn on two-factor authentication' }).click();
  const code = page.getByLabel('Code from the app');
  assert.deepEqual(await code.evaluate((el) => [el.type, el.inputMode, el.autocomplete]), ['text', 'numeric', 'one-time-code']);
  const secret = (await page.locator('code.secret').textContent()).replace(/\s+/g, '');
  await code.fill(totp(secret));
  await page.getByLabel('Device name').fill('phone');
  await page.getByRole('button', { name: 'Confirm' }).click();
  await page.getByText('Backup codes — shown only now.').waitFor();
  const backup = await page.locator('ul.codes li').allTextContents();

  // One device: removing it takes a backup code; no other device is named.
  await page.getByRole('button', { name: 'Remove phone' }).click();
  const rm = page.getByRole('alertdialog', { name: 'Remove phone?' });
  await rm.getByLabel(/^A backup code/).waitFor();
  assert.doesNotMatch(await rm.innerText(), /another device/);
  assert.equal(await rm.getByLabel(/^A backup code/).getAttribute('type'), 'text');
  await rm.getByRole('button', { name: 'Type a backup code' }).click();
  assert.equal(await rm.getByLabel(/^A backup code/).evaluate((el) => el.inputMode), 'text');
  await noAxe(page, '2fa remove dialog');
  await rm.getByRole('button', { name: 'Cancel' }).click();
  // Turning it off takes a code from the app (or a backup code): a wrong
  // one is said at the code.
  await page.getByRole('button', { name: 'Turn off two-factor authentication' }).click();
  const off = page.getByRole('alertdialog', { name: 'Turn off two-factor authentication?' });
  const offCode = off.getByLabel(/^Code from your authenticator app, or a backup code/);
  assert.doesNotMatch(await off.innerText(), /another device/);
  await offCode.fill('000000');
  await off.getByRole('button', { name: 'Turn off 2FA' }).click();
  await offCode.and(page.locator('[aria-invalid="true"]')).waitFor();
  assert.match(await describedBy(offCode), /invalid code/);
  assert.equal(await off.getByRole('alert').count(), 0);
  await page.setViewportSize(PHONE);
  await noAxe(page, '2fa off dialog, wrong code, 390');
  await page.setViewportSize(DESKTOP);
  await off.getByRole('button', { name: 'Cancel' }).click();

  // The login's code step says a wrong code at the field, as the password step does.
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  const login = page.getByLabel(/^Authentication code/);
  assert.deepEqual(await login.evaluate((el) => [el.type, el.inputMode, el.autocomplete]), ['text', 'numeric', 'one-time-code']);
  await login.fill('000000');
  await page.getByRole('button', { name: 'Verify' }).click();
  await login.and(page.locator('[aria-invalid="true"]')).waitFor();
  assert.match(await describedBy(login), /invalid code/);
  assert.equal(await page.getByRole('form', { name: 'Two-factor authentication' }).locator('.notice').filter({ visible: true }).count(), 0);
  await noAxe(page, 'login code error');
  await login.fill(backup[0]);
  await page.getByRole('button', { name: 'Verify' }).click();
  await page.getByRole('heading', { name: 'Overview', level: 1 }).waitFor();

  // Another device, from a session that logged in long ago: a code from
  // the app is asked for inline (a wrong one said at the code), then the
  // new-device form opens under its button, above Turn off, with Cancel.
  for (const viewport of [DESKTOP, PHONE]) {
    await page.setViewportSize(viewport);
    await page.goto(`${d.base}/#/security/2fa`);
    if (viewport === DESKTOP) {
      await staleSessions();
      await page.getByRole('button', { name: 'Add another device' }).click();
      // The next step's code: the confirm spent this one. (The step-up
      // dialog at 390 px is in 12b.)
      await stepUp(page, totp(secret, Date.now() + 30_000), '000000');
    } else {
      await page.getByRole('button', { name: 'Add another device' }).click();
    }
    const enrol = page.getByRole('form', { name: 'Confirm the new device' });
    await enrol.waitFor();
    const [formBox, offBox] = [await enrol.boundingBox(), await page.getByRole('heading', { name: 'Turn off' }).boundingBox()];
    assert.ok(formBox.y + formBox.height <= offBox.y, 'the new-device form is above Turn off');
    await noAxe(page, `another device at ${viewport.width}`);
    await enrol.getByRole('button', { name: 'Cancel' }).click();
    await enrol.waitFor({ state: 'detached' });
    assert.equal(await page.locator('code.secret').count(), 0);
  }
  await context.close();
});
