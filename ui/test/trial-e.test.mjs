// Real clients and real apps (issue 49's dashboard parts), at 1280 and 390
// px against a real daemon: the PROXY protocol under a tunnel's advanced
// options, with what the service must expect; path rules and remembered
// sign-ins in the access part of the form, a bad rule said at its field;
// a fallback page's message;
// app tokens made (the secret shown once), listed and revoked, and every
// visitor signed out, from the tunnel's Edit. axe-core finds nothing
// serious.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, loggedIn, noAxe, startDaemon } from './harness.mjs';
import { describedBy } from './trial-setup.mjs';

const PASSWORD = 'Trial-Harbour-Quill-61';
const SIZES = [['1280', { width: 1280, height: 800 }], ['390', { width: 390, height: 844 }]];
let d;
let browser;
const m = {};

before(async () => {
  d = await startDaemon('trial-e', PASSWORD);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  m.nas = await d.machine('nas');
  for (const size of ['1280', '390']) {
    m[size] = await d.call('POST', '/api/tunnels', { machine_id: m.nas.id, name: `shop-${size}`, kind: 'http', local_port: 8080,
      subdomain: `shop-${size}`, access: 'password', password: 'a long shared passphrase' });
  }
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
});

for (const [size, viewport] of SIZES) {
  test(`1. the PROXY protocol is under Advanced options, says what the service must do, and takes v2 only for udp (${size} px)`, { timeout: 60_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.nas.id}`);
    const form = page.getByRole('form', { name: 'New tunnel' });
    await form.waitFor();
    const pp = form.getByLabel('PROXY protocol');
    assert.equal(await pp.isVisible(), false, 'closed under Advanced options');
    await form.getByText('Advanced options').click();
    assert.match(await describedBy(pp), /visitor's own address.*set up to expect it/);
    await form.getByLabel('Kind').selectOption('udp');
    assert.equal(await pp.locator('option[value="v1"]').isDisabled(), true, 'udp takes no v1');
    await form.getByLabel('Kind').selectOption('tcp');
    assert.equal(await pp.locator('option[value="v1"]').isDisabled(), false);
    await pp.selectOption('v2');
    await noAxe(page, `tunnel form with its advanced options at ${size}`);
    const name = `mail-${size}`;
    await form.getByLabel(/^Name/).fill(name);
    await form.getByLabel('Local port').fill('25');
    await form.getByRole('button', { name: 'Create tunnel' }).click();
    await form.getByText(new RegExp(`^Tunnel ${name} created`)).waitFor();
    const made = (await d.call('GET', '/api/tunnels')).find((t) => t.name === name);
    assert.equal(made.proxy_protocol, 'v2');
    assert.equal(await pp.inputValue(), '', 'the form is empty again');
    await page.getByText('VPS only, PROXY v2').first().waitFor();

    // Its Edit shows it, open; turned off, it is saved off.
    await page.getByRole('button', { name: `Edit ${name}`, exact: true }).click();
    const edit = page.getByRole('dialog', { name: `Edit tunnel ${name}` });
    assert.equal(await edit.getByLabel('PROXY protocol').inputValue(), 'v2');
    await edit.getByLabel('PROXY protocol').selectOption('');
    await edit.getByRole('button', { name: 'Save changes' }).click();
    await edit.waitFor({ state: 'detached' });
    await page.getByRole('status').filter({ hasText: `Saved the changes to ${name}.` }).waitFor();
    assert.equal((await d.call('GET', `/api/tunnels/${made.id}`)).proxy_protocol, '');
    await page.context().close();
  });
}

for (const [size, viewport] of SIZES) {
  test(`2. path rules, remembered sign-ins, app tokens and signing everyone out, from the tunnel's Edit (${size} px)`, { timeout: 90_000 }, async () => {
    const t = m[size];
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${m.nas.id}`);
    await page.getByRole('button', { name: `Edit ${t.name}`, exact: true }).click();
    const edit = page.getByRole('dialog', { name: `Edit tunnel ${t.name}` });
    const rules = edit.getByLabel('Path rules');
    assert.match(await describedBy(rules), /first that matches decides/);
    await rules.fill('allow api/*');
    await edit.getByRole('button', { name: 'Save changes' }).click();
    await edit.getByText(/path must start with \//).waitFor();
    assert.equal(await rules.getAttribute('aria-invalid'), 'true', 'the refusal is said at the rules');
    assert.deepEqual((await d.call('GET', `/api/tunnels/${t.id}`)).rules ?? [], [], 'nothing changed');
    await rules.fill('allow /api/*\ndeny /admin*');
    await edit.getByLabel('Remember sign-ins for (days)').fill('30');
    assert.match(await describedBy(edit.getByLabel('Fallback page message')), /while no machine of this site answers/);
    await edit.getByLabel('Fallback page message').fill('Back at 14:00.');
    await noAxe(page, `tunnel edit with rules and app tokens at ${size}`);
    await edit.getByRole('button', { name: 'Save changes' }).click();
    await edit.waitFor({ state: 'detached' });
    const saved = await d.call('GET', `/api/tunnels/${t.id}`);
    assert.deepEqual(saved.rules, [{ path: '/api/*', action: 'allow' }, { path: '/admin*', action: 'deny' }]);
    assert.equal(saved.remember_days, 30);
    assert.deepEqual(saved.fallback, { message: 'Back at 14:00.' });

    // App tokens: the secret once, then only the name.
    await page.getByRole('button', { name: `Edit ${t.name}`, exact: true }).click();
    const again = page.getByRole('dialog', { name: `Edit tunnel ${t.name}` });
    assert.equal(await again.getByLabel('Path rules').inputValue(), 'allow /api/*\ndeny /admin*');
    const apps = again.getByRole('region', { name: `Apps and sign-ins of ${t.name}` });
    await apps.getByLabel('Token name').fill('ios-app');
    await apps.getByRole('button', { name: 'Make a token' }).click();
    await apps.getByText('Token “ios-app” — shown only now.').waitFor();
    const secret = (await apps.locator('.cmd.token').first().innerText()).trim();
    assert.match(secret, /^tsvcbt_/);
    const tokens = await d.call('GET', `/api/tunnels/${t.id}/bypass-tokens`);
    assert.equal(tokens.length, 1);
    assert.equal(tokens[0].token, undefined, 'the list never shows a secret');
    await apps.getByRole('table', { name: `App tokens of ${t.name}` }).getByText('ios-app').waitFor();
    await apps.getByRole('button', { name: 'Revoke ios-app' }).click();
    await page.getByRole('alertdialog', { name: 'Revoke the token “ios-app”?' }).getByRole('button', { name: 'Revoke the token' }).click();
    await apps.getByText('Revoked “ios-app”.').waitFor();
    assert.equal((await d.call('GET', `/api/tunnels/${t.id}/bypass-tokens`)).length, 0);
    assert.equal(await apps.getByText(secret).count(), 0, 'the revoked secret is gone from the page');

    await apps.getByRole('button', { name: 'Sign everyone out' }).click();
    await page.getByRole('alertdialog', { name: `Sign every visitor of ${t.name} out?` }).getByRole('button', { name: 'Sign everyone out' }).click();
    await apps.getByText(`Every visitor of ${t.name} is signed out.`).waitFor();
    const audit = JSON.stringify(await d.call('GET', '/api/security/logs'));
    for (const kind of ['BYPASS_TOKEN_CREATED', 'BYPASS_TOKEN_REVOKED', 'TUNNEL_VISITORS_SIGNED_OUT']) assert.ok(audit.includes(kind), kind);
    await page.context().close();
  });
}
