// Browser test of an HTTP tunnel's operator gate: the real daemon, real frps
// and frpc carrying a tunnel to a machine's app, and a real Caddy running
// the Caddyfile the daemon renders, all on 127.0.0.1; Chromium resolves
// *.example.test to 127.0.0.1. The tunnel is created in the dashboard's
// form with Access = Operator; then the browser is sent from the tunnel's
// host through router.<domain> and back with a one-time code, and the app
// sees X-Forwarded-User: operator and none of the gate's or the dashboard's
// cookies. A second tunnel in sso mode signs its visitors in through a
// real OpenID provider (the npm oidc-provider) by way of router.<domain>:
// alice, on its list, reaches the app, which sees her name and email (not
// what the browser sent); mallory is refused in words. Every process is
// killed at the end.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:net';
import { createServer as createHTTPServer } from 'node:http';
import { chromium } from 'playwright-core';
import Provider from 'oidc-provider';
import { once } from 'node:events';
import { CHROMIUM, CHROMIUM_ARGS, daemonBinary } from './harness.mjs';

const ui = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const repo = resolve(ui, '..');
const PASSWORD = 'Gate-Keeper-Willow-Copper-58';
const tmp = mkdtempSync(join(tmpdir(), 'tunnelsvc-gate-'));
const procs = [];
const logs = {};
let context;
let app;
let base;
let caddyPort;

function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once('error', rej);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => res(port)); });
  });
}

function start(name, bin, args, env = {}) {
  const p = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  logs[name] = '';
  const keep = (b) => { logs[name] = (logs[name] + b).slice(-20_000); };
  p.stdout.on('data', keep);
  p.stderr.on('data', keep);
  procs.push(p);
  return p;
}

async function until(what, ms, fn) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try { if (await fn()) return; } catch (e) { last = e; }
    await new Promise((r) => setTimeout(r, 150));
  }
  throw new Error(`${what} not within ${ms} ms (${last}):\n${Object.entries(logs).map(([k, v]) => `--- ${k}\n${v}`).join('\n')}`);
}

const listening = (port) => new Promise((res) => {
  const s = createServer();
  s.once('error', () => res(true));
  s.listen(port, '127.0.0.1', () => s.close(() => res(false)));
});

// call: the daemon's API with the operator's session (node's side).
let cookie = '';
async function call(method, path, body) {
  const res = await fetch(base + path, {
    method, headers: { 'Content-Type': 'application/json', Cookie: cookie },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const set = res.headers.get('set-cookie');
  if (set) cookie = set.split(';')[0];
  const text = await res.text();
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${text}`);
  return res.headers.get('content-type')?.startsWith('application/json') ? JSON.parse(text).data : text;
}

before(async () => {
  assert.ok(existsSync(join(ui, 'dist', 'index.html')), 'ui/dist is not built; run npm run build first');
  for (const bin of ['frps', 'frpc']) assert.ok(existsSync(join(repo, 'bin', bin)), `bin/${bin} is missing; run make build`);
  const bin = await daemonBinary();
  const [port, pluginPort, frpsPort, dashPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const lo = 21000 + Math.floor(Math.random() * 100) * 100;
  base = `http://127.0.0.1:${port}`;
  const daemon = start('tunnelsvc', bin, ['serve', '--listen', `127.0.0.1:${port}`, '--data-dir', join(tmp, 'data'),
    '--system-root', join(tmp, 'root'), '--bin-dir', join(repo, 'bin'), '--server-host', '127.0.0.1',
    '--frps-plugin-listen', `127.0.0.1:${pluginPort}`, '--frps-port', String(frpsPort), '--gate-listen', '127.0.0.1:0',
    '--frps-dashboard-listen', `127.0.0.1:${dashPort}`,
    '--tunnel-ports', `${lo}-${lo + 99}`, '--ip-echo-urls', `${base}/nothing`]);
  await until('the daemon', 20_000, async () => {
    if (daemon.exitCode !== null) throw new Error('daemon exited');
    return (await fetch(base + '/healthz')).ok;
  });
  await call('POST', '/api/auth/setup', { password: PASSWORD });
  await call('POST', '/api/local/skip', { domain: 'example.test' });
  await call('POST', '/api/local/reconcile');
  // server.toml names the certificate where revtunnel-server.service copies
  // it (its runtime directory); here it is read where the daemon wrote it.
  const etc = join(tmp, 'root', 'etc', 'revtunnel');
  writeFileSync(join(tmp, 'frps.toml'), readFileSync(join(etc, 'server.toml'), 'utf8').replaceAll('/run/revtunnel-server/', etc + '/'));
  start('frps', join(repo, 'bin', 'frps'), ['-c', join(tmp, 'frps.toml')]);
  await until('frps', 10_000, () => listening(frpsPort));
  const tok = await call('POST', '/api/bootstrap/tokens', {});
  await call('POST', '/api/bootstrap', { token: tok.token, name: 'nas', username: 'pi' });

  // The machine's app: it shows what it received.
  app = createHTTPServer((req, res) => {
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ path: req.url, cookie: req.headers.cookie ?? null, user: req.headers['x-forwarded-user'] ?? null,
      ...(req.headers['x-forwarded-email'] !== undefined ? { email: req.headers['x-forwarded-email'] } : {}) }));
  });
  await new Promise((r) => app.listen(0, '127.0.0.1', r));

  context = await chromium.launchPersistentContext(join(tmp, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    timeout: 30_000,
    args: [...CHROMIUM_ARGS, '--host-resolver-rules=MAP *.example.test 127.0.0.1'],
  });
  context.setDefaultTimeout(15_000);
});

let idp;
after(async () => {
  idp?.close();
  try { await context?.close(); } catch { /* already gone */ }
  app?.close();
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  if (!process.env.UI_KEEP) rmSync(tmp, { recursive: true, force: true });
});

test('operator gate: dashboard form, redirect through router.<domain>, what the app sees', { timeout: 180_000 }, async () => {
  const page = context.pages()[0] ?? await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));

  // The tunnel, created in the dashboard with the Access control.
  await page.goto(base + '/');
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByRole('link', { name: 'Tunnels', exact: true }).click();
  await page.getByLabel(/^Name \*$/).fill('app');
  await page.getByLabel('Local port').fill(String(app.address().port));
  await page.getByLabel('Subdomain').fill('app');
  await page.getByLabel('Access').selectOption('operator');
  assert.equal(await page.getByLabel('Shared password').isVisible(), false);
  await page.getByRole('button', { name: 'Create tunnel' }).click();
  await page.getByText(/^Tunnel app created/).waitFor();
  await page.getByRole('cell', { name: /app.*Access: operator only/ }).waitFor();

  const [tunnel] = await call('GET', '/api/tunnels');
  assert.equal(tunnel.access, 'operator');
  // The config carries the tunnel CA and names its own path as the CA file,
  // and an admin port: point them at this copy and a free port.
  const clientPath = join(tmp, 'client.toml');
  const adminPort = await freePort();
  writeFileSync(clientPath, (await call('GET', `/api/machines/${tunnel.machine_id}/revtunnel-client`))
    .replace(/trustedCaFile = '[^']*'/, `trustedCaFile = '${clientPath}'`)
    .replace(/^port = \d+$/gm, `port = ${adminPort}`));
  start('frpc', join(repo, 'bin', 'frpc'), ['-c', join(tmp, 'client.toml')]);
  await until('the tunnel port', 15_000, () => listening(tunnel.remote_port));

  // Caddy on the daemon's own Caddyfile, its sites served over plain HTTP
  // on a free port.
  caddyPort = await freePort();
  let file = await call('GET', '/api/debug/webproxyfile');
  assert.match(file, /forward_auth 127\.0\.0\.1:\d+ \{/);
  file = file.replace(/^(router|app)\.example\.test \{$/gm, `http://$1.example.test:${caddyPort} {`);
  const global = `\tauto_https off\n\thttp_port ${caddyPort}\n\tadmin off\n`;
  file = /^\{$/m.test(file) ? file.replace(/^\{$/m, `{\n${global}`) : `{\n${global}}\n` + file;
  writeFileSync(join(tmp, 'Caddyfile'), file);
  start('caddy', 'caddy', ['run', '--config', join(tmp, 'Caddyfile'), '--adapter', 'caddyfile'],
    { XDG_DATA_HOME: tmp, XDG_CONFIG_HOME: tmp });
  await until('caddy', 15_000, () => listening(caddyPort));

  const site = `http://app.example.test:${caddyPort}`;
  const router = `http://router.example.test:${caddyPort}`;
  // Not signed in to the dashboard under router.<domain>: told to sign in.
  await page.goto(`${site}/reports/?month=11`);
  await page.getByRole('heading', { name: 'Sign in first' }).waitFor();
  assert.ok(page.url().startsWith(`${router}/api/gate/authorize?`), page.url());
  const continueURL = await page.locator('#continue').getAttribute('href');

  await page.goto(router + '/');
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();

  // Continue: the dashboard hands a one-time code to the tunnel's host.
  await page.goto(router + continueURL);
  await page.waitForURL(`${site}/reports/?month=11`);
  const seen = JSON.parse(await page.locator('body').textContent());
  assert.deepEqual(seen, { path: '/reports/?month=11', cookie: null, user: 'operator' });

  const cookies = await context.cookies();
  const gateCookie = cookies.find((c) => c.name === 'tunnelsvc_gate');
  assert.equal(gateCookie?.domain, 'app.example.test', 'the gate cookie is host-only on the tunnel host');
  assert.equal(gateCookie.httpOnly, true);
  assert.deepEqual(cookies.filter((c) => c.name === 'tunnel_session').map((c) => c.domain).sort(),
    ['127.0.0.1', 'router.example.test'], 'the dashboard cookie stays on the dashboard hosts');

  // A direct visit now goes straight to the app.
  await page.goto(`${site}/again`);
  assert.equal(JSON.parse(await page.locator('body').textContent()).user, 'operator');

  // The gate's logout ends the gate session; after the dashboard's logout
  // the site asks to sign in again.
  await page.goto(`${site}/.tunnelsvc/logout`);
  await page.getByRole('heading', { name: 'Signed out' }).waitFor();
  assert.equal((await context.cookies()).some((c) => c.name === 'tunnelsvc_gate'), false);
  await page.goto(router + '/');
  await page.getByRole('button', { name: 'Log out' }).click();
  await page.getByRole('heading', { name: 'Log in to tunnelsvc' }).waitFor();
  await page.goto(`${site}/again`);
  await page.getByRole('heading', { name: 'Sign in first' }).waitFor();
  assert.deepEqual(problems, []);
});

test('sso gate: visitors on the tunnel\'s list sign in through the OpenID provider; the app sees who', { timeout: 180_000 }, async () => {
  const page = context.pages()[0] ?? await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  const router = `http://router.example.test:${caddyPort}`;

  // The provider, with a client whose redirect URI is the dashboard's.
  const port = await freePort();
  const issuer = `http://127.0.0.1:${port}`;
  const accounts = {
    alice: { sub: 'alice', email: 'alice@example.test', email_verified: true, groups: ['staff'] },
    mallory: { sub: 'mallory', email: 'mallory@other.test', email_verified: true, groups: [] },
  };
  const provider = new Provider(issuer, {
    clients: [{ client_id: 'tunnelsvc', client_secret: 'a-test-client-secret', redirect_uris: [`${router}/api/auth/sso/callback`],
      grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic' }],
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: [], groups: ['groups'] },
    findAccount: (ctx, id) => ({ accountId: id, claims: () => accounts[id] ?? { sub: id } }),
    cookies: { keys: ['a-test-cookie-key'] },
  });
  idp = provider.listen(port, '127.0.0.1');
  await once(idp, 'listening');
  await call('POST', '/api/auth/login', { password: PASSWORD });
  await call('PUT', '/api/auth/sso', { enabled: true, name: 'Test IdP', issuer, client_id: 'tunnelsvc',
    client_secret: 'a-test-client-secret', emails: ['nobody@example.test'] });

  // A tunnel in sso mode for alice (her group, in fact), to the same app.
  const [first] = await call('GET', '/api/tunnels');
  const team = await call('POST', '/api/tunnels', { machine_id: first.machine_id, name: 'team', kind: 'http',
    local_port: app.address().port, subdomain: 'team', access: 'sso', sso_allow: ['group:staff'] });
  assert.equal(team.access, 'sso');
  assert.deepEqual(team.sso_allow, ['group:staff']);
  // The machine takes the new proxy (frpc with the new config), and Caddy
  // the new site (the daemon's Caddyfile again).
  for (const p of procs.filter((p) => p.spawnargs.some((a) => /frpc$|^caddy$/.test(a)))) p.kill('SIGKILL');
  const clientPath = join(tmp, 'client.toml');
  const adminPort = await freePort();
  writeFileSync(clientPath, (await call('GET', `/api/machines/${first.machine_id}/revtunnel-client`))
    .replace(/trustedCaFile = '[^']*'/, `trustedCaFile = '${clientPath}'`)
    .replace(/^port = \d+$/gm, `port = ${adminPort}`));
  start('frpc-2', join(repo, 'bin', 'frpc'), ['-c', clientPath]);
  await until('the sso tunnel port', 15_000, () => listening(team.remote_port));
  let file = await call('GET', '/api/debug/webproxyfile');
  assert.match(file, /copy_headers Cookie X-Forwarded-User X-Forwarded-Email/);
  file = file.replace(/^(router|app|team)\.example\.test \{$/gm, `http://$1.example.test:${caddyPort} {`);
  const global = `\tauto_https off\n\thttp_port ${caddyPort}\n\tadmin off\n`;
  file = /^\{$/m.test(file) ? file.replace(/^\{$/m, `{\n${global}`) : `{\n${global}}\n` + file;
  writeFileSync(join(tmp, 'Caddyfile'), file);
  await until('the old caddy gone', 10_000, async () => !(await listening(caddyPort)));
  start('caddy-2', 'caddy', ['run', '--config', join(tmp, 'Caddyfile'), '--adapter', 'caddyfile'], { XDG_DATA_HOME: tmp, XDG_CONFIG_HOME: tmp });
  await until('caddy again', 15_000, () => listening(caddyPort));

  const site = `http://team.example.test:${caddyPort}`;
  const visit = async (who) => {
    await page.goto(`${site}/board?x=1`);
    await page.locator('input[name="login"]').fill(who);
    await page.locator('input[name="password"]').fill('anything');
    await page.locator('button[type="submit"]').click();
    await page.getByRole('button', { name: 'Continue' }).click();
  };
  // Whatever the browser claims to be is dropped before the app.
  await page.setExtraHTTPHeaders({ 'X-Forwarded-Email': 'forged@evil.test', 'X-Forwarded-User': 'forged' });
  await visit('alice');
  await page.waitForURL(`${site}/board?x=1`);
  const seen = JSON.parse(await page.locator('body').textContent());
  assert.deepEqual(seen, { path: '/board?x=1', cookie: null, user: 'alice', email: 'alice@example.test' });
  const logs = await call('GET', '/api/security/logs');
  assert.ok(logs.some((e) => e.kind === 'LOGIN_SSO_SUCCESS' && e.detail === 'signed in to team.example.test as alice@example.test'));

  // mallory is not on the list: the site's page says so in its fixed
  // sentence, no session; the audit log names her and the site.
  await context.clearCookies();
  await visit('mallory');
  await page.getByText('This account may not enter: it is not among the allowed emails, domains or groups.').waitFor();
  assert.equal((await context.cookies()).some((c) => c.name === 'tunnelsvc_gate'), false);
  const refused = await call('GET', '/api/security/logs');
  assert.ok(refused.some((e) => e.kind === 'LOGIN_SSO_REFUSED' && e.detail === 'mallory@other.test may not enter team.example.test: it is not on the site\'s list'));
  // A crafted link cannot put its words on the site's page.
  await page.goto(`${site}/.tunnelsvc/login?sso_error=${encodeURIComponent('Your account is locked: call 555-0100')}&next=/`);
  await page.getByText('The sign-in did not happen. Start it again.').waitFor();
  assert.equal(await page.getByText(/555-0100/).count(), 0);
  await page.setExtraHTTPHeaders({});
  assert.deepEqual(problems, []);

  // The dashboard's audit log names who may enter, before and after, at
  // both widths.
  await call('PATCH', `/api/tunnels/${team.id}`, { sso_allow: ['group:staff', 'bob@example.test'] });
  const audit = await context.newPage();
  await audit.goto(`${base}/#/overview`);
  await audit.getByLabel(/^Password \*$/).fill(PASSWORD);
  await audit.getByRole('button', { name: 'Log in' }).click();
  await audit.getByRole('navigation', { name: 'Main' }).waitFor();
  await audit.goto(`${base}/#/security/audit`);
  for (const width of [1280, 390]) {
    await audit.setViewportSize({ width, height: width > 500 ? 800 : 844 });
    await audit.getByRole('table', { name: 'Audit log' })
      .getByText(/^tunnel "team" of machine "[^"]+" changed: access single sign-on \(group:staff\) → single sign-on \(group:staff, bob@example\.test\)$/).waitFor();
  }
  await audit.close();
});
