// Browser test of passkeys against the real daemon on 127.0.0.1, in
// Chromium with its virtual authenticator (CDP WebAuthn): the dashboard
// at router.test.localhost (the relying party; Chromium sends *.localhost
// to 127.0.0.1 and takes it as a secure origin) registers a passkey as the
// first 2FA device (backup codes shown), logs in with the password and
// the passkey, passes the step-up of an SSH key download with it, and
// signs in with the passkey alone once passwordless sign-in is on,
// removes it with a backup code. Opened as 127.0.0.1, the dashboard says
// passkeys work only at router.test.localhost.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { CHROMIUM, CHROMIUM_ARGS, startDaemon } from './harness.mjs';

const PASSWORD = 'Passkey-Harbor-Lantern-42';
// *.localhost is loopback and a secure context for Chromium (no TLS
// needed), and router.test.localhost is a name the RP ID may be.
const DOMAIN = 'test.localhost';
let d;
let browser;
let origin;

before(async () => {
  d = await startDaemon('passkeys', PASSWORD);
  await d.call('POST', '/api/local/skip', { domain: DOMAIN });
  await d.call('POST', '/api/local/ssh-keys/generate', { name: 'ops', set_default: true });
  const port = new URL(d.base).port;
  origin = `http://router.${DOMAIN}:${port}`;
  browser = await chromium.launch({
    executablePath: CHROMIUM, headless: true, timeout: 30_000,
    args: CHROMIUM_ARGS,
  });
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
});

/** A page with a virtual platform authenticator (user verification on,
 * presence answered by itself), as a laptop's fingerprint reader. */
async function withAuthenticator(context) {
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  const cdp = await context.newCDPSession(page);
  await cdp.send('WebAuthn.enable');
  const { authenticatorId } = await cdp.send('WebAuthn.addVirtualAuthenticator', {
    options: { protocol: 'ctap2', transport: 'internal', hasResidentKey: true, hasUserVerification: true, isUserVerified: true, automaticPresenceSimulation: true },
  });
  page.credentials = async () => (await cdp.send('WebAuthn.getCredentials', { authenticatorId })).credentials;
  return page;
}

async function logIn(page, url) {
  await page.goto(url);
  await page.getByLabel(/^Password \*$/).fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
}

test('passkeys: register, log in, step-up, remove; refused at another name', { timeout: 180_000 }, async () => {
  const context = await browser.newContext({ acceptDownloads: true });
  const page = await withAuthenticator(context);
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));

  // At 127.0.0.1 the relying party is not the page's name: refused, in words.
  await logIn(page, `${d.base}/#/security/2fa`);
  await page.getByRole('heading', { name: 'Two-factor authentication', level: 1 }).waitFor();
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.getByText(`passkeys work only at https://router.${DOMAIN}, the dashboard's own name: this page was opened as 127.0.0.1:`).waitFor();
  assert.equal((await page.credentials()).length, 0);

  // At router.example.test: the first device, with backup codes.
  await logIn(page, `${origin}/#/security/2fa`);
  await page.getByRole('heading', { name: 'Two-factor authentication', level: 1 }).waitFor();
  await page.getByLabel('Passkey name').fill('laptop');
  await page.getByRole('button', { name: 'Add a passkey' }).click();
  await page.getByText('Backup codes — shown only now.').waitFor();
  const codes = await page.locator('ul.codes li').allTextContents();
  assert.equal(codes.length, 10);
  const row = page.getByRole('row').filter({ hasText: 'laptop' });
  await row.getByText('Passkey', { exact: true }).waitFor();
  assert.equal((await page.credentials()).length, 1);
  await page.getByRole('button', { name: 'I have saved them' }).click();

  // Passwordless sign-in, off by default: turned on, a passkey alone opens
  // the dashboard.
  assert.equal((await d.raw('GET', '/api/auth/status')).data.passkey_login, false);
  await page.getByLabel(/^Sign in with a passkey alone/).check();
  await page.getByText('a passkey alone now signs in').waitFor();
  await context.clearCookies();
  await page.goto('about:blank');
  await page.goto(`${origin}/#/overview`);
  await page.getByRole('button', { name: 'Sign in with a passkey' }).click();
  await page.getByRole('navigation', { name: 'Main' }).waitFor();

  // Log in again: the password, then the passkey instead of a code.
  await context.clearCookies();
  await page.goto('about:blank');
  await logIn(page, `${origin}/#/overview`);
  await page.getByRole('heading', { name: 'Two-factor authentication' }).waitFor();
  await page.getByRole('button', { name: 'Use a passkey' }).click();
  await page.getByRole('navigation', { name: 'Main' }).waitFor();

  // The step-up of a private-key download, answered by the passkey.
  await page.goto(`${origin}/#/security/keys`);
  await page.getByRole('button', { name: 'Download ops' }).click();
  const dlg = page.getByRole('dialog', { name: 'Download the private key of ops' });
  const download = page.waitForEvent('download');
  await dlg.getByRole('button', { name: 'Use a passkey' }).click();
  assert.equal((await download).suggestedFilename(), 'tunnel_id_rsa');
  await page.getByText('Downloaded the private key of ops as tunnel_id_rsa.').waitFor();

  // Removed like any device: the only one, so with a backup code.
  await page.goto(`${origin}/#/security/2fa`);
  await page.getByRole('row').filter({ hasText: 'laptop' }).getByRole('button', { name: 'Remove laptop' }).click();
  const rm = page.getByRole('alertdialog', { name: 'Remove laptop?' });
  await rm.getByLabel('A backup code').fill(codes[0]);
  await rm.getByRole('button', { name: 'Remove laptop' }).click();
  await page.getByText('No devices.').waitFor();
  const st = await d.call('GET', '/api/auth/2fa/status');
  assert.equal(st.enabled, false);
  const kinds = (await d.call('GET', '/api/security/logs')).map((e) => e.kind);
  for (const k of ['TOTP_PASSKEY_ADDED', 'LOGIN_2FA_SUCCESS', 'TOTP_DEVICE_REMOVED']) assert.ok(kinds.includes(k), `${k} in ${kinds}`);
  assert.deepEqual(problems, []);
});
