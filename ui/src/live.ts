// Live state: one WebSocket (/api/local/logs/ws) for the whole session. It
// carries the log lines of background operations and the daemon's "this
// changed" pushes; views subscribe to topics and fetch again. When the daemon
// stops answering, a banner says so, /healthz is asked every few seconds, and
// once it answers every topic is refreshed and connection errors clear.
// /healthz also says when the data disk is full (topic 'disk'): it is asked
// every 30 s, every 3 s while full, and at once when a request met a full
// disk, so that banner comes and goes by itself too.
import { health } from './api';

export interface LogLine { time?: string; level?: string; line?: string; op?: string; done?: boolean; ok?: boolean }
export type Conn = 'connecting' | 'live' | 'offline';

type Fn = (detail?: unknown) => void;
const subs = new Map<string, Set<Fn>>();
const reconnectFns = new Set<() => void>();
const logFns = new Set<(l: LogLine) => void>();
export const logBuffer: LogLine[] = [];
export let conn: Conn = 'connecting';

/** Calls fn (debounced) whenever topic changes; returns the unsubscriber. */
export function on(topic: string, fn: Fn): () => void {
  let timer: number | undefined;
  const wrapped: Fn = (d) => {
    clearTimeout(timer);
    timer = window.setTimeout(() => fn(d), 120);
  };
  let set = subs.get(topic);
  if (!set) subs.set(topic, (set = new Set()));
  set.add(wrapped);
  return () => { clearTimeout(timer); set.delete(wrapped); };
}

/** Tells every subscriber of topic (also used after our own changes). */
export function emit(topic: string, detail?: unknown): void {
  for (const fn of subs.get(topic) ?? []) fn(detail);
  if (topic !== '*' && topic !== 'conn') for (const fn of subs.get('*') ?? []) fn(topic);
}

export function onLog(fn: (l: LogLine) => void): () => void {
  logFns.add(fn);
  return () => logFns.delete(fn);
}

export function onReconnect(fn: () => void): () => void {
  reconnectFns.add(fn);
  return () => reconnectFns.delete(fn);
}

// Topics the daemon pushes as {event: "<topic>"} (daemon/api/openapi.yaml,
// the log WebSocket); the others are only emitted by the page itself.
const TOPICS = ['machines', 'tunnels', 'probes', 'tokens', 'status', 'activity', 'audit', 'keys', 'banner', 'firewall', 'twofa', 'edges', 'host_parts'];

function pushed(m: Record<string, unknown>): boolean {
  if (typeof m.event !== 'string') return false;
  emit(m.event, m);
  return true;
}

let ws: WebSocket | undefined;
let wanted = false;
let timer: number | undefined;
let wasDown = false;
// A stream was open and then stopped or closed (a session that expired
// and was logged in again): what changed before the next one opened was
// not heard, so every topic is fetched again when it opens.
let gap = false;

function setConn(c: Conn): void {
  if (conn === c) return;
  conn = c;
  emit('conn', c);
}

/** The data directory while the daemon says its disk is full, else null. */
export let diskFull: string | null = null;

function setDisk(dir: string | null): void {
  if (diskFull === dir) return;
  diskFull = dir;
  emit('disk', dir);
}

/** Whether the daemon says its database cannot be reached. */
export let dbDown = false;

function setDb(down: boolean): void {
  if (dbDown === down) return;
  dbDown = down;
  emit('db', down);
  // Back: what failed meanwhile is fetched again.
  if (!down) for (const t of TOPICS) emit(t);
}

const healthy = async () => {
  const h = await health();
  if (h.up) {
    setDisk(h.diskFull);
    setDb(h.dbDown === true);
  }
  return h.up;
};

let diskTimer: number | undefined;
let asking = false;

/** Asks /healthz now (unless a question is under way), then every 30 s,
 * every 3 s while the disk is full or the database unavailable. */
export function watchDisk(): void {
  clearTimeout(diskTimer);
  if (asking) return;
  asking = true;
  void healthy().finally(() => {
    asking = false;
    clearTimeout(diskTimer);
    diskTimer = window.setTimeout(watchDisk, diskFull === null && !dbDown ? 30_000 : 3000);
  });
}

// After a lost connection: every topic is fetched again, and errors that
// said the daemon could not be reached clear themselves.
function cameBack(): void {
  if (!wasDown) return;
  wasDown = false;
  for (const fn of [...reconnectFns]) fn();
  for (const t of TOPICS) emit(t);
}

/** The daemon did not answer: say so and ask /healthz until it does. */
export function offline(): void {
  if (timer !== undefined && conn === 'offline') return;
  clearTimeout(timer);
  wasDown = true;
  setConn('offline');
  const ask = async () => {
    if (await healthy()) {
      timer = undefined;
      if (wanted) open(); else { setConn('live'); cameBack(); }
      return;
    }
    timer = window.setTimeout(ask, 3000);
  };
  timer = window.setTimeout(ask, 1000);
}

/** A request got no answer in time: the daemon is offline if /healthz
 * does not answer either (a slow route alone is not). */
export function slow(): void {
  if (conn === 'offline') return;
  void healthy().then((up) => { if (!up) offline(); });
}

function open(): void {
  clearTimeout(timer);
  timer = undefined;
  ws?.close();
  if (conn !== 'offline') setConn('connecting');
  const proto = location.protocol === 'https:' ? 'wss' : 'ws';
  const sock = new WebSocket(`${proto}://${location.host}/api/local/logs/ws?events=1`);
  ws = sock;
  sock.addEventListener('open', () => {
    setConn('live');
    if (gap && !wasDown) for (const t of TOPICS) emit(t);
    gap = false;
    cameBack();
  });
  sock.addEventListener('message', (ev) => {
    let m: Record<string, unknown>;
    try { m = JSON.parse(String(ev.data)); } catch { m = { line: String(ev.data) }; }
    if (pushed(m)) return;
    const l = m as LogLine;
    logBuffer.push(l);
    if (logBuffer.length > 500) logBuffer.shift();
    for (const fn of logFns) fn(l);
    if (l.done) emit('status', l);
  });
  sock.addEventListener('close', async () => {
    if (ws !== sock || !wanted) return;
    ws = undefined;
    gap = true;
    // A restart or a lost network shows as offline; a refused handshake
    // (the session ended) only waits and tries again.
    if (!(await healthy())) return offline();
    if (conn !== 'offline') setConn('connecting');
    timer = window.setTimeout(() => { if (wanted) open(); }, 4000);
  });
}

/** Opens the stream for a logged-in session (again after a re-login). */
export function start(): void {
  wanted = true;
  if (ws && ws.readyState <= WebSocket.OPEN) return;
  open();
}

export function stop(): void {
  if (ws) gap = true;
  wanted = false;
  clearTimeout(timer);
  timer = undefined;
  ws?.close();
  ws = undefined;
}
