// The Edges page on a cluster of two real daemons sharing one throwaway
// PostgreSQL (edge B got edge A's sealing key, as `tunnelsvc edge join`
// hands it): both edges listed and up, "this edge" on the one serving the
// page, Retire only on the other; the machine × edge grid after the
// machine's tunnel client logged in to edge A (frp's server-plugin call);
// the machine's page lists what each edge sees; a session made on A works
// on B; adding an edge says why it is refused here (no HTTPS); retiring
// edge B. axe at 0 serious/critical, at desktop and phone width.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, loggedIn, noAxe, rowsOf, startDaemon, startPostgres } from './harness.mjs';

const PASSWORD = 'Edge-Harbour-Compass-41';
const DESKTOP = { width: 1280, height: 800 };
const PHONE = { width: 390, height: 844 };
let pg;
let a;
let b;
let browser;
let nas;
let cam;

before(async () => {
  pg = await startPostgres();
  a = await startDaemon('edge-a', PASSWORD, ['--database', pg.url, '--edge-name', 'edge-a']);
  b = await startDaemon('edge-b', PASSWORD, ['--database', pg.url, '--edge-name', 'edge-b'], { joinOf: a });
  await a.call('POST', '/api/local/skip', { domain: 'example.test' });
  nas = await a.machine('nas');
  cam = await a.machine('camera-hub');
  await a.frpLogin(nas);
  await b.frpLogin(cam);
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await b?.stop();
  await a?.stop();
  await pg?.stop();
});

for (const [size, viewport] of [['1280', DESKTOP], ['390', PHONE]]) {
  test(`edges, the machine × edge grid, and a machine's edges (${size} px)`, { timeout: 90_000 }, async () => {
    const page = await loggedIn(browser, a, PASSWORD, viewport, 'edges');
    await page.getByRole('heading', { name: 'Edges', level: 1 }).waitFor();
    const edges = rowsOf(page, 'Edges');
    const rowA = edges.filter({ hasText: 'edge-a' });
    const rowB = edges.filter({ hasText: 'edge-b' });
    await rowA.getByText('this edge', { exact: true }).waitFor();
    await rowA.getByText('up', { exact: true }).waitFor();
    await rowB.getByText('up', { exact: true }).waitFor();
    assert.equal(await edges.count(), 2);
    // An edge is retired from another one.
    assert.equal(await page.getByRole('button', { name: 'Retire edge-a' }).count(), 0);
    await page.getByRole('button', { name: 'Retire edge-b' }).waitFor();

    // The grid: nas logged in to edge A only, camera-hub to edge B only.
    const grid = rowsOf(page, 'Machines on each edge');
    const cells = async (name) => (await grid.filter({ has: page.getByRole('link', { name, exact: true }) })
      .locator('td').allInnerTexts()).slice(1).map((t) => t.replace(/\s+/g, ' ').trim());
    const heads = (await page.getByRole('table', { name: 'Machines on each edge' }).locator('th').allTextContents()).slice(1);
    assert.deepEqual(heads, ['edge-a', 'edge-b']);
    // A cell's words, once the grid shows them as they are laid out: read
    // while the page was still laying the grid out, the status and its
    // time once came out run together ('onlineseen just now').
    const cellSays = async (name, i, re) => {
      const deadline = Date.now() + 10_000;
      let got;
      while (Date.now() < deadline) {
        got = (await cells(name))[i];
        if (re.test(got)) return;
        await page.waitForTimeout(100);
      }
      assert.match(got, re);
    };
    await cellSays('nas', 0, /^online seen (just now|\d+ s ago)$/);
    await cellSays('nas', 1, /^never connected$/);
    await cellSays('camera-hub', 0, /^never connected$/);
    await cellSays('camera-hub', 1, /^online /);
    await noAxe(page, `edges at ${size}`);

    // The machine's page says what each edge sees.
    await page.getByRole('link', { name: 'nas', exact: true }).click();
    await page.getByRole('heading', { name: 'nas', level: 1 }).waitFor();
    assert.equal(await page.locator('.edge-list li').count(), 0, 'one edge saw it: no list');
    await page.context().close();
  });
}

test('a session made on edge A works on edge B', { timeout: 60_000 }, async () => {
  const page = await loggedIn(browser, a, PASSWORD, DESKTOP, 'edges');
  await page.getByRole('heading', { name: 'Edges', level: 1 }).waitFor();
  // Both are 127.0.0.1 here, on other ports: the browser sends A's
  // session cookie to B, as it would to another edge behind one name.
  await page.goto(`${b.base}/#/edges`);
  await page.getByRole('heading', { name: 'Edges', level: 1 }).waitFor();
  await rowsOf(page, 'Edges').filter({ hasText: 'edge-b' }).getByText('this edge', { exact: true }).waitFor();
  assert.equal(await page.getByLabel(/^Password \*$/).count(), 0);
  await page.context().close();
});

test('adding an edge needs HTTPS, and says so; retiring edge B', { timeout: 60_000 }, async () => {
  const page = await loggedIn(browser, a, PASSWORD, DESKTOP, 'edges');
  await page.getByRole('heading', { name: 'Edges', level: 1 }).waitFor();
  const add = page.getByRole('form', { name: 'Add an edge' });
  await add.getByRole('button', { name: 'Create an edge join command' }).click();
  await add.getByText(/only over HTTPS/).waitFor();

  // nas was seen by edge A only; camera-hub by edge B: it logs in to A
  // too, then B is retired. B's row says retiring, and has no Retire.
  await a.frpLogin(cam);
  await page.getByRole('button', { name: 'Retire edge-b' }).click();
  const dlg = page.getByRole('alertdialog', { name: 'Retire edge-b?' });
  await dlg.getByRole('button', { name: 'Retire edge-b' }).click();
  const rowB = rowsOf(page, 'Edges').filter({ hasText: 'edge-b' });
  await rowB.getByText('retiring', { exact: true }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Retire edge-b' }).count(), 0);
  const audit = await a.call('GET', '/api/security/logs');
  assert.ok(audit.some((e) => e.kind === 'EDGE_RETIRING' && /"edge-b"/.test(e.detail)), JSON.stringify(audit.slice(0, 3)));
  await page.context().close();
});
