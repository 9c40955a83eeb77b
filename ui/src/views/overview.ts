// Overview: the server's set-up state, the install form and the live log of
// background operations (the log WebSocket).
import type { LocalStatus, Message } from '../api';
import type { View } from '../ctx';
import { busy, card, checkbox, clear, field, fmtTime, form, h, notice, table } from '../dom';

interface LogLine { time?: string; level?: string; line?: string; op?: string; done?: boolean; ok?: boolean }

export const overviewView: View = (root, ctx) => {
  const statusBody = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const statusNotice = notice();
  const refresh = h('button', { type: 'button', class: 'secondary' }, 'Refresh');

  const loadStatus = () => busy(refresh, statusNotice, async () => {
    const s = await ctx.api.get<LocalStatus>('/api/local/status');
    renderStatus(s);
  });
  refresh.addEventListener('click', () => void loadStatus());

  const renderStatus = (s: LocalStatus) => {
    const rows: [string, string][] = [
      ['Web proxy', (s.webproxy ?? 'unknown').replace('_', ' ')],
      ['Domain', s.domain || '—'],
      ['Server host', s.server_host || '—'],
      ['Installed', fmtTime(s.installed_at)],
      ['Firewall mode', s.firewall_mode || '—'],
      ['Bind address', s.bind_ip || 'all addresses'],
      ['Dashboard private', s.dashboard_private ? 'yes' : 'no'],
      ['Running operation', s.operation || 'none'],
    ];
    const units = Object.entries(s.units ?? {}).map(([name, u]) => [
      name,
      u.error ? h('span', { class: 'badge bad' }, u.error)
        : h('span', { class: `badge ${u.active_state === 'active' ? 'good' : 'warn'}` }, `${u.active_state ?? '?'} (${u.sub_state ?? '?'})`),
      fmtTime(u.since),
    ]);
    const versions = Object.entries(s.versions ?? {}).map(([k, v]) => `${k} ${v || '—'}`).join(' · ');
    // Recommended packages the package manager did not install.
    const missing = (s.missing ?? []).map((m) => h('li', null, h('code', null, m.package), ` — needed for ${m.needed_for}`));
    clear(statusBody,
      missing.length ? h('div', { class: 'notice warn', role: 'status' },
        h('p', null, 'Not installed on this server (install with apt-get install or dnf install):'),
        h('ul', null, ...missing)) : null,
      h('dl', { class: 'kv' }, rows.flatMap(([k, v]) => [h("dt", null, k), h("dd", null, v)])),
      h('h3', null, 'Services'),
      table(['Unit', 'State', 'Since'], units, 'No managed services reported.'),
      versions ? h('p', { class: 'muted' }, 'Versions: ', versions) : null);
    if (s.domain && !domain.input.value) domain.input.value = s.domain;
    if (s.server_host && !host.input.value) host.input.value = s.server_host;
  };

  // Install form with its DNS and IP helpers.
  const domain = field('Domain', { type: 'text', name: 'domain', placeholder: 'example.com', autocomplete: 'off' },
    'Tunnels get names under this domain; router.<domain> must point at this server.');
  const host = field('Server host', { type: 'text', name: 'server_host', placeholder: 'router.example.com or 203.0.113.7', autocomplete: 'off' },
    'Where machines reach the tunnel server. Defaults to router.<domain>.');
  const skip = checkbox('Skip the web proxy (TCP tunnels only)', { name: 'skip_webproxy' });
  const helperNotice = notice();
  const checkDns = h('button', { type: 'button', class: 'secondary' }, 'Check DNS');
  const detectIp = h('button', { type: 'button', class: 'secondary' }, 'Detect public IP');
  checkDns.addEventListener('click', () => void busy(checkDns, helperNotice, async () => {
    const d = domain.input.value.trim();
    const r = await ctx.api.get<{ ok: boolean; resolved_to?: string; host?: string; message?: string }>(
      `/api/local/check-dns?domain=${encodeURIComponent(d)}`);
    if (r.ok) helperNotice.ok(`${r.host} resolves to ${r.resolved_to}.`);
    else helperNotice.error(new Error(r.message || 'router.<domain> does not resolve'));
  }));
  detectIp.addEventListener('click', () => void busy(detectIp, helperNotice, async () => {
    const r = await ctx.api.get<{ ip: string }>('/api/local/detect-ip');
    helperNotice.ok(`This server's public address is ${r.ip}.`);
    if (!host.input.value) host.input.value = r.ip;
  }));
  const install = form({ label: 'Install', submit: 'Install' },
    [domain.row, host.row, skip.row, h('div', { class: 'actions' }, checkDns, detectIp), helperNotice.el],
    async (n) => {
      const r = await ctx.api.post<Message>('/api/local/install', {
        domain: domain.input.value.trim(), server_host: host.input.value.trim(), skip_webproxy: skip.input.checked,
      });
      n.ok(r.message || 'Installation started; follow it in the log below.');
      void loadStatus();
    });

  // Live log.
  const logList = h('ol', { class: 'log', 'aria-live': 'polite', 'aria-label': 'Operation log' });
  const logState = h('span', { class: 'badge' }, 'connecting');
  const addLine = (m: LogLine) => {
    if (m.done) {
      logList.append(h('li', { class: m.ok ? 'ok' : 'error' }, `${m.op ?? 'operation'} ${m.ok ? 'finished' : 'failed'}`));
      void loadStatus();
    } else {
      const t = m.time ? new Date(m.time).toLocaleTimeString() : '';
      logList.append(h('li', { class: m.level ?? '' }, h('time', null, t), ' ', m.op ? h('span', { class: 'op' }, m.op) : null, ' ', m.line ?? ''));
    }
    while (logList.childElementCount > 500) logList.firstElementChild?.remove();
    logList.scrollTop = logList.scrollHeight;
  };
  let ws: WebSocket | undefined;
  let stopped = false;
  let retry: number | undefined;
  const connect = () => {
    const proto = location.protocol === 'https:' ? 'wss' : 'ws';
    ws = new WebSocket(`${proto}://${location.host}/api/local/logs/ws`);
    ws.addEventListener('open', () => { logState.textContent = 'live'; logState.className = 'badge good'; });
    ws.addEventListener('message', (ev) => {
      try { addLine(JSON.parse(String(ev.data)) as LogLine); } catch { addLine({ line: String(ev.data) }); }
    });
    ws.addEventListener('close', () => {
      logState.textContent = 'disconnected'; logState.className = 'badge warn';
      if (!stopped) retry = window.setTimeout(connect, 3000);
    });
  };
  connect();

  clear(root,
    h('h1', null, 'Overview'),
    card('Status', h('div', { class: 'actions end' }, refresh), statusNotice.el, statusBody),
    card('Install the web proxy and tunnel server', install.form),
    card('Operation log', h('p', null, 'Stream: ', logState), logList));
  void loadStatus();

  return () => {
    stopped = true;
    if (retry) clearTimeout(retry);
    ws?.close();
  };
};
