// The dashboard's fourth trial, at 1280 and 390 px, against a real daemon
// whose bundle is 1.5.0 and whose tunnel server's API answers which
// machines are connected (harness.mjs): one machine connected with an
// outdated bundle, one that was and is gone, one that never connected and
// has reported nothing. A machine's state is one word from the server,
// with the details under it; Update is disabled with its reason where it
// cannot work, and Update all says whom it leaves out; a started update's
// notice follows how it ends; a revoked API token leaves nothing behind;
// tunnels pause and resume from their row and their Edit; Check DNS
// answers on its row, in words; no Go error reaches the page; the ban
// tool cannot be set up without fail2ban, and its failure is said once; a
// frozen daemon's wait is said in words and a join token made meanwhile
// is shown when the answer comes; the 2FA login keeps its parts in its
// card and offers a passkey only when there is one; the Security tabs fit
// one row at desktop width. axe-core finds nothing serious.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, launch, loggedIn, noAxe, startDaemon, totp } from './harness.mjs';

const PASSWORD = 'Trial-Quartz-Meadow-52';
const SERVER = '1.5.0';
const OLD = '1.4.2';
const SIZES = [['1280', { width: 1280, height: 800 }], ['390', { width: 390, height: 844 }]];
// Go's words for a failed request, which must never reach the page.
const RAW = /dial tcp|dial udp|lookup |context deadline|\bEOF\b|connect: /;
let d;
let browser;
let statics;
const m = {};

before(async () => {
  statics = mkdtempSync(join(tmpdir(), 'tunnelsvc-static-'));
  writeFileSync(join(statics, 'VERSION'), `${SERVER}\n`);
  d = await startDaemon('trial-d', PASSWORD, ['--static-dir', statics]);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  m.nas = await d.machine('nas');
  m.cam = await d.machine('cam');
  m.fresh = await d.machine('fresh');
  m.spare = await d.machine('spare');
  // What nas's and cam's agents reported (fresh and spare reported nothing).
  const now = Date.now();
  const report = (x) => `UPDATE machines SET agent_version = '${OLD}', client_version = '0.71.0', bundle_version = '${OLD}',
    arch = 'amd64', agent_capabilities = 'update', versions_at = ${now - 60_000} WHERE id = ${x.id};`;
  await d.sqlite(['.timeout 10000', 'BEGIN;', report(m.nas), report(m.cam), 'COMMIT;']);
  // nas is connected; cam was, and its client is gone.
  await d.frpLogin(m.nas);
  await d.frpLogin(m.cam);
  d.frpLogout(m.cam);
  await until(async () => (await d.call('GET', `/api/machines/${m.cam.id}`)).status === 'offline', 'cam offline');
  m.wiki = await d.call('POST', '/api/tunnels', { machine_id: m.nas.id, name: 'wiki', kind: 'http', local_port: 8080, subdomain: 'wiki',
    domains: ['docs.example.net'] });
  // A site served by three machines.
  m.site = await d.call('POST', '/api/tunnels', { machine_id: m.nas.id, name: 'shop', kind: 'http', local_port: 8081, subdomain: 'shop',
    targets: [{ machine_id: m.nas.id, local_port: 8081 }, { machine_id: m.fresh.id, local_port: 8081 }, { machine_id: m.spare.id, local_port: 8081 }] });
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
  if (statics) rmSync(statics, { recursive: true, force: true });
});

async function until(f, what, ms = 20_000) {
  for (const end = Date.now() + ms; ;) {
    if (await f()) return;
    assert.ok(Date.now() < end, `${what}: not within ${ms / 1000} s`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** No Go error text anywhere in the page, hidden details included. */
async function noRawErrors(page, where) {
  const text = await page.evaluate(() => document.body.textContent ?? '');
  const hit = RAW.exec(text);
  assert.equal(hit, null, `${where}: "${hit?.[0]}" in …${text.slice(Math.max(0, (hit?.index ?? 0) - 80), (hit?.index ?? 0) + 80)}…`);
}

/** The console's lines, but for the browser's own line for a refused
 * request the test itself asked for (401 after a logout). */
const problems = (page) => page.problems;

const machineCard = (page, title) => page.locator('section.card').filter({ has: page.getByRole('heading', { name: title, level: 2 }) });

for (const [size, viewport] of SIZES) {
  test(`1. a machine's state is one word with the details under it; nothing asks an offline agent (${size} px)`, { timeout: 90_000 }, async () => {
    // cam: offline, its update blocked with the reason, its agent not asked.
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.cam.id}`);
    await page.getByRole('heading', { name: 'cam', level: 1 }).waitFor();
    const status = machineCard(page, 'Status');
    await status.locator('.badge', { hasText: /^offline$/ }).waitFor();
    assert.equal(await status.getByText('online', { exact: true }).count(), 0);
    assert.doesNotMatch(await status.locator('dl').innerText(), /now \(connected\)/);
    const agent = machineCard(page, 'Agent');
    await agent.getByText('The machine is offline.').waitFor();
    assert.ok(await agent.getByRole('button', { name: 'Restart tunnel client' }).isDisabled());
    await agent.getByText('The machine is offline, so the tunnel client cannot be restarted from here.').waitFor();
    const soft = machineCard(page, 'Software');
    await soft.getByText(`outdated: ${SERVER} is available`).waitFor();
    const update = soft.getByRole('button', { name: 'Update cam' });
    assert.ok(await update.isDisabled(), 'Update is disabled on an offline machine');
    await soft.getByText('No update now: it is offline, so its agent cannot be reached.').waitFor();
    assert.equal(await update.evaluate((b) => document.getElementById(b.getAttribute('aria-describedby'))?.textContent),
      'No update now: it is offline, so its agent cannot be reached.');
    await noAxe(page, `offline machine at ${size}`);
    await noRawErrors(page, 'offline machine');

    // fresh: nothing reported is not "outdated".
    await page.goto(`${d.base}/#/machines/${m.fresh.id}`);
    await page.getByRole('heading', { name: 'fresh', level: 1 }).waitFor();
    await status.locator('.badge', { hasText: /^pending$/ }).waitFor();
    await soft.getByText('version not reported yet').waitFor();
    assert.equal(await soft.getByText(/outdated/).count(), 0);
    assert.ok(await soft.getByRole('button', { name: 'Update fresh' }).isDisabled());
    await soft.getByText('No update now: it has not connected yet, so its agent cannot be reached.').waitFor();
    await agent.getByText('The machine has not connected yet.').waitFor();
    // No refused request on the way: nothing asked an agent that cannot answer.
    assert.deepEqual(problems(page), []);

    // nas: online means connected now.
    await page.goto(`${d.base}/#/machines/${m.nas.id}`);
    await page.getByRole('heading', { name: 'nas', level: 1 }).waitFor();
    await status.locator('.badge', { hasText: /^online$/ }).waitFor();
    await status.getByText('now (connected)').waitFor();
    assert.ok(await soft.getByRole('button', { name: 'Update nas' }).isEnabled());
    // Its agent is asked (it is online), and says in words that it does
    // not answer: the one refused request, visible on the page.
    await agent.locator('.badge', { hasText: /^not reachable$/ }).waitFor();
    await noRawErrors(page, 'online machine');
    // What the API offers on a machine, the dashboard offers: its tunnel
    // client's config, as a file.
    const saved = page.waitForEvent('download');
    await agent.getByRole('button', { name: 'Download its client config' }).click();
    const file = await saved;
    assert.equal(file.suggestedFilename(), 'nas-client.toml');
    assert.match(readFileSync(await file.path(), 'utf8'), /^user = 'm\d+'$/m);
    await page.context().close();
  });
}

for (const [size, viewport] of SIZES) {
  test(`2. Update all says whom it leaves out and why; a started update's notice follows how it ends (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'machines');
    const table = page.getByRole('table', { name: 'Machines' });
    const row = (name) => table.getByRole('row').filter({ has: page.getByRole('link', { name, exact: true }) });
    const all = page.getByRole('button', { name: `Update all (1 machine to ${SERVER})` });
    await all.waitFor();
    const skips = '3 machines are left out: 1 machine because it is offline, so its agent cannot be reached; '
      + '2 machines because it has not connected yet, so its agent cannot be reached.';
    await page.getByText(skips).waitFor();
    assert.equal(await all.evaluate((b) => document.getElementById(b.getAttribute('aria-describedby'))?.textContent), skips);
    assert.ok(await row('cam').getByRole('button', { name: 'Update cam' }).isDisabled());
    await row('cam').getByText('No update now: it is offline, so its agent cannot be reached.').waitFor();
    await noAxe(page, `machines at ${size}`);
    // nas: connected, but no agent answers behind its tunnel.
    await row('nas').getByRole('button', { name: 'Update nas' }).click();
    await page.getByRole('dialog', { name: 'Update nas?' }).getByRole('button', { name: 'Update nas' }).click();
    const fleet = page.locator('.card').filter({ has: page.getByRole('heading', { name: 'Machines', level: 2 }) });
    await fleet.getByText(`Update of nas to ${SERVER} started: its state shows how it goes.`).or(fleet.getByText(/^The update of nas failed: /)).first().waitFor();
    await fleet.getByText(/^The update of nas failed: /).waitFor({ timeout: 60_000 });
    await row('nas').getByText('update failed').waitFor();
    // Never a green "started" beside a red "failed".
    assert.equal(await fleet.locator('.notice.ok').filter({ hasText: 'nas' }).count(), 0);
    await noRawErrors(page, 'machines after a failed update');
    assert.deepEqual(problems(page), []);
    await page.context().close();
  });
}

for (const [size, viewport] of SIZES) {
  test(`3. a revoked API token leaves nothing behind: its secret, the banner, the form's error (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'security/tokens');
    const create = page.getByRole('form', { name: 'New API token' });
    const name = `ci-${size}`;
    await create.getByLabel('Name').fill(name);
    await create.getByRole('button', { name: 'Create token' }).click();
    await page.getByRole('button', { name: `Copy the API token ${name}` }).waitFor();
    // The same name again: refused at the field.
    await create.getByLabel('Name').fill(name);
    await create.getByRole('button', { name: 'Create token' }).click();
    await create.locator('.field-error:not([hidden])').waitFor();
    // Elsewhere, the banner leads back to the secret.
    await page.goto(`${d.base}/#/machines`);
    await page.getByText(`the API token ${name}:`).waitFor();
    await page.goto(`${d.base}/#/security/tokens`);
    await page.getByRole('button', { name: `Revoke ${name}` }).click();
    await page.getByRole('alertdialog').getByRole('button', { name: 'Revoke the token' }).click();
    await page.getByText(`Revoked “${name}”.`).waitFor();
    assert.equal(await page.getByRole('button', { name: `Copy the API token ${name}` }).count(), 0);
    assert.equal(await create.locator('.field-error:not([hidden])').count(), 0);
    await page.goto(`${d.base}/#/machines`);
    await page.getByRole('heading', { name: 'Machines', level: 1 }).waitFor();
    assert.equal(await page.getByText(`the API token ${name}`).count(), 0);
    await noAxe(page, `machines after a revoke at ${size}`);
    assert.deepEqual(problems(page).filter((p) => !/status of 409/.test(p)), []);
    await page.context().close();
  });
}

for (const [size, viewport] of SIZES) {
  test(`4-5. a tunnel pauses and resumes from its row and its Edit; Check DNS answers on its row, in words (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'tunnels');
    const table = page.getByRole('table', { name: 'Tunnels' });
    const wiki = table.getByRole('row').filter({ has: page.locator('strong.name', { hasText: /^wiki$/ }) });
    await wiki.getByRole('button', { name: 'Pause wiki' }).click();
    await wiki.locator('.badge', { hasText: /^paused$/ }).waitFor();
    await wiki.getByRole('button', { name: 'Edit wiki' }).click();
    const dlg = page.getByRole('dialog', { name: 'Edit tunnel wiki' });
    const paused = dlg.getByLabel(/^Paused/);
    assert.ok(await paused.isChecked());
    await paused.uncheck();
    await dlg.getByRole('button', { name: 'Save changes' }).click();
    await dlg.waitFor({ state: 'hidden' });
    await wiki.getByRole('button', { name: 'Pause wiki' }).waitFor();
    assert.equal(await wiki.locator('.badge', { hasText: /^paused$/ }).count(), 0);
    // Check DNS: the answer is on the row, says what to set where, and
    // names no command.
    await wiki.getByRole('button', { name: 'Check DNS wiki' }).click();
    const said = wiki.locator('.notice.error');
    await said.waitFor();
    const text = await said.innerText();
    assert.match(text, /^docs\.example\.net cannot be checked yet: first add an A \(or AAAA\) record for router\.example\.test with this server's address at your DNS provider, then add a CNAME record docs\.example\.net → router\.example\.test/);
    assert.doesNotMatch(text, /check-dns|should resolve like/);
    // A site on three machines lists them under its name, not in a narrow State column.
    const shop = table.getByRole('row').filter({ has: page.locator('strong.name', { hasText: /^shop$/ }) });
    assert.equal(await shop.locator('.main-cell [data-target]').count(), 3);
    assert.equal(await shop.locator('.state [data-target]').count(), 0);
    await noAxe(page, `tunnels at ${size}`);
    await noRawErrors(page, 'tunnels');
    assert.deepEqual(problems(page), []);
    await page.context().close();
  });
}

for (const [size, viewport] of SIZES) {
  test(`6-7. no Go error on the page; the audit names the ban tool and how its set-up ended; the ban tool needs fail2ban first (${size} px)`, { timeout: 90_000 }, async () => {
    if (size === '1280') {
      // A webhook where nothing listens, and a set-up that fails (this
      // daemon's system root has no fail2ban configuration).
      const port = await freePort();
      await d.call('PUT', '/api/monitoring/notifications', { url: `http://127.0.0.1:${port}/hook`, offline_minutes: 5 });
      await d.call('POST', '/api/local/setup-banner');
      await until(async () => (await d.call('GET', '/api/security/logs')).some((e) => e.kind === 'BANNER_SETUP_FAILED'), 'the set-up ended');
    }
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'security/monitoring');
    await page.getByRole('button', { name: 'Send test' }).click();
    await page.getByText(/test notification failed: nothing accepts connections at 127\.0\.0\.1:\d+/).waitFor();
    await noRawErrors(page, 'metrics & notifications');

    await page.goto(`${d.base}/#/security/audit`);
    const log = page.getByRole('table', { name: 'Audit log' });
    await log.getByText('Ban tool set-up started', { exact: true }).waitFor();
    await log.getByText('Ban tool set-up failed', { exact: true }).waitFor();
    assert.equal(await log.getByText(/^Banner/).count(), 0);
    await noRawErrors(page, 'audit log');

    await page.goto(`${d.base}/#/security/ban`);
    const setup = page.getByRole('button', { name: 'Set up the ban tool' });
    await setup.waitFor();
    assert.ok(await setup.isDisabled(), 'no set-up without fail2ban');
    await page.getByText('Install fail2ban first (apt-get install fail2ban, or dnf install fail2ban), then set it up here.').waitFor();
    // Under the status it acts on.
    assert.ok(await page.locator('dl.kv').evaluate((dl, b) => !!(dl.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING), await setup.elementHandle()));
    // The failure's reason once: under Installed; the result points there.
    const reason = (await page.locator('dl.kv dd').first().locator('.small').innerText()).trim();
    assert.match(reason, /has no jail\.conf/);
    await page.getByText(/^Last ban-tool set-up: failed .*, for the reason shown under Installed\.$/).waitFor();
    assert.equal(await page.getByText(reason, { exact: false }).count(), 1);
    await noAxe(page, `ban tool at ${size}`);
    assert.deepEqual(problems(page), []);
    await page.context().close();
  });
}

for (const [size, viewport] of SIZES) {
  test(`8. a frozen daemon: the wait is said in words, and a join token made meanwhile is shown when the answer comes (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, 'machines');
    const form = page.getByRole('form', { name: 'Create a bootstrap token' });
    await form.getByLabel('Label').fill(`frozen-${size}`);
    d.proc.kill('SIGSTOP');
    try {
      await form.getByRole('button', { name: 'Create bootstrap token' }).click();
      await form.getByText('Waiting for the server…').waitFor();
      if (size === '1280') await form.getByText('No answer yet after 10 s: the server may be busy. Its answer shows here when it comes.').waitFor({ timeout: 20_000 });
    } finally {
      d.proc.kill('SIGCONT');
    }
    await page.getByRole('button', { name: 'Copy the join command' }).waitFor({ timeout: 30_000 });
    assert.equal(await form.getByText(/Waiting for the server|No answer yet/).count(), 0);
    await noAxe(page, `join command after a freeze at ${size}`);
    await page.getByRole('button', { name: 'Dismiss the command' }).click();
    await page.context().close();
  });
}

test('1b. the tunnel server stops: a connected machine is offline, and says why (1280 and 390 px)', { timeout: 60_000 }, async () => {
  d.frpsDown();
  await until(async () => (await d.call('GET', `/api/machines/${m.nas.id}`)).status === 'offline', 'nas offline', 30_000);
  for (const [size, viewport] of SIZES) {
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.nas.id}`);
    const status = machineCard(page, 'Status');
    await status.locator('.badge', { hasText: /^offline$/ }).waitFor();
    await status.getByText(/the tunnel server is not running: nothing has answered on its port since \d\d:\d\d:\d\d UTC/).first().waitFor();
    assert.equal(await status.getByText('now (connected)').count(), 0);
    await machineCard(page, 'Agent').getByText('The machine is offline.').waitFor();
    assert.ok(await machineCard(page, 'Software').getByRole('button', { name: 'Update nas' }).isDisabled());
    await noAxe(page, `machine with the tunnel server down at ${size}`);
    await page.context().close();
  }
});

test('9. Security tabs: one row at 1280 px', { timeout: 30_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, SIZES[0][1], 'security/audit');
  await page.getByRole('heading', { name: 'Audit log', level: 1 }).waitFor();
  const rows = await page.locator('.subnav li').evaluateAll((lis) => new Set(lis.map((li) => Math.round(li.getBoundingClientRect().top))).size);
  assert.equal(rows, 1);
  await page.context().close();
});

// Last: it turns 2FA on.
test('9. the 2FA login: the backup-code switch under its hint, every part in the card, no passkey offered without one (1280 and 390 px)', { timeout: 60_000 }, async () => {
  const en = await d.call('POST', '/api/auth/2fa/enroll');
  // Each login uses a backup code of its own (a code from the app is
  // good once per 30 s).
  const { backup_codes: codes } = await d.call('POST', '/api/auth/2fa/confirm', { code: totp(en.secret), name: 'phone' });
  for (const [size, viewport] of SIZES) {
    const context = await browser.newContext({ viewport });
    context.setDefaultTimeout(15_000);
    const page = await context.newPage();
    await page.goto(`${d.base}/#/overview`);
    await page.getByLabel(/^Password \*$/).fill(PASSWORD);
    await page.getByRole('button', { name: 'Log in' }).click();
    const card = page.getByRole('form', { name: 'Two-factor authentication' });
    const code = card.getByLabel(/^Authentication code/);
    await code.waitFor();
    const toggle = card.getByRole('button', { name: 'Type a backup code' });
    const hint = card.getByText('The 6-digit code from your authenticator app, or a backup code.');
    const [c, t, hnt] = await Promise.all([code.boundingBox(), toggle.boundingBox(), hint.boundingBox()]);
    assert.ok(t.y > hnt.y, `the switch (y ${t.y}) comes after the hint (y ${hnt.y}) at ${size}`);
    assert.ok(Math.abs(t.x - c.x) < 2, `the switch starts where the field does at ${size} (${t.x} vs ${c.x})`);
    await card.getByRole('button', { name: 'Start over' }).waitFor();
    assert.equal(await page.getByRole('button', { name: 'Use a passkey' }).count(), 0);
    const h1 = page.getByRole('heading', { name: 'Two-factor authentication', level: 1 });
    const gap = (await card.boundingBox()).y - ((await h1.boundingBox()).y + (await h1.boundingBox()).height);
    assert.ok(gap >= 8, `space under the heading: ${gap} px at ${size}`);
    await noAxe(page, `2FA login at ${size}`);
    await code.fill(codes[size === '1280' ? 0 : 1]);
    await card.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('navigation', { name: 'Main' }).waitFor();
    await context.close();
  }
});
