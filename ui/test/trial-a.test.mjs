// Browser tests of what a new operator's trial found (issue 25), part a:
// tests 2-4: search and filters, short reasons with the details on demand, a frozen daemon; each at
// 1280 px and, where layout matters, 390 px, against one real daemon with
// data made through its API: search and filters, short reasons with the
// details on demand, timeouts and one-time secrets, errors at their field,
// failed joins, the getting-started links, the tunnel form after a
// success, SSH keys, the metrics page, the firewall page, phone sizes and
// the 2FA dialogs. axe-core runs on each page at 0 serious/critical.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loggedIn, startDaemon, axe } from './harness.mjs';
import { PASSWORD, DESKTOP, PHONE, d, browser, m, noAxe, rowsOf } from './trial-setup.mjs';

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
    // The whole reason is there, in words, but only when asked for.
    const dial = wiki.getByText(/TLS connection to the web proxy failed: nothing accepts connections at 127\.0\.0\.1:\d+/);
    assert.equal(await dial.isVisible(), false);
    await wiki.getByText('web proxy not answering', { exact: true }).click();
    await dial.waitFor();
    assert.equal(await page.locator('main').evaluate((el) => /dial tcp|connection refused|nothing accepts/.test(el.innerText.replace(/TLS connection to the web proxy failed: nothing accepts[^\n]*/, ''))), false);

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
