// Unit tests of the fleet-update words (src/fleet.ts, compiled by
// `tsc -p tsconfig.test.json` into .test-build/).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { downgradeTo, fleetSummary, updateBadge, updateOffer, versionsLine } from '../.test-build/fleet.js';

// Whether Update is offered and works on machine x.
const canUpdate = (x) => { const o = updateOffer(x); return o.show && !o.blocked; };

const m = (id, state, extra = {}) => ({ id, name: `m${id}`, bundle_version: 'A', ...extra, update: { state, target_version: 'B', ...(extra.update ?? {}) } });

test('each update state has its badge, and failures their reason', () => {
  assert.deepEqual(updateBadge(m(1, 'current')), { text: 'up to date', tone: 'good', why: '' });
  assert.equal(updateBadge(m(1, 'outdated')).tone, 'warn');
  assert.match(updateBadge(m(1, 'outdated')).text, /B/);
  assert.deepEqual(updateBadge(m(1, 'updating')), { text: 'updating to B', tone: '', why: '' });
  assert.deepEqual(updateBadge(m(1, 'failed', { update: { error: 'the agent does not answer' } })),
    { text: 'update failed', tone: 'bad', why: 'the agent does not answer' });
  assert.equal(updateBadge(m(1, 'rolled_back', { update: { error: 'x' } })).tone, 'bad');
  assert.deepEqual(updateBadge(m(1, 'unsupported')), { text: 'agent too old to update itself', tone: 'warn', why: '' });
  // An older daemon says nothing about updates; one without a bundle
  // calls every machine outdated, to no version: nothing is said either.
  assert.equal(updateBadge({ id: 1, name: 'old' }), null);
  const none = { id: 1, name: 'x', update: { state: 'outdated', target_version: '' } };
  assert.equal(updateBadge(none), null);
  assert.equal(canUpdate(none), false);
});

test('Update is offered to outdated and failed machines', () => {
  assert.deepEqual(['current', 'outdated', 'updating', 'failed', 'rolled_back', 'unsupported'].map((s) => canUpdate(m(1, s))),
    [false, true, false, true, true, false]);
});

test('versions line leaves out what was never reported', () => {
  assert.equal(versionsLine({ bundle_version: '1.4.0', agent_version: '1.4.0', client_version: '0.61.1' }), 'bundle 1.4.0 · agent 1.4.0 · tunnel client 0.61.1');
  assert.equal(versionsLine({ agent_version: '', client_version: '0.61.1' }), 'tunnel client 0.61.1');
  assert.equal(versionsLine({}), '');
});

test('the downgrade answer names the version to send', () => {
  assert.equal(downgradeTo('machine "nas" runs bundle 1.5.0, newer than this server\'s 1.4.0; to go back to 1.4.0, send {"version": "1.4.0"}'), '1.4.0');
  assert.equal(downgradeTo('another operation is running; follow it on the log WebSocket'), null);
});

test('the fleet summary names the failed machine and counts the rest', () => {
  const names = new Map([[1, 'nas'], [2, 'pi'], [3, 'cam']]);
  assert.equal(fleetSummary({ running: false, machine_ids: [], updated: [], failed: null, untouched: [], started_at: null, finished_at: null }, names), null);
  assert.equal(fleetSummary(null, names), null);
  const s = fleetSummary({ running: false, machine_ids: [1, 2, 3], updated: [1], failed: { machine_id: 2, name: 'pi', error: 'the agent does not answer' },
    untouched: [3], started_at: '2026-11-26T12:00:00Z', finished_at: '2026-11-26T12:01:00Z' }, names);
  assert.equal(s.running, false);
  assert.deepEqual(s.failed, { name: 'pi', why: 'the agent does not answer' });
  assert.deepEqual(s.lines, ['Finished: 3 machines.', 'Updated: 1.', 'Untouched: 1 (cam).']);
  const r = fleetSummary({ running: true, machine_ids: [1], updated: [], failed: null, untouched: [], started_at: '2026-11-26T12:00:00Z', finished_at: null }, names);
  assert.match(r.lines[0], /^Running: 1 machine,/);
  // The edge that runs it, when one took it up (any edge shows the same).
  const e = fleetSummary({ running: true, machine_ids: [1], updated: [], failed: null, untouched: [], started_at: '2026-11-26T12:00:00Z', finished_at: null, edge: 'vps-b' }, names);
  assert.match(e.lines[0], /^Running on edge vps-b: 1 machine,/);
});
