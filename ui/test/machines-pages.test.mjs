// The Machines and Tunnels pages on a fleet larger than a page: the first
// 100 rows, the next page as the last row scrolls into view, and the search
// and the filters answered by the daemon over the whole list (a row far
// past the first page is found). The real daemon, 260 machines joined
// through its bootstrap API and 130 HTTP tunnels.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, loggedIn, noAxe, rowsOf, startDaemon } from './harness.mjs';

const PASSWORD = 'Fleet-Lantern-Orchard-58';
const N = 260;
const T = 130;
let d;
let browser;

before(async () => {
  d = await startDaemon('pages', PASSWORD, [], { ports: 2 * N + T + 10 });
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  // Joined ten at a time: the order of ids is the order of names here.
  for (let i = 0; i < N; i += 10) {
    const tokens = await Promise.all(Array.from({ length: Math.min(10, N - i) }, () => d.call('POST', '/api/bootstrap/tokens', {})));
    for (const [j, t] of tokens.entries()) {
      const r = await fetch(`${d.base}/api/bootstrap`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ token: t.token, name: `host-${String(i + j).padStart(3, '0')}`, username: 'pi' }),
      });
      assert.equal(r.status, 200, await r.text());
    }
  }
  // HTTP tunnels on the first machines, ten a machine.
  for (let i = 0; i < T; i += 10) {
    await Promise.all(Array.from({ length: Math.min(10, T - i) }, (_, j) => d.call('POST', '/api/tunnels',
      { machine_id: 1 + Math.floor(i / 10), name: `site-${String(i + j).padStart(3, '0')}`, kind: 'http', subdomain: `site-${i + j}`, local_port: 8000 + j })));
  }
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
});

test(`a fleet of ${N}: a page at a time as it scrolls; search and state on the server`, { timeout: 120_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, { width: 1280, height: 800 }, 'machines');
  const rows = rowsOf(page, 'Machines');
  const names = () => rows.locator('.main-cell .name').allTextContents();
  await rows.nth(99).waitFor();
  assert.equal(await rows.count(), 100);
  const more = page.getByRole('button', { name: /^Show \d+ more of \d+ machines$/ });
  assert.equal(await more.textContent(), `Show 100 more of ${N - 100} machines`);
  // Scrolled to the end of the table, the next page comes by itself.
  await more.scrollIntoViewIfNeeded();
  await rows.nth(199).waitFor();
  await more.scrollIntoViewIfNeeded();
  await rows.nth(N - 1).waitFor();
  await more.waitFor({ state: 'hidden' });
  const all = await names();
  assert.equal(all.length, N);
  assert.equal(new Set(all).size, N, 'a machine shown twice');
  assert.deepEqual([all[0], all[N - 1]], ['host-000', `host-${N - 1}`]);

  // Search: the daemon finds a machine far past the first page.
  await page.getByRole('searchbox', { name: 'Search' }).fill(`host-${N - 3}`);
  await page.getByText(`Showing 1 of ${N} machines.`).waitFor();
  assert.deepEqual(await names(), [`host-${N - 3}`]);
  await page.getByRole('searchbox', { name: 'Search' }).fill('host-2');
  await page.getByText(`Showing ${N - 200} of ${N} machines.`).waitFor();
  // State: no machine has connected, so none is online.
  await page.getByLabel('State', { exact: true }).selectOption('online');
  await page.getByText('No machine matches the search and filters.').waitFor();
  await page.getByRole('button', { name: 'Clear the filters' }).click();
  await rows.nth(99).waitFor();
  await noAxe(page, 'a fleet larger than a page');
  assert.deepEqual(page.problems.filter((p) => !/status of (40[04]|502)/.test(p)), []);
  await page.context().close();
});

test(`${T} tunnels: a page at a time as it scrolls; search, machine and kind on the server`, { timeout: 120_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, { width: 1280, height: 800 }, 'tunnels');
  const rows = rowsOf(page, 'Tunnels');
  await rows.nth(99).waitFor();
  assert.equal(await rows.count(), 100);
  const more = page.getByRole('button', { name: /^Show \d+ more of \d+ tunnels$/ });
  assert.equal(await more.textContent(), `Show ${T - 100} more of ${T - 100} tunnels`);
  await more.scrollIntoViewIfNeeded();
  await rows.nth(T - 1).waitFor();
  await more.waitFor({ state: 'hidden' });
  assert.equal(await rows.count(), T);

  // Search: the daemon finds a tunnel past the first page.
  const search = page.getByRole('searchbox', { name: 'Search' });
  await search.fill(`site-${T - 2}`);
  await page.getByText(`Showing 1 of ${T} tunnels.`).waitFor();
  await rows.filter({ hasText: `site-${T - 2}` }).first().waitFor();
  await search.fill('');
  // One machine's tunnels, chosen by name from the daemon's machines.
  await page.getByLabel('Machine', { exact: true }).first().selectOption({ label: 'host-012' });
  await page.getByText(`Showing 10 of ${T} tunnels.`).waitFor();
  await page.getByLabel('Kind', { exact: true }).first().selectOption('tcp');
  await page.getByText('No tunnel matches the search and filters.').waitFor();
  await page.getByRole('button', { name: 'Clear the filters' }).click();
  await rows.nth(99).waitFor();
  assert.deepEqual(page.problems.filter((p) => !/status of (40[04]|502)/.test(p)), []);
  await page.context().close();
});
