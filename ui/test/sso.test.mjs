// Browser test of single sign-on against a real OpenID provider on
// 127.0.0.1: the npm package oidc-provider (a certified implementation)
// with a fixed client and its users, its own login and consent pages, and
// an issuer that ends in "/" as it publishes it. The dashboard lets alice
// (her email is allowed) in with the operator's session, and the audit log
// names her; mallory (another domain), carol and dave (allowed, but the
// provider has not verified their emails: false, and left out) are sent
// back to the login page with the reason's fixed sentence, without a
// session; a callback captured and redeemed in another browser is no
// session; the provider's own refusal is said in words too; with 2FA on,
// the second-factor step follows the provider. (A provider that is down:
// daemon/api's TestSSOZitadel.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import Provider from 'oidc-provider';
import { freePort, launch, loggedIn, startDaemon, totp } from './harness.mjs';

const PASSWORD = 'Single-Sign-On-Lantern-42';
let d;
let browser;
let idp;
let issuer;

const accounts = {
  alice: { sub: 'alice', email: 'alice@example.test', email_verified: true, groups: ['ops'] },
  mallory: { sub: 'mallory', email: 'mallory@other.test', email_verified: true, groups: ['guests'] },
  carol: { sub: 'carol', email: 'carol@example.test', email_verified: false, groups: ['ops'] },
  dave: { sub: 'dave', email: 'dave@example.test', groups: ['ops'] },
};

// The fixed sentences the login page shows (daemon/sso's Reasons).
const NOT_ALLOWED = 'This account may not enter: it is not among the allowed emails, domains or groups.';
const UNVERIFIED = 'The identity provider has not verified this account\'s email address, so it cannot sign in here. Verify it at the provider, or use another account.';
const UNKNOWN = 'This sign-in is not known here: it expired, was already used, or was started in another browser. Start it again from this browser.';
const PROVIDER_SAID = 'The identity provider refused the sign-in; the audit log has its words.';

before(async () => {
  d = await startDaemon('sso', PASSWORD);
  const port = await freePort();
  // As many providers publish it: with a trailing slash, kept exactly.
  issuer = `http://127.0.0.1:${port}/`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: 'tunnelsvc', client_secret: 'a-test-client-secret', redirect_uris: [`${d.base}/api/auth/sso/callback`],
      grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic',
    }],
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: [], groups: ['groups'] },
    findAccount: (ctx, id) => ({ accountId: id, claims: () => accounts[id] ?? { sub: id } }),
    features: { devInteractions: { enabled: true } },
    cookies: { keys: ['a-test-cookie-key'] },
  });
  provider.proxy = false;
  idp = provider.listen(port, '127.0.0.1');
  await once(idp, 'listening');
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  idp?.close();
  await d?.stop();
});

async function signIn(page, who, consent = true) {
  await page.goto(`${d.base}/#/login`);
  await page.getByRole('link', { name: 'Sign in with Test IdP' }).click();
  await page.locator('input[name="login"]').fill(who);
  await page.locator('input[name="password"]').fill('anything');
  await page.locator('button[type="submit"]').click();
  if (consent) await page.getByRole('button', { name: 'Continue' }).click();
}

test('single sign-on: an allowed identity gets the session, another is refused in words', { timeout: 120_000 }, async () => {
  // Set up through the API, as the settings page does; a wrong issuer is
  // refused in words and changes nothing.
  const bad = await d.raw('PUT', '/api/auth/sso', { enabled: true, name: 'Test IdP', issuer: `http://127.0.0.1:${await freePort()}`,
    client_id: 'tunnelsvc', client_secret: 'a-test-client-secret', emails: ['alice@example.test'] });
  assert.equal(bad.status, 400);
  assert.match(bad.error, /^the issuer does not answer as an OpenID provider: /);
  // The operator sets it up in Security → Single sign-on.
  const op = await loggedIn(browser, d, PASSWORD, { width: 1280, height: 900 }, 'security/sso');
  await op.getByRole('heading', { name: 'Single sign-on', level: 1 }).waitFor();
  assert.equal((await op.locator('code.cmd').first().textContent()).trim(), `${d.base}/api/auth/sso/callback`);
  await op.getByLabel(/^Offer “Sign in with …”/).check();
  await op.getByLabel(/^Name/).fill('Test IdP');
  await op.getByLabel(/^Issuer URL/).fill(issuer);
  await op.getByLabel(/^Client ID/).fill('tunnelsvc');
  await op.getByLabel(/^Client secret/).fill('a-test-client-secret');
  await op.getByLabel(/^Allowed emails/).fill('alice@example.test, carol@example.test, dave@example.test');
  await op.getByRole('button', { name: 'Save single sign-on' }).click();
  await op.getByText('Saved.').waitFor();
  const set = await d.call('GET', '/api/auth/sso');
  assert.deepEqual([set.settings.enabled, set.settings.has_secret, set.settings.emails, set.settings.issuer],
    [true, true, ['alice@example.test', 'carol@example.test', 'dave@example.test'], issuer]);
  assert.equal((await d.raw('GET', '/api/auth/status')).data.sso, 'Test IdP');
  assert.deepEqual(op.problems, []);

  const alice = await browser.newContext();
  const page = await alice.newPage();
  page.setDefaultTimeout(15_000);
  await signIn(page, 'alice');
  await page.getByRole('navigation', { name: 'Main' }).waitFor();
  const cookies = await alice.cookies(d.base);
  assert.ok(cookies.some((c) => c.name === 'tunnel_session' && c.httpOnly));
  const logs = await d.call('GET', '/api/security/logs');
  assert.ok(logs.some((e) => e.kind === 'LOGIN_SSO_SUCCESS' && e.detail === 'signed in as alice@example.test'), JSON.stringify(logs.slice(0, 5)));

  const mallory = await browser.newContext();
  const mp = await mallory.newPage();
  mp.setDefaultTimeout(15_000);
  await signIn(mp, 'mallory');
  await mp.getByRole('alert').getByText(NOT_ALLOWED).waitFor();
  assert.ok(!(await mallory.cookies(d.base)).some((c) => c.name === 'tunnel_session'));
  const after = await d.call('GET', '/api/security/logs');
  assert.ok(after.some((e) => e.kind === 'LOGIN_SSO_REFUSED' && /mallory@other\.test may not enter/.test(e.detail)));

  // Emails the provider has not verified: false, and left out.
  for (const who of ['carol', 'dave']) {
    const ctx = await browser.newContext();
    const p = await ctx.newPage();
    p.setDefaultTimeout(15_000);
    await signIn(p, who);
    await p.getByRole('alert').getByText(UNVERIFIED).waitFor();
    assert.ok(!(await ctx.cookies(d.base)).some((c) => c.name === 'tunnel_session'));
    const logs = await d.call('GET', '/api/security/logs');
    assert.ok(logs.some((e) => e.kind === 'LOGIN_SSO_REFUSED' && e.detail === `${who}@example.test is not verified by Test IdP (${issuer})`), JSON.stringify(logs.slice(0, 3)));
    await ctx.close();
  }

  // A crafted link cannot put its own words on the login page.
  const crafted = await browser.newContext();
  const cp = await crafted.newPage();
  await cp.goto(`${d.base}/#/login?sso_error=${encodeURIComponent('Your account is locked: call 555-0100')}`);
  await cp.getByRole('alert').getByText('The sign-in did not happen. Start it again.').waitFor();
  assert.equal(await cp.getByText(/555-0100/).count(), 0);
  await crafted.close();

  // A callback captured on its way (a proxy log, history) and redeemed in
  // another browser is no session; the browser that started it still
  // signs in with it.
  const victim = await browser.newContext();
  const vp = await victim.newPage();
  vp.setDefaultTimeout(15_000);
  // The browser follows the provider's redirects without letting a
  // route see them: the consent's submit is sent from here instead, and
  // its redirects followed by hand (with the browser's cookies) up to the
  // dashboard's callback, which is kept and not visited.
  let captured = '';
  await victim.route(`${issuer}interaction/**`, async (route) => {
    if (route.request().method() !== 'POST') return route.continue();
    let res = await route.fetch({ maxRedirects: 0 });
    for (let hop = 0; hop < 5 && res.status() >= 300 && res.status() < 400; hop++) {
      const next = new URL(res.headers().location, res.url()).toString();
      if (next.startsWith(`${d.base}/api/auth/sso/callback?`)) {
        captured = next;
        return route.fulfill({ status: 200, contentType: 'text/plain', body: 'captured' });
      }
      res = await victim.request.get(next, { maxRedirects: 0 });
    }
    return route.fulfill({ response: res });
  });
  await signIn(vp, 'alice');
  await vp.getByText('captured').waitFor();
  assert.ok(captured.startsWith(`${d.base}/api/auth/sso/callback?`), captured);
  const thief = await browser.newContext();
  const tp = await thief.newPage();
  tp.setDefaultTimeout(15_000);
  await tp.goto(captured);
  await tp.getByRole('alert').getByText(UNKNOWN).waitFor();
  assert.ok(!(await thief.cookies(d.base)).some((c) => c.name === 'tunnel_session'));
  await vp.goto(captured);
  await vp.getByRole('navigation', { name: 'Main' }).waitFor();
  await thief.close();
  await victim.close();

  // Password sign-in off (single sign-on remains): the login page offers
  // only the provider, which still lets alice in.
  await op.getByLabel('Allow password sign-in').uncheck();
  await op.getByText(/^password sign-in is off; ways in: sign in with Test IdP; and root on the VPS/).waitFor();
  const later = await browser.newContext();
  const lp = await later.newPage();
  lp.setDefaultTimeout(15_000);
  await lp.goto(`${d.base}/#/login`);
  await lp.getByText('Password sign-in is off here.').waitFor();
  assert.equal(await lp.getByLabel(/^Password/).isVisible(), false);
  await signIn(lp, 'alice');
  await lp.getByRole('navigation', { name: 'Main' }).waitFor();
  const refusedPw = await fetch(`${d.base}/api/auth/login`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ password: PASSWORD }) });
  assert.equal(refusedPw.status, 403);
  await op.getByLabel('Allow password sign-in').check();
  await op.getByText('password sign-in is on').waitFor();

  // The provider's own refusal: the user aborts at the consent page.
  const quitter = await browser.newContext();
  const qp = await quitter.newPage();
  qp.setDefaultTimeout(15_000);
  await signIn(qp, 'alice', false);
  await qp.getByRole('link', { name: /Cancel|abort/i }).click().catch(async () => {
    await qp.getByRole('button', { name: /Cancel|abort/i }).click();
  });
  await qp.getByRole('alert').getByText(PROVIDER_SAID).waitFor();
  const refusals = await d.call('GET', '/api/security/logs');
  assert.ok(refusals.some((e) => e.kind === 'LOGIN_SSO_REFUSED' && /^the identity provider refused the sign-in: /.test(e.detail)));

  // With 2FA on, the provider is the first factor: the code step follows,
  // and only then is there a session.
  const en = await d.call('POST', '/api/auth/2fa/enroll', {});
  await d.call('POST', '/api/auth/2fa/confirm', { code: totp(en.secret), name: 'phone' });
  const second = await browser.newContext();
  const sp = await second.newPage();
  sp.setDefaultTimeout(15_000);
  await signIn(sp, 'alice');
  await sp.getByRole('heading', { name: 'Two-factor authentication' }).waitFor();
  assert.ok(!sp.url().includes('pending='), `the pending login stays in the address bar: ${sp.url()}`);
  assert.ok(!(await second.cookies(d.base)).some((c) => c.name === 'tunnel_session'));
  await sp.getByLabel(/^Authentication code/).fill(totp(en.secret, Date.now() + 30_000));
  await sp.getByRole('button', { name: 'Verify' }).click();
  await sp.getByRole('navigation', { name: 'Main' }).waitFor();
  await second.close();
});
