// Layout test: the Machines and Tunnels tables with realistic data stay
// inside their cards at 1024, 1280 and 390 px, in light and dark. A real
// daemon gets, through its API, a domain, 20 machines with long names and
// 40 tunnels (long subdomains, access gates, allow lists); every HTTP
// tunnel is probed (nothing listens on the web proxy's port here, so each
// probe stores a real "down" result with the daemon's error), and every
// config push fails (no agent answers), so status reasons are long too.
// For every card and table wrapper scrollWidth <= clientWidth, no word is
// wider than its cell, and axe-core finds nothing serious or critical.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { axe, launch, loggedIn, startDaemon } from './harness.mjs';

const PASSWORD = 'Layout-Harbor-Quartz-61';
let d;
let browser;
let busiest;

const PLACES = ['Basement NAS behind the boiler (Synology DS920+)', 'warehouse-freezer-monitoring-pi-building-7-north',
  'Grandma’s house — living room media centre', 'office-rack-2-hypervisor-proxmox-primary-node', 'garden shed camera hub'];

before(async () => {
  d = await startDaemon('layout', PASSWORD);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  const machines = [];
  for (let i = 0; i < 20; i++) {
    machines.push(await d.machine(i < 10 ? `${PLACES[i % PLACES.length]} ${i + 1}` : `m${i}`, i % 3 ? 'pi' : 'operations-admin'));
  }
  busiest = machines[0];
  const ids = [];
  for (let i = 0; i < 40; i++) {
    const m = machines[i % 20];
    const http = i % 4 !== 3;
    const name = i % 5 === 0 ? `grafana-dashboard-for-the-monitoring-stack-${i}` : `svc-${i}`;
    const body = { machine_id: m.id, name, kind: http ? 'http' : 'tcp', local_port: 3000 + i };
    if (http) {
      body.subdomain = i % 5 === 0 ? `very-long-subdomain-name-for-the-internal-monitoring-stack-${i}` : `app${i}`;
      body.access = ['public', 'operator', 'password'][i % 3];
      if (body.access === 'password') body.password = 'Correct-Horse-Battery-9';
      if (i % 2 === 0) body.allow_ips = ['203.0.113.0/24', '198.51.100.17', '2001:db8:1234:5678::/64', '192.0.2.128/25'];
    } else {
      // Not public: a public TCP tunnel makes the daemon (running on this
      // host, not in a namespace) load its publish table into the host's
      // nftables and turn on route_localnet, which outlives the test.
      body.public = false;
    }
    ids.push([(await d.call('POST', '/api/tunnels', body)).id, http]);
  }
  // A stored probe result for every HTTP tunnel ("down": nothing listens
  // on the web proxy's port here).
  await Promise.all(ids.filter(([, http]) => http).map(([id]) => d.call('POST', `/api/tunnels/${id}/probe`)));
  const ts = await d.call('GET', '/api/tunnels');
  assert.ok(ts.some((t) => t.reachability?.state === 'down' && t.reachability.error), 'no probe result was stored');
  assert.ok(ts.some((t) => t.allow_ips?.length === 4));
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
});

// What overflows on the page: every card and table wrapper whose content
// is wider than itself, and every cell narrower than one of its words.
function overflow() {
  const out = [];
  const name = (el) => el.closest('section.card')?.querySelector('h2')?.textContent ?? el.className;
  for (const el of document.querySelectorAll('main .card, main .table-wrap, main table')) {
    const box = el.tagName === 'TABLE' ? el.parentElement : el;
    if (el.tagName === 'TABLE' ? el.getBoundingClientRect().width > box.clientWidth + 1 : el.scrollWidth > el.clientWidth + 1) {
      out.push(`${el.tagName.toLowerCase()}.${el.className} in "${name(el)}": ${el.scrollWidth} > ${box.clientWidth}`);
    }
  }
  for (const b of document.querySelectorAll('main button, main a')) {
    const card = b.closest('.card');
    if (!card || b.closest('[hidden]') || b.getClientRects().length === 0) continue;
    if (b.getBoundingClientRect().right > card.getBoundingClientRect().right + 1) out.push(`"${b.textContent}" sticks out of "${name(card)}"`);
  }
  const probe = document.createElement('span');
  for (const td of document.querySelectorAll('main td')) {
    const words = (td.textContent ?? '').split(/\s+/).filter((w) => /^[A-Za-z]{2,20}$/.test(w));
    td.append(probe);
    for (const w of words) {
      probe.textContent = w;
      if (probe.getBoundingClientRect().width > td.clientWidth + 1) { out.push(`a "${td.dataset.label}" cell is ${td.clientWidth} px, narrower than "${w}"`); break; }
    }
    probe.remove();
  }
  if (document.documentElement.scrollWidth > innerWidth) out.push(`the page scrolls sideways by ${document.documentElement.scrollWidth - innerWidth} px`);
  return out.length > 12 ? [...out.slice(0, 12), `and ${out.length - 12} more`] : out;
}

// Waits until the table shows n rows of data.
const rows = (page, name, n) => page.waitForFunction(([name, n]) =>
  [...document.querySelectorAll('table')].some((t) => t.querySelector('caption')?.textContent === name && t.tBodies[0]?.rows.length >= n), [name, n]);

for (const [width, height] of [[1280, 800], [1024, 768], [390, 844]]) {
  test(`tables fit at ${width} px, light and dark`, { timeout: 120_000 }, async () => {
    const page = await loggedIn(browser, d, PASSWORD, { width, height }, 'tunnels');
    const problems = [];
    for (const [route, ready] of [
      ['tunnels', (p) => rows(p, 'Tunnels', 40)],
      ['machines', (p) => rows(p, 'Machines', 20)],
      [`machines/${busiest.id}`, (p) => rows(p, 'Tunnels', 2)],
    ]) {
      await page.goto(`${d.base}/#/${route}`);
      await ready(page);
      // The stored probe results and the allow lists are on screen.
      if (route === 'tunnels') {
        await page.getByText('203.0.113.0/24', { exact: false }).first().waitFor();
        await page.getByRole('table', { name: 'Tunnels' }).getByText(/down/).first().waitFor();
      }
      for (const scheme of ['light', 'dark']) {
        await page.emulateMedia({ colorScheme: scheme });
        problems.push(...(await page.evaluate(overflow)).map((p) => `#/${route} ${scheme}: ${p}`));
        problems.push(...await axe(page, `#/${route} at ${width}`));
        if (process.env.UI_SHOTS) await page.screenshot({ path: `${process.env.UI_SHOTS}/layout-${width}-${route.replace('/', '-')}-${scheme}.png`, fullPage: true });
      }
      await page.emulateMedia({ colorScheme: 'light' });
    }
    assert.deepEqual(problems, []);
    assert.deepEqual(page.problems.filter((p) => !/status of (401|502)/.test(p)), []);
    await page.context().close();
  });
}
