// The set-up shared by the trial-*.test.mjs files: one real daemon per
// file with the same data, made through its API, and Debian's chromium.
// node --test runs each file in its own process, side by side. Not a test
// file itself.
import { after, before } from 'node:test';
import { launch, startDaemon } from './harness.mjs';

export { noAxe, rowsOf } from './harness.mjs';

export const PASSWORD = 'Trial-Lantern-Orchid-83';
export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };
/** The daemon and the browser, set in before() (live bindings). */
export let d;
export let browser;
export const m = {};

before(async () => {
  d = await startDaemon('trial', PASSWORD);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  m.nas = await d.machine('nas');
  m.cam = await d.machine('camera-hub');
  const tunnel = (machine, name, kind, extra = {}) => d.call('POST', '/api/tunnels', {
    machine_id: machine.id, name, kind, local_port: 8000 + Object.keys(m).length, ...(kind === 'http' ? { subdomain: name } : {}), ...extra,
  });
  m.wiki = await tunnel(m.nas, 'wiki', 'http', { allow_ips: ['203.0.113.0/24'] });
  m.grafana = await tunnel(m.nas, 'grafana', 'http');
  m.db = await tunnel(m.nas, 'db', 'tcp');
  m.rtsp = await tunnel(m.cam, 'rtsp', 'tcp');
  m.photos = await tunnel(m.cam, 'photos', 'http', { access: 'operator' });
  await d.call('POST', `/api/tunnels/${m.wiki.id}/probe`);
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
});

// The text that describes an input (its hint and its error).
export const describedBy = (input) => input.evaluate((el) => (el.getAttribute('aria-describedby') ?? '').split(' ')
  .map((id) => document.getElementById(id)?.textContent ?? '').join(' '));
