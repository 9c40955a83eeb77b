// Unit tests of the API client's envelope and error handling (src/api.ts,
// compiled by `tsc -p tsconfig.test.json` into .test-build/).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Api, ApiError, DISK_FULL, TIMEOUT_MS, describeError, diskFullDir, health, isDiskFull, unwrap } from '../.test-build/api.js';

const json = (status, body, headers = {}) =>
  new Response(typeof body === 'string' ? body : JSON.stringify(body), {
    status, headers: { 'Content-Type': 'application/json', ...headers },
  });

test('unwrap returns the data of a success envelope', async () => {
  assert.deepEqual(await unwrap(json(200, { data: { setup: true } })), { setup: true });
  assert.deepEqual(await unwrap(json(201, { data: [] })), []);
  assert.equal(await unwrap(json(200, { data: null })), null);
});

test('unwrap throws ApiError with the server message', async () => {
  await assert.rejects(unwrap(json(401, { error: 'invalid password' })), (e) =>
    e instanceof ApiError && e.status === 401 && e.message === 'invalid password');
});

test('unwrap keeps Retry-After of a 429 and describeError shows it', async () => {
  const err = await unwrap(json(429, { error: 'too many attempts; try again later' }, { 'Retry-After': '42' }))
    .catch((e) => e);
  assert.equal(err.status, 429);
  assert.equal(err.retryAfter, 42);
  assert.equal(describeError(err), 'too many attempts; try again later (try again in 42 s)');
});

test('unwrap copes with bodies that are not the envelope', async () => {
  await assert.rejects(unwrap(new Response('<html>bad gateway</html>', { status: 502, statusText: 'Bad Gateway' })),
    { message: 'request failed: HTTP 502 Bad Gateway' });
  await assert.rejects(unwrap(json(200, { message: 'no envelope' })), { message: 'unexpected response from the server' });
  await assert.rejects(unwrap(new Response('', { status: 200 })), { message: 'unexpected response from the server' });
});

test('Api sends JSON with headers and reports 401 outside /api/auth', async () => {
  const calls = [];
  let unauthorized = 0;
  const api = new Api({
    fetch: async (url, init) => {
      calls.push({ url, init });
      return url === '/api/machines' ? json(401, { error: 'authentication required' }) : json(200, { data: { message: 'ok' } });
    },
    onUnauthorized: () => unauthorized++,
  });
  assert.deepEqual(await api.post('/api/auth/setup', { password: 'x' }, { headers: { 'X-Setup-Code': 'abc' } }), { message: 'ok' });
  assert.equal(calls[0].init.method, 'POST');
  assert.equal(calls[0].init.body, '{"password":"x"}');
  assert.equal(calls[0].init.headers['Content-Type'], 'application/json');
  assert.equal(calls[0].init.headers['X-Setup-Code'], 'abc');
  await assert.rejects(api.get('/api/machines'), { status: 401, message: 'authentication required' });
  assert.equal(unauthorized, 1);
  assert.equal(calls[1].init.body, undefined);
});

test('Api turns a network failure into a readable ApiError', async () => {
  const api = new Api({ fetch: async () => { throw new TypeError('Failed to fetch'); } });
  await assert.rejects(api.get('/api/auth/status'), (e) => e instanceof ApiError && e.status === 0 && /could not reach the server/.test(e.message));
});

test('Api sends a request again once the operator has logged in again', async () => {
  let session = false;
  let asked = 0;
  const bodies = [];
  const api = new Api({
    fetch: async (url, init) => {
      bodies.push(init.body);
      return session ? json(201, { data: { id: 7 } }) : json(401, { error: 'authentication required' });
    },
    onUnauthorized: async () => { asked++; session = true; return true; },
  });
  assert.deepEqual(await api.post('/api/tunnels', { name: 'wiki' }), { id: 7 });
  assert.equal(asked, 1);
  assert.deepEqual(bodies, ['{"name":"wiki"}', '{"name":"wiki"}']);
});

test('Api does not treat a wrong password or step-up code as a lost session', async () => {
  let asked = 0;
  const api = new Api({
    fetch: async () => json(401, { error: 'invalid password' }),
    onUnauthorized: () => { asked++; return true; },
  });
  await assert.rejects(api.post('/api/auth/login', { password: 'x' }), { status: 401, message: 'invalid password' });
  await assert.rejects(api.post('/api/local/ssh-keys/k1/download', { code: '1' }), { status: 401 });
  assert.equal(asked, 0);
});

test('Api asks for a step-up on 403 recent authentication required, then sends the change again', async () => {
  let recent = false;
  let asked = 0;
  const sent = [];
  const api = new Api({
    fetch: async (url, init) => {
      sent.push(`${init.method} ${url} ${init.body ?? ''}`);
      if (url === '/api/local/firewall/configure') {
        return recent ? json(202, { data: { message: 'applying' } }) : json(403, { error: 'recent authentication required' });
      }
      return json(403, { error: 'forbidden' });
    },
    onRecentAuth: async () => { asked++; recent = true; return true; },
  });
  assert.deepEqual(await api.post('/api/local/firewall/configure', { mode: 'manual' }), { message: 'applying' });
  assert.equal(asked, 1);
  assert.deepEqual(sent, ['POST /api/local/firewall/configure {"mode":"manual"}', 'POST /api/local/firewall/configure {"mode":"manual"}']);
  // Another 403 is an answer, not a question; a cancelled step-up leaves the refusal.
  await assert.rejects(api.get('/api/other'), { status: 403, message: 'forbidden' });
  assert.equal(asked, 1);
  const cancelled = new Api({ fetch: async () => json(403, { error: 'recent authentication required' }), onRecentAuth: async () => false });
  await assert.rejects(cancelled.post('/api/monitoring/metrics-token'), { status: 403, message: 'recent authentication required' });
  // A wrong step-up password is the step-up's own answer, not a lost session.
  let lost = 0;
  const wrong = new Api({ fetch: async () => json(401, { error: 'invalid password' }), onUnauthorized: () => { lost++; return true; } });
  await assert.rejects(wrong.post('/api/auth/step-up', { password: 'x' }), { status: 401 });
  assert.equal(lost, 0);
});

test('a database that cannot be reached: /healthz is degraded but up, and a 503 says so', async () => {
  const h = await health(async () => json(503, { error: 'degraded: database unavailable' }));
  assert.deepEqual(h, { up: true, diskFull: null, dbDown: true });
  assert.deepEqual(await health(async () => json(503, { error: 'store unavailable' })), { up: false, diskFull: null });
  let told = 0;
  const api = new Api({ fetch: async () => json(503, { error: 'database unavailable' }), onDbDown: () => told++ });
  await assert.rejects(api.post('/api/tunnels', { name: 'x' }), { status: 503, message: 'database unavailable' });
  assert.equal(told, 1);
  const other = new Api({ fetch: async () => json(503, { error: 'fail2ban is not installed' }), onDbDown: () => told++ });
  await assert.rejects(other.post('/api/local/setup-banner'), { status: 503 });
  assert.equal(told, 1);
});

test('Api reports an unreachable daemon', async () => {
  let offline = 0;
  const api = new Api({ fetch: async () => { throw new TypeError('Failed to fetch'); }, onOffline: () => offline++ });
  await assert.rejects(api.get('/api/machines'), { status: 0 });
  assert.equal(offline, 1);
});

const FULL = 'the data disk is full (/var/lib/tunnelsvc): free space on it, then try again';

test('a full data disk is a 507 with the server\'s words, and Api says so', async () => {
  let told = 0;
  const api = new Api({ fetch: async () => json(DISK_FULL, { error: FULL }), onDiskFull: () => told++ });
  const err = await api.post('/api/auth/login', { password: 'x' }).catch((e) => e);
  assert.equal(err.status, 507);
  assert.ok(isDiskFull(err));
  assert.equal(describeError(err), FULL);
  assert.equal(told, 1);
  assert.ok(!isDiskFull(new ApiError(503, 'no free port')));
  assert.ok(!isDiskFull(new Error(FULL)));
});

test('diskFullDir reads the data directory from /healthz\'s 503', () => {
  assert.equal(diskFullDir(503, { error: 'data disk full: /var/lib/tunnelsvc' }), '/var/lib/tunnelsvc');
  assert.equal(diskFullDir(503, { error: 'store unavailable' }), null);
  assert.equal(diskFullDir(500, { error: 'data disk full: /x' }), null);
  assert.equal(diskFullDir(503, undefined), null);
});

test('health tells a full disk (the daemon answers) from a daemon that does not', async () => {
  const answer = (res) => async (url, init) => {
    assert.equal(url, '/healthz');
    assert.equal(init.cache, 'no-store');
    if (res instanceof Error) throw res;
    return res;
  };
  assert.deepEqual(await health(answer(json(200, { data: { status: 'ok' } }))), { up: true, diskFull: null });
  assert.deepEqual(await health(answer(json(503, { error: 'data disk full: /srv/tunnelsvc data' }))), { up: true, diskFull: '/srv/tunnelsvc data' });
  assert.deepEqual(await health(answer(json(503, { error: 'store unavailable' }))), { up: false, diskFull: null });
  assert.deepEqual(await health(answer(new Response('<html>bad gateway</html>', { status: 502 }))), { up: false, diskFull: null });
  assert.deepEqual(await health(answer(new TypeError('Failed to fetch'))), { up: false, diskFull: null });
});

test('Api gives up on a request that gets no answer in time and says so', async () => {
  let slow = 0;
  let offline = 0;
  const api = new Api({
    // A frozen daemon: nothing comes back until the request is aborted.
    fetch: (url, init) => new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')))),
    onSlow: () => slow++, onOffline: () => offline++, timeoutMs: 50,
  });
  const t0 = Date.now();
  const err = await api.get('/api/machines').catch((e) => e);
  assert.ok(err instanceof ApiError && err.status === 0 && err.timedOut, String(err));
  assert.match(describeError(err), /^the server is not answering \(no answer in 0 s\)$/);
  assert.ok(Date.now() - t0 < 1000);
  assert.equal(slow, 1);
  assert.equal(offline, 0);
  assert.equal(TIMEOUT_MS, 10_000);
  // A request may ask for longer (a probe, a machine's agent).
  let signal;
  const slowApi = new Api({ fetch: async (url, init) => { signal = init.signal; return json(200, { data: 1 }); }, timeoutMs: 50 });
  assert.equal(await slowApi.get('/api/x', { timeout: 5000 }), 1);
  assert.equal(signal.aborted, false);
});
