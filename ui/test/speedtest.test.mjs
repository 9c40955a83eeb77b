// A machine's speed test (issue 50) on its page, at 1280 and 390 px,
// against a real daemon: the history written into its database shows as
// the last result, a chart and a table; a test another edge runs shows its
// phase and progress with Test now disabled, and its end shows without a
// reload; Test now while one runs is refused in the daemon's words (409),
// and for a machine whose tunnel client is not connected too. Then a whole
// test from Test now, against a stand-in for the machine's agent on its
// agent port (where frps would forward its agent tunnel), which speaks the
// agent's signed protocol: its phases and progress while it runs, then the
// result. axe-core finds nothing serious.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { launch, loggedIn, noAxe, startDaemon } from './harness.mjs';

const PASSWORD = 'Speed-Harbour-Lilac-29';
const SIZES = [['1280', { width: 1280, height: 800 }], ['390', { width: 390, height: 844 }]];
let d;
let browser;
let agent;
const m = {};

// What the machine's agent signs (daemon/agent/sign.go, speedtest.go).
const mac = (token, ...parts) => createHmac('sha256', token).update(parts.join('\n')).digest('hex');
const sha = (b) => createHash('sha256').update(b).digest('hex');

/** A stand-in for tunnel-agent on 127.0.0.1:port: it signs its answers
 * with token as the agent does (the requests it takes as they come: the
 * agent's own tests check those). The download is read to its end and
 * answered 1.5 s later as 50 Mbit/s; the upload sends 16 MB over 1.6 s. */
function fakeAgent(token, port) {
  const filler = randomBytes(1 << 20);
  const srv = createServer((req, res) => {
    const nonce = req.headers['x-agent-nonce'] ?? '';
    const answer = (status, v) => {
      const body = Buffer.from(JSON.stringify(v));
      res.writeHead(status, { 'Content-Type': 'application/json', 'X-Agent-Signature': mac(token, 'tunnel-agent response v1', nonce, String(status), sha(body)) });
      res.end(body);
    };
    const route = `${req.method} ${new URL(req.url, 'http://agent').pathname}`;
    if (route === 'POST /speedtest/upload') {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', Trailer: 'X-Agent-Signature' });
      let sent = 0;
      const tick = setInterval(() => {
        res.write(filler);
        sent += filler.length;
        if (sent < 16 * filler.length) return;
        clearInterval(tick);
        res.addTrailers({ 'X-Agent-Signature': mac(token, 'tunnel-agent upload v1', nonce, String(sent)) });
        res.end();
      }, 100);
      return;
    }
    let bytes = 0;
    req.on('data', (c) => { bytes += c.length; });
    req.on('end', () => {
      switch (route) {
        case 'GET /challenge': return answer(200, { challenge: `1.${randomBytes(16).toString('hex')}.x` });
        case 'GET /status': return answer(200, { unit: 'revtunnel-client.service', active_state: 'active', sub_state: 'running',
          agent_version: '1.5.0', revtunnel_client_version: '0.71.0', capabilities: ['update', 'speedtest'], arch: 'amd64', bundle_version: '1.5.0' });
        case 'POST /speedtest/download': return setTimeout(() => answer(200, { bytes, seconds: 8, steady_bytes: 37_500_000, steady_seconds: 6 }), 1500);
        case 'POST /speedtest/mtu': return answer(200, { address: '127.0.0.1', mtu: 1500, payload: 1472 });
        default: return answer(404, { error: 'not found' });
      }
    });
  });
  return new Promise((res) => srv.listen(port, '127.0.0.1', () => res(srv)));
}

// A test as the daemon stores it (daemon/store/migrations/0420_speedtests.sql).
const row = (machine, { edge = 'vps-a', state = 'done', phase = '', ago, down, up, rtt, mtu = 1400, error = '' }) => {
  const at = Date.now() - ago;
  const n = (v) => (v == null ? 'NULL' : String(v));
  return `INSERT INTO speedtests(machine_id, edge, state, phase, seconds, started_at, finished_at, download_kbps, upload_kbps, rtt_us, mtu, payload, error)
    VALUES (${machine.id}, '${edge}', '${state}', '${phase}', 10, ${at}, ${state === 'running' ? 'NULL' : at + 25_000}, ${n(down)}, ${n(up)}, ${n(rtt)},
    ${state === 'done' ? mtu : 'NULL'}, ${state === 'done' ? mtu - 28 : 'NULL'}, '${error}');`;
};

before(async () => {
  d = await startDaemon('speedtest', PASSWORD);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  for (const name of ['pi-1280', 'pi-390', 'cam', 'nas']) m[name] = await d.machine(name);
  const day = 24 * 3600_000;
  for (const size of ['1280', '390']) {
    await d.sqlite(['.timeout 10000',
      row(m[`pi-${size}`], { ago: 20 * day, down: 48_200, up: 19_800, rtt: 41_000 }),
      row(m[`pi-${size}`], { ago: 9 * day, state: 'failed', down: 47_000, error: 'upload: the agent of machine 1 is not reachable' }),
      row(m[`pi-${size}`], { ago: 5 * day, down: 45_100, up: 20_400, rtt: 39_500 }),
      row(m[`pi-${size}`], { ago: 2 * day, down: 52_300, up: 21_000, rtt: 38_200 })]);
  }
  // Their tunnel clients are connected (a test needs that); cam's is not.
  for (const name of ['pi-1280', 'pi-390', 'nas']) await d.frpLogin(m[name]);
  agent = await fakeAgent(m.nas.registration.agent_token, m.nas.agent_port);
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  agent?.close();
  agent?.closeAllConnections();
  await d?.stop();
});

for (const [size, viewport] of SIZES) {
  test(`1. the history, a test running elsewhere, and the refusals (${size} px)`, { timeout: 90_000 }, async () => {
    const pi = m[`pi-${size}`];
    const page = await loggedIn(browser, d, PASSWORD, viewport, `machines/${pi.id}`);
    const card = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Speed test' }) });
    const last = card.getByRole('definition');
    await card.locator('[data-speed="download"]').getByText('52.3 Mbit/s').waitFor();
    assert.deepEqual(await last.allInnerTexts().then((t) => t.slice(0, 4)), ['52.3 Mbit/s', '21.0 Mbit/s', '38.2 ms', '1372 bytes (MTU 1400)']);
    assert.match(await card.getByRole('img').getAttribute('aria-label'), /^3 speed tests since .*; fastest 52\.3 Mbit\/s; last: download 52\.3 Mbit\/s, upload 21\.0 Mbit\/s$/);
    await card.getByText('All tests (4)').click();
    const rows = card.getByRole('table', { name: 'Speed tests' }).locator('tbody tr');
    assert.equal(await rows.count(), 4);
    assert.match(await rows.nth(2).innerText(), /failed: upload: the agent of machine 1 is not reachable/);
    const button = card.getByRole('button', { name: 'Test now' });
    assert.equal(await button.isDisabled(), false);
    await noAxe(page, `speed test history at ${size}`);

    // Another edge starts one: Test now is refused in the daemon's words.
    await d.sqlite(['.timeout 10000', row(pi, { edge: 'vps-b', state: 'running', phase: 'upload', ago: 2000 })]);
    await button.click();
    await card.getByRole('alert').filter({ hasText: `a speed test of machine "${pi.name}" is running; wait for it to end` }).waitFor();
    // Shown again, the page follows it: phase, progress, Test now disabled.
    await page.reload();
    await card.getByRole('status').filter({ hasText: 'Testing the upload (machine to server)… 45 %' }).waitFor();
    assert.equal(await card.getByRole('progressbar', { name: 'Speed test progress' }).getAttribute('value'), '45');
    assert.equal(await button.isDisabled(), true);
    await noAxe(page, `speed test running at ${size}`);
    // It ends on that edge: the page shows it without a reload.
    await d.sqlite(['.timeout 10000', `UPDATE speedtests SET state = 'done', phase = '', finished_at = ${Date.now()}, download_kbps = 61000,
      upload_kbps = 22500, rtt_us = 37000, mtu = 1400, payload = 1372 WHERE machine_id = ${pi.id} AND state = 'running';`]);
    await card.locator('[data-speed="download"]').getByText('61.0 Mbit/s').waitFor();
    assert.equal(await card.getByRole('progressbar').isVisible(), false);
    assert.equal(await button.isDisabled(), false);
    await page.context().close();
  });
}

test('2. Test now for a machine not connected, then a whole test with phases and progress', { timeout: 90_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, SIZES[0][1], `machines/${m.cam.id}`);
  let card = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Speed test' }) });
  await card.getByText(/^No test yet\./).waitFor();
  await card.getByRole('button', { name: 'Test now' }).click();
  await card.getByRole('alert').filter({ hasText: 'machine "cam" is not connected (never connected): a speed test runs through its tunnel' }).waitFor();

  await page.goto(`${d.base}/#/machines/${m.nas.id}`);
  card = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Speed test' }) });
  const button = card.getByRole('button', { name: 'Test now' });
  await card.getByText(/^No test yet\./).waitFor();
  await button.click();
  const status = card.getByRole('status').filter({ hasText: /^Testing the / });
  await status.filter({ hasText: /^Testing the download \(server to machine\)… \d+ %$/ }).waitFor();
  assert.equal(await button.isDisabled(), true, 'one test at a time');
  await status.filter({ hasText: /^Testing the upload \(machine to server\)… \d+ %$/ }).waitFor();
  const progress = Number(await card.getByRole('progressbar', { name: 'Speed test progress' }).getAttribute('value'));
  assert.ok(progress >= 45 && progress < 90, `the upload's progress: ${progress}`);
  await card.locator('[data-speed="payload"]').getByText('1472 bytes (MTU 1500)').waitFor({ timeout: 30_000 });
  assert.equal(await card.locator('[data-speed="download"]').innerText(), '50.0 Mbit/s');
  assert.match(await card.locator('[data-speed="upload"]').innerText(), /^\d+\.\d Mbit\/s$/);
  assert.match(await card.locator('[data-speed="rtt"]').innerText(), /^\d+\.\d ms$/);
  assert.equal(await button.isDisabled(), false);
  const [t] = await d.call('GET', `/api/machines/${m.nas.id}/speedtests`);
  assert.equal(t.state, 'done');
  assert.ok(JSON.stringify(await d.call('GET', '/api/security/logs')).includes('MACHINE_SPEEDTEST_STARTED'));
  assert.deepEqual(page.problems.filter((p) => !p.includes('status of 409')), []);
  await page.context().close();
});
