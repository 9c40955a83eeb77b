// API client: every success is {"data": ...}, every failure {"error": "..."}.
// Failures become ApiError with the server's own words, the HTTP status and,
// for 429, the Retry-After seconds.

export class ApiError extends Error {
  readonly status: number;
  readonly retryAfter?: number;
  /** No answer came within the request's time limit (status 0). */
  readonly timedOut: boolean;
  constructor(status: number, message: string, retryAfter?: number, timedOut = false) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.retryAfter = retryAfter;
    this.timedOut = timedOut;
  }
}

/** How long a request may go unanswered (a frozen daemon must not leave a
 * page loading for ever); a request that waits on something slower
 * (a probe, a DNS lookup, a machine's agent) says so in its options. */
export const TIMEOUT_MS = 10_000;
export const NOT_ANSWERING = 'the server is not answering';

export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Unwraps the envelope of a response or throws ApiError. */
export async function unwrap<T>(res: Response): Promise<T> {
  return (await envelope<T, unknown>(res)).data;
}

/** A paged list's answer: its rows (data) and what the server says of
 * them beside (page). */
export interface Paged<T, P> { data: T; page: P }

/** The whole success envelope: data, and page when the list is paged. */
export async function envelope<T, P>(res: Response): Promise<Paged<T, P>> {
  const text = await res.text();
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (!res.ok) {
    let retry: number | undefined;
    const ra = res.headers.get('Retry-After');
    if (ra && /^\d+$/.test(ra.trim())) retry = Number(ra.trim());
    let msg: string;
    if (isRecord(body) && typeof body.error === 'string' && body.error) msg = body.error;
    else msg = `request failed: HTTP ${res.status}${res.statusText ? ' ' + res.statusText : ''}`;
    throw new ApiError(res.status, msg, retry);
  }
  if (isRecord(body) && 'data' in body) return { data: body.data as T, page: body.page as P };
  throw new ApiError(res.status, 'unexpected response from the server');
}

/** A message for people: the server's words, plus the wait after a 429. */
export function describeError(e: unknown): string {
  if (e instanceof ApiError) {
    if (e.status === 429 && e.retryAfter !== undefined) {
      return `${e.message} (try again in ${e.retryAfter} s)`;
    }
    return e.message;
  }
  if (e instanceof Error) return e.message;
  return String(e);
}

/** What the daemon answers a request that needed a write the disk had no
 * room for: 507 `the data disk is full (<dir>): free space on it, then try
 * again`. */
export const DISK_FULL = 507;

export function isDiskFull(e: unknown): e is ApiError {
  return e instanceof ApiError && e.status === DISK_FULL;
}

/** The data directory a /healthz answer says is full (503 `data disk full:
 * <dir>`), or null. */
export function diskFullDir(status: number, body: unknown): string | null {
  if (status !== 503 || !isRecord(body) || typeof body.error !== 'string') return null;
  const m = /^data disk full: (.+)$/.exec(body.error);
  return m ? m[1] : null;
}

/** What /healthz answers while the database cannot be reached: the daemon
 * serves (machines, tunnels and gates work from memory), changes wait. */
export const DEGRADED_DB = 'degraded: database unavailable';
/** What a request that needed the database answers meanwhile (503). */
export const DB_UNAVAILABLE = 'database unavailable';

/** /healthz, read: up when the daemon answers it (a full data disk or a
 * lost database is an answer: the daemon serves, but cannot write). */
export interface Health { up: boolean; diskFull: string | null; dbDown?: boolean }

export async function health(fetchFn: FetchLike = (i, init) => fetch(i, init)): Promise<Health> {
  let res: Response;
  try {
    res = await fetchFn('/healthz', { signal: AbortSignal.timeout(2500), cache: 'no-store' });
  } catch {
    return { up: false, diskFull: null };
  }
  if (res.ok) return { up: true, diskFull: null };
  let body: unknown;
  try {
    body = JSON.parse(await res.text());
  } catch {
    body = undefined;
  }
  if (res.status === 503 && isRecord(body) && body.error === DEGRADED_DB) return { up: true, diskFull: null, dbDown: true };
  const dir = diskFullDir(res.status, body);
  return { up: dir !== null, diskFull: dir };
}

export interface ApiOptions {
  fetch?: FetchLike;
  /**
   * Called when a request that needs a session answers 401. When it
   * resolves true (the operator logged in again) the request is sent once
   * more, so nothing the operator typed or asked for is lost.
   */
  onUnauthorized?: () => Promise<boolean> | boolean | void;
  /**
   * Called when a sensitive change answers 403 `recent authentication
   * required` (sudo mode). When it resolves true (the operator passed a
   * step-up) the request is sent once more, so the change carries on.
   */
  onRecentAuth?: () => Promise<boolean>;
  /** Called when the daemon could not be reached at all. */
  onOffline?: () => void;
  /** Called when a request got no answer in time (the daemon may be frozen). */
  onSlow?: () => void;
  /** The default time limit of a request, in ms (TIMEOUT_MS). */
  timeoutMs?: number;
  /** Called when a request failed because the data disk is full. */
  onDiskFull?: () => void;
  /** Called when a request failed because the database is unavailable. */
  onDbDown?: () => void;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  /** This request's time limit in ms, when it may take longer than usual. */
  timeout?: number;
}

// 401s that are answers about a password or code, not a lost session.
const ownAnswer = (path: string) => /^\/api\/auth\/(login|setup|status|step-up)\b/.test(path) || path.endsWith('/download');

/** The daemon's answer to a sensitive change from a session that has not
 * logged in or passed a step-up recently. */
export const RECENT_AUTH_REQUIRED = 'recent authentication required';

async function saysDbDown(res: Response): Promise<boolean> {
  try {
    const body: unknown = JSON.parse(await res.clone().text());
    return isRecord(body) && body.error === DB_UNAVAILABLE;
  } catch {
    return false;
  }
}

async function needsStepUp(res: Response): Promise<boolean> {
  if (res.status !== 403) return false;
  try {
    const body: unknown = JSON.parse(await res.clone().text());
    return isRecord(body) && body.error === RECENT_AUTH_REQUIRED;
  } catch {
    return false;
  }
}

export class Api {
  private readonly fetchFn: FetchLike;
  onUnauthorized?: ApiOptions['onUnauthorized'];
  onRecentAuth?: ApiOptions['onRecentAuth'];
  onOffline?: () => void;
  onSlow?: () => void;
  onDiskFull?: () => void;
  onDbDown?: () => void;
  private readonly timeoutMs: number;

  constructor(opts: ApiOptions = {}) {
    this.fetchFn = opts.fetch ?? ((i, init) => fetch(i, init));
    this.onUnauthorized = opts.onUnauthorized;
    this.onRecentAuth = opts.onRecentAuth;
    this.onOffline = opts.onOffline;
    this.onSlow = opts.onSlow;
    this.onDiskFull = opts.onDiskFull;
    this.onDbDown = opts.onDbDown;
    this.timeoutMs = opts.timeoutMs ?? TIMEOUT_MS;
  }

  /** Sends a request and returns the raw Response (for non-JSON bodies). */
  async send(method: string, path: string, body?: unknown, opts: RequestOptions = {}, again = false): Promise<Response> {
    const headers: Record<string, string> = { Accept: 'application/json', ...opts.headers };
    const init: RequestInit = { method, headers, credentials: 'same-origin' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const ms = opts.timeout ?? this.timeoutMs;
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), ms);
    init.signal = stop.signal;
    let res: Response;
    try {
      res = await this.fetchFn(path, init);
    } catch {
      if (stop.signal.aborted) {
        this.onSlow?.();
        throw new ApiError(0, `${NOT_ANSWERING} (no answer in ${Math.round(ms / 1000)} s)`, undefined, true);
      }
      this.onOffline?.();
      throw new ApiError(0, 'could not reach the server; check the connection and try again');
    } finally {
      clearTimeout(timer);
    }
    if (res.status === 401 && !ownAnswer(path) && this.onUnauthorized) {
      if ((await this.onUnauthorized()) === true && !again) return this.send(method, path, body, opts, true);
    }
    if (!again && this.onRecentAuth && await needsStepUp(res)) {
      if (await this.onRecentAuth()) return this.send(method, path, body, opts, true);
    }
    if (res.status === DISK_FULL) this.onDiskFull?.();
    if (res.status === 503 && this.onDbDown && await saysDbDown(res)) this.onDbDown();
    return res;
  }

  async call<T>(method: string, path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return unwrap<T>(await this.send(method, path, body, opts));
  }

  /** GET of a paged list: the rows and the page beside them. */
  async page<T, P>(path: string, opts?: RequestOptions): Promise<Paged<T, P>> {
    return envelope<T, P>(await this.send('GET', path, undefined, opts));
  }

  get<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.call<T>('GET', path, undefined, opts);
  }
  post<T>(path: string, body?: unknown, opts?: RequestOptions): Promise<T> {
    return this.call<T>('POST', path, body, opts);
  }
  put<T>(path: string, body?: unknown): Promise<T> {
    return this.call<T>('PUT', path, body);
  }
  patch<T>(path: string, body?: unknown): Promise<T> {
    return this.call<T>('PATCH', path, body);
  }
  del<T>(path: string, body?: unknown): Promise<T> {
    return this.call<T>('DELETE', path, body);
  }
}

// Shapes the dashboard reads (see daemon/api/openapi.yaml). Fields added
// for issue 14 are optional: an older daemon leaves them out and the page
// says less rather than breaking.
export interface Message { message: string }
/** The whole fleet's counts, beside every page of GET /api/machines. */
export interface MachineCounts {
  all: number; online: number; offline: number; pending: number; outdated: number; updating: number; for_update_all: number;
  /** Who Update all leaves out although they lack the server's bundle, by why. */
  update_all_skips?: { reason: string; machines: number }[];
}
/** What a page of GET /api/machines says beside its rows. */
export interface MachinePage { matched: number; next_cursor: string; counts: MachineCounts }
/** Every tunnel's counts (of one machine, with machine_id), beside every
 * page of GET /api/tunnels. */
export interface TunnelCounts { all: number; active: number; pending: number; error: number; offline: number; paused: number }
/** What a page of GET /api/tunnels says beside its rows. */
export interface TunnelPage { matched: number; next_cursor: string; counts: TunnelCounts }
export interface AuthStatus { setup: boolean; authenticated: boolean; totp_enabled: boolean; passkey_login?: boolean; sso?: string; password_login?: boolean; sso_error?: string }
export interface LoginResult { message?: string; needs_2fa?: boolean; pending_token?: string; passkey?: boolean }
export interface UnitInfo { active_state?: string; sub_state?: string; since?: string; error?: string }
export interface Outcome { ok: boolean; message?: string; at?: string }
export interface LocalStatus {
  domain?: string;
  server_host?: string;
  webproxy?: string;
  installed_at?: string;
  units?: Record<string, UnitInfo>;
  versions?: Record<string, string>;
  firewall_mode?: string;
  dashboard_private?: boolean;
  bind_ip?: string;
  operation?: string;
  outcomes?: { install?: Outcome; banner?: Outcome; firewall?: Outcome };
  missing?: { package: string; needed_for: string }[];
  database?: DatabaseInfo;
}
/** The database the daemon runs on; url is redacted by the daemon. */
export interface DatabaseInfo { engine: 'sqlite' | 'postgres'; url: string; path: string }
export interface ChecklistItem { id: string; label: string; done: boolean; detail?: string }
export interface Checklist { items: ChecklistItem[]; next?: string | null; next_step?: string; public_ip?: string; dns_ip?: string }
export interface BootstrapToken {
  id: number; label?: string; token?: string; created_at?: string; expires_at: string; command?: string;
  state?: 'pending' | 'used' | 'expired'; machine_id?: number | null;
  // Set when the daemon knows no address machines can reach (the command
  // then uses the dashboard's own address): what to set.
  warning?: string;
}
export interface Machine {
  id: number; name: string; username: string; status: string; created_at: string;
  status_reason?: string; last_seen?: string | null; client_addr?: string; tunnel_port?: number; agent_port?: number;
  agent_local_port?: number; config_push?: { ok: boolean; message?: string; at?: string } | null;
  agent_outdated?: boolean;
  ssh_command?: string; ssh_direct?: boolean; ssh_key_id?: string;
  // Whether the machine runs the client config it should.
  config?: MachineConfig;
  // What its agent last reported ('' when never), and whether it runs the
  // server's bundle (issue 26; an older daemon leaves them out).
  agent_version?: string; client_version?: string; bundle_version?: string;
  update?: MachineUpdate;
  // What each edge of the cluster saw of it (empty before any did).
  edges?: MachineEdge[];
  // How it reaches the tunnel server (issue 30; an older daemon leaves it out).
  transport?: MachineTransport;
  // Its parts in sites whose tunnel is another machine's (one machine's view only).
  serves?: ServedPart[];
}
/** A machine's part in a site served by several machines. */
export interface ServedPart {
  tunnel_id: number; tunnel_name: string; url: string; local_port: number; remote_port: number;
  status: 'active' | 'pending' | 'offline' | 'paused'; health: { state: string; message: string; checked_at?: string | null };
}
/** How a machine reaches the tunnel server: tcp (its own port) or wss
 * (through the web proxy on 443), as configured and as last seen. */
export interface MachineTransport { configured: 'tcp' | 'wss'; seen: '' | 'tcp' | 'wss'; addr: string; summary: string }
/** One edge's view of a machine: online, offline, or edge_down (the edge
 * itself is not answering). */
export interface MachineEdge { edge_id: number; edge: string; status: 'online' | 'offline' | 'edge_down'; last_seen?: string | null }
/** An edge (a VPS of the cluster) as GET /api/edges lists it. */
export interface Edge {
  id: number; name: string; address: string; status: 'up' | 'down' | 'joining' | 'retiring';
  last_seen?: string | null; version: string; this: boolean;
  /** The version its tunnel server (frps) last answered with ('' until it has). */
  tunnel_version: string;
  /** The parts of the edge's own host it keeps as desired (tunnel server, Caddy, publish table, firewall). */
  parts: HostPart[];
}
/** One part of an edge's own host: applied as desired, or pending since when and why. */
export interface HostPart {
  part: string; label: string; in_use: boolean; generation: number; drifted: boolean;
  pending_since?: string | null; error?: string; checked_at: string;
}
/** POST /api/edges/tokens: the one-time token and the command that uses it. */
export interface EdgeToken { token: string; expires_at: string; command: string; warning?: string }
export type UpdateState = 'current' | 'outdated' | 'unknown' | 'updating' | 'failed' | 'rolled_back' | 'unsupported';
export interface MachineUpdate {
  state: UpdateState; target_version?: string; error?: string; at?: string | null;
  // Whether an update can work now; when it cannot, why (offline, not
  // connected yet, nothing reported).
  can_update?: boolean; blocked?: string;
  // Only when unsupported: the one line to run on the machine ('' when the
  // daemon cannot give one).
  rejoin_command?: string;
}
/** The last fleet update (GET /api/machines/update); empty lists and
 * nulls before the first. */
export interface FleetUpdate {
  running: boolean; machine_ids: number[]; updated: number[];
  failed: { machine_id: number; name: string; error: string } | null;
  untouched: number[]; started_at: string | null; finished_at: string | null;
  // The edge that runs it (or ran it last), and its last log lines: the
  // same on every edge.
  edge?: string; lines?: { at: string; level: string; text: string }[];
}
export interface MachineConfig {
  state: 'applied' | 'pending'; desired_generation: number; applied_generation: number;
  pending_since?: string; last_error?: string; summary: string;
}
export interface Reachability {
  state: 'up' | 'down' | 'unknown'; http_status?: number; error?: string; cert_issuer?: string;
  cert_expires_at?: string | null; cert_valid?: boolean; checked_at?: string | null;
  // What is wrong with the certificate, in words ('' when nothing is).
  cert_error?: string;
}
export interface Tunnel {
  id: number; machine_id: number; machine_name?: string; name: string; kind: 'http' | 'tcp' | 'udp'; local_port: number;
  subdomain?: string | null; public: boolean; remote_port?: number; created_at?: string;
  // active once the tunnel server accepted it; pending, error, offline or
  // paused otherwise, with status_reason saying why.
  status?: 'active' | 'pending' | 'error' | 'offline' | 'paused'; status_reason?: string;
  // Paused by the operator (PATCH {paused: true}; {paused: false} resumes).
  paused?: boolean;
  url?: string; address?: string; reachability?: Reachability;
  access?: 'public' | 'operator' | 'password' | 'sso'; allow_ips?: string[]; has_password?: boolean; sso_allow?: string[];
  // HTTP: path rules before the gate (first match wins); how many days a
  // password or sso sign-in lasts (absent: a day).
  rules?: { path: string; action: 'allow' | 'gate' | 'deny' }[]; remember_days?: number;
  // HTTP: the machines serving it, its own first; how to pick; the check.
  targets?: TunnelTarget[]; balance?: 'failover' | 'round_robin';
  health?: { path: string; interval_s: number; expect_status: number };
  // HTTP: its own names besides url, each with the DNS record it needs.
  domains?: { name: string; url: string; dns: string }[];
  // The PROXY protocol header the service gets ('' none; udp: v2 only).
  proxy_protocol?: '' | 'v1' | 'v2';
  // HTTP: the page visitors get while no machine of the site answers.
  fallback?: { message: string };
}
/** An http tunnel's bypass token; token (the secret) only when made. */
export interface BypassToken { id: number; tunnel_id: number; name: string; created_at: string; expires_at: string; expired: boolean; token?: string }
export interface TunnelTarget {
  machine_id: number; machine_name: string; local_port: number; remote_port: number;
  status: 'active' | 'pending' | 'error' | 'offline' | 'paused';
  health: { state: 'up' | 'down' | 'unknown'; message: string; checked_at?: string | null };
}
export interface StaleTokenAttempt {
  id: number; kind: 'bootstrap' | 'tunnel_credential'; created_at: string; first_seen?: string;
  client_addr?: string; reason?: string; count?: number;
}
export interface ActivityEvent { id: number; created_at: string; source: string; kind?: string; machine_id?: number | null; tunnel_id?: number | null; message?: string }
/** A speed test through a machine's tunnel; the measurements are null
 * until measured (issue 50). */
export interface SpeedTest {
  id: number; machine_id: number; edge?: string; state: 'running' | 'done' | 'failed';
  phase: '' | 'download' | 'upload' | 'rtt' | 'mtu'; progress: number; seconds: number;
  started_at: string; finished_at?: string | null;
  download_mbps?: number | null; upload_mbps?: number | null; rtt_ms?: number | null;
  mtu?: number | null; payload?: number | null; error?: string;
}
export interface AgentStatus { unit?: string; active_state?: string; sub_state?: string; uptime_seconds?: number; agent_version?: string; revtunnel_client_version?: string }
export interface TwoFADevice { id: string; type?: 'totp' | 'passkey'; name: string; created_at?: string; last_used_at?: string | null }
export interface TwoFAStatus { enabled: boolean; devices: TwoFADevice[]; backup_codes_remaining: number }
export interface Enrollment { secret: string; qr_data_url: string }
// Sudo mode (GET/POST /api/auth/step-up): sensitive changes answer 403
// 'recent authentication required' unless recent is true; a step-up takes
// {code} when requires is 'totp', else {password}.
export interface StepUpState { requires: 'totp' | 'password'; recent: boolean; recent_until: string; window_seconds: number; passkey?: boolean }
export interface SSHKey {
  id: string; name: string; public_key: string; fingerprint?: string; is_default: boolean;
  created_at?: string; machine_count?: number;
}
export interface AuditEntry { id: number; created_at: string; kind: string; category?: string; client_addr?: string; user_agent?: string; detail?: string; count?: number }
export interface BanConfig { max_retry: number; find_time: number; ban_time: number }
export interface BanJail { name: string; currently_failed?: number; total_failed?: number; currently_banned?: number; total_banned?: number; banned?: string[] }
export interface BanStatus {
  installed: boolean; running: boolean; managed: boolean; jail_file?: string; jails?: BanJail[]; config?: BanConfig; whitelist?: string[];
  // Not installed: why, in the words setup-banner fails with. Installed:
  // fail2ban's version, and what it lacks here (python3-systemd).
  problem?: string; version?: string; missing?: { package: string; needed_for: string }[];
}
export interface FirewallDetection {
  mode?: string;
  nftables?: { installed?: boolean; tables?: string[]; svc_table?: boolean };
  ufw?: { installed?: boolean; active?: boolean };
  firewalld?: { installed?: boolean; active?: boolean };
  iptables?: { installed?: boolean; rules?: number; ipv6_rules?: number };
  notes?: string[];
}
