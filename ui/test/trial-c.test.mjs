// Browser tests of what a new operator's trial found (issue 25), part c:
// tests 9-13: SSH keys, metrics, firewall, phone sizes, sudo mode, the 2FA dialogs; each at
// 1280 px and, where layout matters, 390 px, against one real daemon with
// data made through its API: search and filters, short reasons with the
// details on demand, timeouts and one-time secrets, errors at their field,
// failed joins, the getting-started links, the tunnel form after a
// success, SSH keys, the metrics page, the firewall page, phone sizes and
// the 2FA dialogs. axe-core runs on each page at 0 serious/critical.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { loggedIn, startDaemon, axe, totp } from './harness.mjs';
import { PASSWORD, DESKTOP, PHONE, d, browser, m, noAxe, rowsOf, describedBy } from './trial-setup.mjs';

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
    await page.getByRole('navigation', { name: 'Security' }).getByRole('link', { name: /^(Two-factor|2FA)$/ }).click();
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
  for (const route of ['overview', 'machines', 'tunnels', `machines/${m.nas.id}`, 'security/2fa', 'security/keys', 'security/tokens', 'security/sso', 'security/ban', 'security/firewall', 'security/monitoring', 'security/audit']) {
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

// The live stream stops while the session is logged in again: what
// changed in between (here, from another session) shows once it is back,
// without reloading the page.
test('12c. a change made while the session had expired shows after logging in again', { timeout: 60_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, DESKTOP, `machines/${m.nas.id}`);
  await page.getByRole('heading', { name: 'nas', level: 1 }).waitFor();
  await page.context().clearCookies();
  // A check of a tunnel meets the 401 (it changes nothing of the machine),
  // unless a request the page makes by itself meets it first: the dialog
  // opens either way, and then covers the button.
  const dlg = page.getByRole('dialog', { name: 'Your session expired' });
  await Promise.race([page.getByRole('button', { name: 'Check now wiki' }).click().catch(() => {}), dlg.waitFor()]);
  await dlg.waitFor();
  await d.call('PATCH', `/api/machines/${m.nas.id}`, { name: 'nas-renamed' });
  await dlg.getByLabel('Password').fill(PASSWORD);
  await dlg.getByRole('button', { name: 'Log in' }).click();
  await dlg.waitFor({ state: 'hidden' });
  await page.getByRole('heading', { name: 'nas-renamed', level: 1 }).waitFor();
  await d.call('PATCH', `/api/machines/${m.nas.id}`, { name: 'nas' });
  await page.context().close();
});

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
