// Fleet updates in the dashboard (issue 26), at 1280 and 390 px: a real
// daemon whose bundle is 1.5.0 (a --static-dir with only its VERSION),
// machines joined through the API (no agent answers them) and what their
// agents would have reported written into its database (seed): one up to
// date, three on 1.4.2, one whose last update rolled back, one whose agent
// predates updates. The Machines page shows who is outdated, Update and
// Update all ask first and fail in words because no agent answers, the
// last fleet update names the machine that failed; a machine's page shows
// its software, the rollback's reason and, for the old agent, the line to
// run with Copy; a downgrade is refused in words, then offered by name
// and sent as {"version"}. Nothing overflows; axe-core finds nothing
// serious.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { axe, launch, loggedIn, startDaemon } from './harness.mjs';

const PASSWORD = 'Update-Lantern-Cobalt-47';
const SERVER = '1.5.0';
const OLD = '1.4.2';
const ROLLBACK = 'the new agent did not check in within 60 s; the previous bundle was restored and restarted (tunnel-agent.service: exit status 3)';
let d;
let browser;
let statics;
const ms = {};

before(async () => {
  statics = mkdtempSync(join(tmpdir(), 'tunnelsvc-static-'));
  writeFileSync(join(statics, 'VERSION'), `${SERVER}\n`);
  d = await startDaemon('update', PASSWORD, ['--static-dir', statics]);
  await d.call('POST', '/api/local/skip', { domain: 'example.test' });
  for (const name of ['nas-current', 'pi-old-1', 'pi-old-2', 'pi-old-3 in the warehouse by the loading bay', 'cam-rolled', 'legacy-box']) {
    ms[name.split(' ')[0]] = await d.machine(name);
  }
  await seed();
  // Their tunnel clients are connected (an update needs that), but no
  // agent answers behind them.
  for (const n of ['pi-old-1', 'pi-old-2', 'pi-old-3', 'cam-rolled']) await d.frpLogin(ms[n]);
  const got = Object.fromEntries((await d.call('GET', '/api/machines')).map((m) => [m.name.split(' ')[0], m.update.state]));
  assert.deepEqual(got, { 'nas-current': 'current', 'pi-old-1': 'outdated', 'pi-old-2': 'outdated', 'pi-old-3': 'outdated',
    'cam-rolled': 'rolled_back', 'legacy-box': 'unsupported' });
  browser = await launch();
});

after(async () => {
  try { await browser?.close(); } catch { /* already gone */ }
  await d?.stop();
  if (statics) rmSync(statics, { recursive: true, force: true });
});

// What the agents would have reported, and the rollback, as the daemon
// stores them (daemon/store/migrations/0253_machine_versions.sql).
async function seed() {
  const now = Date.now();
  const q = (s) => `'${s.replaceAll("'", "''")}'`;
  const report = (m, bundle, caps) => `UPDATE machines SET agent_version = ${q(bundle)}, client_version = '0.61.1', bundle_version = ${q(bundle)},
    arch = 'amd64', agent_capabilities = ${q(caps)}, versions_at = ${now - 60_000} WHERE id = ${m.id};`;
  const sql = ['.timeout 10000', 'BEGIN;',
    report(ms['nas-current'], SERVER, 'update'),
    report(ms['pi-old-1'], OLD, 'update'), report(ms['pi-old-2'], OLD, 'update'), report(ms['pi-old-3'], OLD, 'update'),
    report(ms['cam-rolled'], OLD, 'update'),
    `UPDATE machines SET update_state = 'rolled_back', update_target = ${q(SERVER)}, update_error = ${q(ROLLBACK)}, update_at = ${now - 300_000}
      WHERE id = ${ms['cam-rolled'].id};`,
    report(ms['legacy-box'], '1.2.0', ''),
    'COMMIT;'];
  await d.sqlite(sql);
}

// What overflows: a card wider than itself, a button out of its card, the
// page scrolling sideways.
function overflow() {
  const out = [];
  const name = (el) => el.closest('section.card')?.querySelector('h2')?.textContent ?? el.className;
  for (const el of document.querySelectorAll('main .card, main .table-wrap')) {
    if (el.scrollWidth > el.clientWidth + 1) out.push(`${el.className} in "${name(el)}": ${el.scrollWidth} > ${el.clientWidth}`);
  }
  for (const b of document.querySelectorAll('main button, main a, main pre')) {
    const card = b.closest('.card');
    if (!card || b.closest('[hidden]') || b.getClientRects().length === 0) continue;
    if (b.getBoundingClientRect().right > card.getBoundingClientRect().right + 1) out.push(`"${b.textContent}" sticks out of "${name(card)}"`);
  }
  if (document.documentElement.scrollWidth > innerWidth) out.push(`the page scrolls sideways by ${document.documentElement.scrollWidth - innerWidth} px`);
  return out;
}

async function check(page, what, problems) {
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    problems.push(...(await page.evaluate(overflow)).map((p) => `${what} ${scheme}: ${p}`));
    problems.push(...await axe(page, what));
    if (process.env.UI_SHOTS) await page.screenshot({ path: `${process.env.UI_SHOTS}/update-${what.replace(/\W+/g, '-')}-${scheme}.png`, fullPage: true });
  }
  await page.emulateMedia({ colorScheme: 'light' });
}

// A machine's row, by the start of its name.
const row = (page, name) => page.getByRole('table', { name: 'Machines' }).getByRole('row')
  .filter({ has: page.getByRole('link', { name: new RegExp(`^${name}\\b`) }) });

test('outdated machines, a rollback and an old agent on the Machines page (1280 and 390 px)', { timeout: 120_000 }, async () => {
  for (const width of [1280, 390]) {
    const page = await loggedIn(browser, d, PASSWORD, { width, height: width > 500 ? 800 : 844 }, 'machines');
    const problems = [];
    const table = page.getByRole('table', { name: 'Machines' });
    await table.waitFor();
    // Versions and state in words, as badges.
    await row(page, 'pi-old-2').getByText(`outdated: ${SERVER} is available`).waitFor();
    await row(page, 'pi-old-2').getByText(`bundle ${OLD} · agent ${OLD} · tunnel client 0.61.1`).waitFor();
    await row(page, 'nas-current').getByText('up to date').waitFor();
    await row(page, 'legacy-box').getByText('agent too old to update itself').waitFor();
    // The rollback: a short reason, the whole text on demand.
    // The update's reason (after the machine's own status reason).
    const why = row(page, 'cam-rolled').locator('details.why').last();
    await row(page, 'cam-rolled').getByText('update rolled back').waitFor();
    assert.ok((await why.locator('summary').textContent()).length < 60, 'the rollback reason is short in the table');
    await why.locator('summary').click();
    await why.getByText(ROLLBACK).waitFor();
    // Update where it helps, not elsewhere.
    for (const n of ['pi-old-1', 'pi-old-2', 'cam-rolled']) await row(page, n).getByRole('button', { name: `Update ${n}` }).waitFor();
    for (const n of ['nas-current', 'legacy-box']) assert.equal(await row(page, n).getByRole('button', { name: /^Update / }).count(), 0, n);
    await page.getByRole('button', { name: `Update all (4 machines to ${SERVER})` }).waitFor();
    // The state filter shows the outdated ones.
    await page.getByLabel('State').selectOption('outdated');
    await page.getByText('Showing 5 of 6 machines.').waitFor();
    assert.equal(await row(page, 'nas-current').count(), 0);
    await check(page, `#/machines at ${width}`, problems);
    await page.getByLabel('State').selectOption('');
    assert.deepEqual(problems, []);
    assert.deepEqual(page.problems.filter((p) => !/status of (401|502)/.test(p)), []);
    await page.context().close();
  }
});

test('an update whose agent does not answer fails in words; Update all stops at the first failure and says who', { timeout: 180_000 }, async () => {
  const page = await loggedIn(browser, d, PASSWORD, { width: 1280, height: 800 }, 'machines');
  // One machine, asked first by name and versions.
  await row(page, 'pi-old-1').getByRole('button', { name: 'Update pi-old-1' }).click();
  const dlg = page.getByRole('dialog', { name: 'Update pi-old-1?' });
  await dlg.getByText(`pi-old-1 goes from bundle ${OLD} to ${SERVER}`).waitFor();
  await dlg.getByRole('button', { name: 'Update pi-old-1' }).click();
  await dlg.waitFor({ state: 'detached' });
  // The notice follows it: started, then how it ended.
  await page.getByText(`Update of pi-old-1 to ${SERVER} started: its state shows how it goes.`)
    .or(page.getByText(/^The update of pi-old-1 failed: /)).first().waitFor();
  // No agent answers: failed, with the reason in words.
  await row(page, 'pi-old-1').getByText('update failed').waitFor({ timeout: 60_000 });
  await page.getByText(/^The update of pi-old-1 failed: the machine's agent does not answer/).waitFor();
  const why = row(page, 'pi-old-1').locator('details.why').last();
  assert.equal(await why.locator('summary').textContent(), 'agent not answering');
  assert.match(await why.locator('summary').getAttribute('title'), /^the machine's agent does not answer/);

  // The fleet: asked first, with what will happen.
  await page.getByRole('button', { name: `Update all (4 machines to ${SERVER})` }).click();
  const all = page.getByRole('dialog', { name: `Update 4 machines to ${SERVER}?` });
  await all.getByText('One goes first; the rest follow in groups of 5; it stops at the first failure.').waitFor();
  await all.getByRole('button', { name: 'Update 4 machines' }).click();
  await all.waitFor({ state: 'detached' });
  // The canary fails: the summary names it and why, the rest untouched.
  const summary = page.getByRole('status', { name: 'Last fleet update' });
  await summary.getByText(/Finished on edge \S+: 4 machines\./).waitFor({ timeout: 60_000 });
  await summary.getByText('Failed: pi-old-1').waitFor();
  await summary.getByText('agent not answering').waitFor();
  await summary.getByText(/Untouched: 3 \(/).waitFor();
  const last = await d.call('GET', '/api/machines/update');
  assert.equal(last.failed.name, 'pi-old-1');
  assert.equal(last.untouched.length, 3);
  for (const n of ['pi-old-2', 'pi-old-3']) await row(page, n).getByText(`outdated: ${SERVER} is available`).waitFor();
  const problems = [];
  await check(page, '#/machines after the fleet update at 1280', problems);
  await page.setViewportSize({ width: 390, height: 844 });
  await check(page, '#/machines after the fleet update at 390', problems);
  assert.deepEqual(problems, []);
  assert.deepEqual(page.problems.filter((p) => !/status of (401|409|502)/.test(p)), []);
  await page.context().close();
});

test("a machine's Software card: the rollback's reason, and the line an old agent needs (1280 and 390 px)", { timeout: 120_000 }, async () => {
  for (const width of [1280, 390]) {
    const page = await loggedIn(browser, d, PASSWORD, { width, height: width > 500 ? 800 : 844 }, 'machines');
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: d.base });
    const problems = [];
    const software = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Software', exact: true }) });

    await page.goto(`${d.base}/#/machines/${ms['cam-rolled'].id}`);
    await software.getByText('update rolled back').waitFor();
    await software.getByText(`Rolled back: ${ROLLBACK}`).waitFor();
    await software.getByText(OLD).first().waitFor();
    await software.getByText('0.61.1').waitFor();
    await software.getByRole('button', { name: 'Update cam-rolled' }).waitFor();
    await check(page, `#/machines/cam-rolled at ${width}`, problems);

    // The daemon gives the line that rejoins it (through the address this
    // page was opened at, as the join command would): shown with Copy.
    await page.goto(`${d.base}/#/machines/${ms['legacy-box'].id}`);
    await software.getByText('agent too old to update itself').waitFor();
    await software.getByText(`curl -fsSL ${d.base}/static/bootstrap.sh | sudo bash -s -- --rejoin`).waitFor();
    await software.getByText("keeps its id, name, ports and tunnels", { exact: false }).waitFor();
    assert.equal(await software.getByRole('button', { name: /^Update/ }).count(), 0);
    await software.getByRole('button', { name: 'Copy the line to run on legacy-box' }).click();
    await software.getByText(/^(Copied\.|Selected; press Ctrl\+C to copy\.)$/).waitFor();
    await check(page, `#/machines/legacy-box at ${width}`, problems);
    assert.deepEqual(problems, []);
    assert.deepEqual(page.problems.filter((p) => !/status of (401|502)/.test(p)), []);
    await page.context().close();
  }
});

test('a downgrade is refused in words, then offered by name and sent as {"version"}', { timeout: 90_000 }, async () => {
  const m = await d.machine('nas-newer');
  await d.frpLogin(m);
  await d.sqlite(['.timeout 10000', `UPDATE machines SET agent_version = '1.6.0', client_version = '0.61.1', bundle_version = '1.6.0',
    arch = 'amd64', agent_capabilities = 'update', versions_at = ${Date.now()} WHERE id = ${m.id};`]);
  const page = await loggedIn(browser, d, PASSWORD, { width: 390, height: 844 }, `machines/${m.id}`);
  const software = page.locator('section.card').filter({ has: page.getByRole('heading', { name: 'Software', exact: true }) });
  await software.getByRole('button', { name: 'Update nas-newer' }).click();
  const dlg = page.getByRole('dialog', { name: 'Update nas-newer?' });
  await dlg.getByText(`nas-newer goes from bundle 1.6.0 to ${SERVER}`).waitFor();
  await dlg.getByRole('button', { name: 'Update nas-newer' }).click();
  await dlg.waitFor({ state: 'detached' });
  await software.getByText(`Not updated: machine "nas-newer" runs bundle 1.6.0, newer than this server's ${SERVER}.`).waitFor();
  await software.getByRole('button', { name: `Go back to ${SERVER}` }).click();
  const back = page.getByRole('alertdialog', { name: `Downgrade nas-newer to ${SERVER}?` });
  await back.getByText(`nas-newer runs bundle 1.6.0, newer than this server's ${SERVER}.`, { exact: false }).waitFor();
  const sent = page.waitForRequest((r) => r.url().endsWith(`/api/machines/${m.id}/update`) && r.method() === 'POST' && r.postData()?.includes('"version"'));
  await back.getByRole('button', { name: `Downgrade nas-newer from 1.6.0 to ${SERVER}` }).click();
  assert.deepEqual(JSON.parse((await sent).postData()), { version: SERVER });
  await software.getByText(`Update of nas-newer to ${SERVER} started: its state shows how it goes.`)
    .or(software.getByText(/^The update of nas-newer failed: /)).first().waitFor();
  // No agent answers it either.
  await software.getByText("Failed: the machine's agent does not answer", { exact: false }).waitFor({ timeout: 60_000 });
  // Said once, in the card: the notice that it started is gone.
  assert.equal(await software.getByText(/Update of nas-newer to .* started/).count(), 0);
  const problems = [];
  await check(page, '#/machines/nas-newer at 390', problems);
  assert.deepEqual(problems, []);
  assert.deepEqual(page.problems.filter((p) => !/status of (401|409|502)/.test(p)), []);
  await page.context().close();
});
