// Real clients and real apps (issue 49's dashboard parts), at 1280 and 390
// px against a real daemon: the PROXY protocol under a tunnel's advanced
// options, with what the service must expect. axe-core finds nothing
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
