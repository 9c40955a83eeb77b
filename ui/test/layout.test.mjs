// Layout test: the Machines and Tunnels tables with realistic data stay
// inside their cards at 1024, 1280 and 390 px, in light and dark. A real
// daemon gets, through its API, a domain, 20 machines with long names and
// 40 tunnels (long subdomains, access gates, allow lists); every HTTP
// tunnel is probed (nothing listens on the web proxy's port here, so each
// probe stores a real "down" result with the daemon's error), and every
// config push fails (no agent answers), so status reasons are long too.
// What a day of running adds (probes "up" with certificates and renewal
// problems, traffic history) is written into its database (seed).
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
  await probesSettled();
  await seed(ids, machines);
  const ts = await d.call('GET', '/api/tunnels');
  assert.ok(ts.some((t) => t.reachability?.state === 'down' && t.reachability.error), 'no probe result was stored');
  assert.ok(ts.some((t) => t.reachability?.state === 'up' && t.reachability.cert_issuer && t.reachability.cert_error), 'no up probe with a certificate');
  assert.ok(ts.some((t) => t.allow_ips?.length === 4));
  const traffic = await d.call('GET', '/api/monitoring/traffic');
  assert.equal(Object.keys(traffic.tunnels).length, 40, 'traffic history of every tunnel');
  browser = await launch();
});

// Each tunnel made above asks the daemon's prober for a round of every
// tunnel, which runs in the background: the seed below must come after
// the last round, or that round overwrites it. The rounds are over when no
// probe result changes for longer than the prober waits between two.
async function probesSettled() {
  const results = async () => JSON.stringify((await d.call('GET', '/api/tunnels'))
    .filter((t) => t.kind === 'http').map((t) => [t.id, t.reachability?.checked_at ?? null]));
  let last = await results();
  for (const end = Date.now() + 30_000; ;) {
    await new Promise((r) => setTimeout(r, 2500));
    const now = await results();
    if (now === last && !now.includes('null')) return;
    assert.ok(Date.now() < end, `the probes did not settle in 30 s: ${now}`);
    last = now;
  }
}

// What this box cannot produce by itself (no web proxy, no certificate
// authority, no traffic), written where the daemon keeps it, as a day of
// running would leave it: every other HTTP tunnel "up" through the proxy
// with a certificate (some with a renewal problem), and a day of traffic
// samples for every machine and tunnel, the busiest with the largest
// figures.
async function seed(ids, machines) {
  const now = Date.now();
  const day = 24 * 60 * 60 * 1000;
  const sql = ['.timeout 10000', 'BEGIN;'];
  ids.filter(([, http]) => http).forEach(([id], k) => {
    if (k % 2) return;
    const problem = k % 4 === 0
      ? "'certificate not renewed: it expires on 2026-12-04 09:12 UTC (in 7 days) and was due for renewal on 2026-11-04 09:12 UTC; the web proxy''s renewals are failing (Caddy''s log says why: journalctl -u caddy)'"
      : "''";
    sql.push(`UPDATE tunnel_probes SET state = 'up', http_status = 200, error = '', cert_issuer = 'Let''s Encrypt (R11)',
      cert_expires_at = ${now + 60 * day}, cert_valid = 1, cert_error = ${problem}, checked_at = ${now - 90_000} WHERE tunnel_id = ${id};`);
  });
  const minute = Math.floor(now / 60_000);
  ids.forEach(([id], k) => {
    const mid = machines[k % 20].id;
    for (let i = 0; i < 24 * 60; i += 20) {
      const n = (k + 1) * 1_000_003 * (1 + Math.sin(i / 90));
      sql.push(`INSERT INTO traffic_samples(proxy, minute, machine_id, tunnel_id, bytes_in, bytes_out, conns)
        VALUES ('m${mid}.tunnel-${id}', ${minute - i}, ${mid}, ${id}, ${Math.round(n * 7)}, ${Math.round(n * 131)}, ${k % 7});`);
    }
    sql.push(`INSERT INTO traffic_totals(proxy, machine_id, tunnel_id, total_in, total_out, conns)
      VALUES ('m${mid}.tunnel-${id}', ${mid}, ${id}, ${(k + 1) * 9_000_000_000}, ${(k + 1) * 170_000_000_000}, ${(k * 37) % 1200});`);
  });
  sql.push('COMMIT;');
  await d.sqlite(sql);
}

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
        // And the seeded day: certificates, a renewal problem, traffic.
        await page.getByRole('table', { name: 'Tunnels' }).getByText("Certificate: Let's Encrypt (R11)", { exact: false }).first().waitFor();
        await page.getByRole('table', { name: 'Tunnels' }).getByText('certificate not renewed', { exact: true }).first().waitFor();
        await page.getByRole('table', { name: 'Tunnels' }).getByRole('img', { name: /^last 24 h: .* GB in/ }).first().waitFor();
      }
      for (const scheme of ['light', 'dark']) {
        await page.emulateMedia({ colorScheme: scheme });
        problems.push(...(await page.evaluate(overflow)).map((p) => `#/${route} ${scheme}: ${p}`));
        // axe's dark pass (colour rules) once, at 1280 px: colours do not
        // change with the width.
        if (scheme === 'light' || width === 1280) problems.push(...await axe(page, `#/${route} at ${width}`));
        if (process.env.UI_SHOTS) await page.screenshot({ path: `${process.env.UI_SHOTS}/layout-${width}-${route.replace('/', '-')}-${scheme}.png`, fullPage: true });
      }
      await page.emulateMedia({ colorScheme: 'light' });
    }
    assert.deepEqual(problems, []);
    assert.deepEqual(page.problems.filter((p) => !/status of (401|502)/.test(p)), []);
    await page.context().close();
  });
}
