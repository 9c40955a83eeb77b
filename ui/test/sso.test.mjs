// Browser test of single sign-on against a real OpenID provider on
// 127.0.0.1: the npm package oidc-provider (a certified implementation)
// with a fixed client and two users, its own login and consent pages. The
// dashboard lets alice (her email is allowed) in with the operator's
// session, and the audit log names her; mallory (another domain) is sent
// back to the login page with the reason in words, without a session; the
// provider's own refusal (the user cancels at consent) is said in words
// too.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import Provider from 'oidc-provider';
import { freePort, launch, loggedIn, startDaemon } from './harness.mjs';

const PASSWORD = 'Single-Sign-On-Lantern-42';
let d;
let browser;
let idp;
let issuer;

const accounts = {
  alice: { sub: 'alice', email: 'alice@example.test', email_verified: true, groups: ['ops'] },
  mallory: { sub: 'mallory', email: 'mallory@other.test', email_verified: true, groups: ['guests'] },
};

before(async () => {
  d = await startDaemon('sso', PASSWORD);
  const port = await freePort();
  issuer = `http://127.0.0.1:${port}`;
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
  await op.getByLabel(/^Allowed emails/).fill('alice@example.test');
  await op.getByRole('button', { name: 'Save single sign-on' }).click();
  await op.getByText('Saved.').waitFor();
  const set = await d.call('GET', '/api/auth/sso');
  assert.deepEqual([set.settings.enabled, set.settings.has_secret, set.settings.emails], [true, true, ['alice@example.test']]);
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
  await mp.getByRole('alert').getByText('mallory@other.test may not enter this dashboard: it is not among the allowed emails, domains or groups').waitFor();
  assert.ok(!(await mallory.cookies(d.base)).some((c) => c.name === 'tunnel_session'));
  const after = await d.call('GET', '/api/security/logs');
  assert.ok(after.some((e) => e.kind === 'LOGIN_SSO_REFUSED' && /mallory@other\.test may not enter/.test(e.detail)));

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
  await qp.getByRole('alert').getByText(/^the identity provider refused the sign-in: /).waitFor();
});
