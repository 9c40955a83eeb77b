// Overview: getting started (what is done, the next step), the server's
// state with the last install's result, the install form, the live log of
// background operations and recent activity.
import { ApiError, type ActivityEvent, type Checklist, type LocalStatus, type Message } from '../api';
import type { View } from '../ctx';
import { badge, busy, card, checkbox, clear, field, fmtTime, form, h, notice, refill, table, time } from '../dom';
import { conn, logBuffer, onLog, type LogLine } from '../live';
import { outcomeBox } from '../outcome';
import { describeDatabase, reason } from '../words';

// Where each checklist item is done, and what it is about.
const WHERE: Record<string, string> = {
  domain_dns: '#install',
  webproxy: '#install',
  machine: '#/machines',
  tunnel: '#/tunnels',
};
const WHAT: Record<string, string> = {
  password: 'The operator password protects this dashboard.',
  domain_dns: 'Tunnels get names under your domain, and a DNS A record for router.<domain> must point at this server.',
  webproxy: 'Caddy publishes HTTP tunnels over HTTPS; the tunnel server is what machines connect to.',
  machine: 'A machine joins with a one-line command and keeps its tunnels open to this server.',
  tunnel: 'An HTTP tunnel publishes a service of a machine at https://<name>.<domain>.',
};

/** Whether the units' shared error is what the last install failed with. */
const sameAsInstall = (s: LocalStatus, err: string) => {
  const o = s.outcomes?.install;
  return !!o && !o.ok && !!o.message && (o.message.includes(err) || err.includes(o.message));
};

export const overviewView: View = (root, ctx) => {
  const api = ctx.api;

  // Getting started.
  const checkBody = h('div', null, h('p', { class: 'muted' }, 'Checking…'));
  const checkNotice = notice();
  const checkCard = card('Getting started', checkNotice.el, checkBody);
  const loadChecklist = () => busy([], checkNotice, async () => {
    let c: Checklist;
    try {
      c = await api.get<Checklist>('/api/local/checklist');
    } catch (e) {
      // A daemon without the checklist: leave the card out.
      if (e instanceof ApiError && e.status === 404) { checkCard.hidden = true; return; }
      throw e;
    }
    const items = c.items ?? [];
    const next = items.find((i) => i.id === c.next);
    const link = (id: string, text: string) => {
      const w = WHERE[id];
      if (!w) return text;
      if (w === '#install') return h('a', { href: '#install', onclick: (e: Event) => { e.preventDefault(); domain.input.focus(); } }, text);
      return h('a', { href: w }, text);
    };
    refill(checkBody,
      h('ol', { class: 'checklist' }, items.map((i) => h('li', { class: i.done ? 'done' : i.id === c.next ? 'next' : '' },
        h('span', { class: 'mark', 'aria-hidden': 'true' }, i.done ? '✓' : '○'),
        h('span', { class: 'sr-only' }, i.done ? 'Done: ' : 'To do: '),
        h('strong', null, link(i.id, i.label)),
        i.detail && (i.id !== c.next || !c.next_step) ? h('span', { class: 'muted' }, ` — ${i.detail}`) : null,
        WHAT[i.id] ? h('div', { class: 'muted small what' }, WHAT[i.id]) : null))),
      next ? h('div', { class: 'next-step' }, h('strong', null, 'Next step: '), reason(c.next_step || next.label, ''), ' ',
        WHERE[next.id] ? link(next.id, WHERE[next.id] === '#install' ? 'Go to the install form' : `Go to ${next.id === 'machine' ? 'Machines' : 'Tunnels'}`) : null)
        : items.length ? h('p', { class: 'notice ok' }, 'All set: every step is done.') : null);
  });


  // Status.
  const statusBody = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const statusNotice = notice();
  const install = outcomeBox(ctx, 'install', 'Install', false);
  const loadStatus = () => busy([], statusNotice, async () => {
    const s = await api.get<LocalStatus>('/api/local/status');
    install.show(s);
    renderStatus(s);
  });
  const renderStatus = (s: LocalStatus) => {
    if (s.operation) logBox.open = true;
    const rows: [string, string][] = [
      ['Web proxy', (s.webproxy ?? 'unknown').replace('_', ' ')],
      ['Domain', s.domain || '—'],
      ['Server host', s.server_host || '—'],
      ['Installed', fmtTime(s.installed_at)],
      ['Firewall mode', s.firewall_mode || '—'],
      ['Bind address', s.bind_ip || 'all addresses'],
      ['Database', describeDatabase(s.database)],
      ['Dashboard private', s.dashboard_private ? 'yes' : 'no'],
      ['Running operation', s.operation || 'none'],
    ];
    // One error shared by every unit (no systemd) is said once.
    const errs = new Set(Object.values(s.units ?? {}).map((u) => u.error ?? ''));
    const shared = errs.size === 1 ? [...errs][0] : '';
    const units = Object.entries(s.units ?? {}).map(([name, u]) => [
      name,
      shared ? 'unknown' : u.error ? h('span', { class: 'bad-text' }, u.error)
        : badge(`${u.active_state ?? '?'} (${u.sub_state ?? '?'})`, u.active_state === 'active' ? 'good' : 'warn'),
      u.since ? time(u.since) : '—',
    ]);
    const versions = Object.entries(s.versions ?? {}).map(([k, v]) => `${k} ${v || '—'}`).join(' · ');
    // Recommended packages the package manager did not install.
    const missing = (s.missing ?? []).map((m) => h('li', null, h('code', null, m.package), ` — needed for ${m.needed_for}`));
    refill(statusBody,
      missing.length ? h('div', { class: 'notice warn', role: 'status' },
        h('p', null, 'Not installed on this server (install with apt-get install or dnf install):'),
        h('ul', null, ...missing)) : null,
      h('dl', { class: 'kv' }, rows.flatMap(([k, v]) => [h('dt', null, k), h('dd', null, v)])),
      h('h3', null, 'Services'),
      // Said once: when the last install failed for the same reason, its
      // message above says it already.
      shared ? (sameAsInstall(s, shared) ? h('p', { class: 'muted' }, 'Their state is unknown, for the reason the last install gives above.')
        : h('p', { class: 'notice error' }, shared)) : null,
      table(['Unit', 'State', 'Since'], units, 'No managed services reported.', 'Services'),
      versions ? h('p', { class: 'muted' }, 'Versions: ', versions) : null);
    if (s.domain && !domain.input.value) domain.input.value = s.domain;
    if (s.server_host && !host.input.value) host.input.value = s.server_host;
  };

  // Install form with its DNS and IP helpers.
  const domain = field('Domain', { type: 'text', name: 'domain', placeholder: 'example.com', autocomplete: 'off', spellcheck: 'false' },
    'Tunnels get names under this domain; router.<domain> must point at this server. Needed unless you skip the web proxy.');
  const host = field('Server host', { type: 'text', name: 'server_host', placeholder: 'router.example.com or 203.0.113.7', autocomplete: 'off', spellcheck: 'false' },
    'Where machines reach the tunnel server. Defaults to router.<domain>.');
  const skip = checkbox('Skip the web proxy (TCP tunnels only)', { name: 'skip_webproxy' });
  const helperNotice = notice();
  const checkDns = h('button', { type: 'button', class: 'secondary' }, 'Check DNS');
  checkDns.addEventListener('click', () => void busy(checkDns, helperNotice, async () => {
    const d = domain.input.value.trim();
    if (!d) { domain.error('Enter the domain first.'); domain.input.focus(); return; }
    const [r, ip] = await Promise.all([
      api.get<{ ok: boolean; resolved_to?: string; host?: string; message?: string }>(`/api/local/check-dns?domain=${encodeURIComponent(d)}`, { timeout: 20_000 }),
      api.get<{ ip: string }>('/api/local/detect-ip', { timeout: 20_000 }).then((x) => x.ip, () => ''),
    ]);
    if (!r.ok) helperNotice.error(new Error(r.message || `router.${d} does not resolve`));
    else if (!ip) helperNotice.ok(`${r.host} resolves to ${r.resolved_to}; this server's public address could not be detected to compare.`);
    else if (ip === r.resolved_to) helperNotice.ok(`${r.host} resolves to ${r.resolved_to}, this server's public address.`);
    else helperNotice.error(new Error(`${r.host} resolves to ${r.resolved_to}, but this server's public address is ${ip}.`));
  }));
  // The address the world sees, for the DNS records to point at.
  const detectIp = h('button', { type: 'button', class: 'secondary' }, 'Detect IP');
  detectIp.addEventListener('click', () => void busy(detectIp, helperNotice, async () => {
    const { ip } = await api.get<{ ip: string }>('/api/local/detect-ip', { timeout: 20_000 });
    const d = domain.input.value.trim() || '<domain>';
    helperNotice.ok(`This server's public address is ${ip}: point router.${d} and *.${d} at it.`);
  }));
  const installForm = form({ label: 'Install', submit: 'Install' },
    [domain.row, host.row, skip.row, h('div', { class: 'actions' }, detectIp, checkDns), helperNotice.el],
    async () => {
      await api.post<Message>('/api/local/install', {
        domain: domain.input.value.trim(), server_host: host.input.value.trim(), skip_webproxy: skip.input.checked,
      });
      logBox.open = true;
      install.started();
    });
  installForm.form.id = 'install';

  // Live log. Not a live region: a screen reader is told only when an
  // operation ends, not every line.
  const logList = h('ol', { class: 'log', 'aria-label': 'Operation log', tabindex: 0 });
  // Folded while nothing runs (its last error is in Status already); it
  // opens by itself while an operation runs.
  const logSummary = h('summary');
  const logBox = h('details', { class: 'logbox' }, logSummary, logList);
  const countLines = () => {
    const n = logList.childElementCount;
    logSummary.textContent = n ? `The log of background operations (${n} line${n === 1 ? '' : 's'})` : 'The log of background operations (empty)';
  };
  const logDone = h('p', { class: 'sr-only', role: 'status' });
  const logState = h('span', { class: 'badge' });
  const showConn = () => {
    logState.textContent = conn === 'live' ? 'live' : conn === 'offline' ? 'disconnected' : 'connecting';
    logState.className = `badge ${conn === 'live' ? 'good' : 'warn'}`;
  };
  const line = (m: LogLine) => {
    if (m.done) return h('li', { class: m.ok ? 'ok' : 'error' }, `${m.op ?? 'operation'} ${m.ok ? 'finished' : 'failed'}`);
    const t = m.time ? new Date(m.time).toLocaleTimeString() : '';
    return h('li', { class: m.level ?? '' }, h('time', null, t), ' ', m.op ? h('span', { class: 'op' }, m.op) : null, ' ', m.line ?? '');
  };
  const addLine = (m: LogLine) => {
    logList.append(line(m));
    if (m.done) logDone.textContent = `${m.op ?? 'operation'} ${m.ok ? 'finished' : 'failed'}`;
    while (logList.childElementCount > 500) logList.firstElementChild?.remove();
    countLines();
    logList.scrollTop = logList.scrollHeight;
  };
  logBuffer.forEach((l) => logList.append(line(l)));
  countLines();
  showConn();

  // Recent activity.
  const actBody = h('div');
  const loadActivity = () => busy([], statusNotice, async () => {
    const ev = ((await api.get<ActivityEvent[]>('/api/local/activity')) ?? []).slice(0, 10);
    refill(actBody, table(['When', 'What'], ev.map((e) => [time(e.created_at), e.message ?? e.kind ?? '']), 'Nothing has happened yet.', 'Recent activity'));
  });

  clear(root,
    h('h1', null, 'Overview'),
    checkCard,
    card('Status', statusNotice.el, install.el, statusBody),
    card('Setup', h('p', null, 'Install the web proxy and the tunnel server.'), installForm.form,
      h('p', { class: 'muted' }, 'Then choose how the firewall is run: ', h('a', { href: '#/security/firewall' }, 'Firewall'), ' (under Security).')),
    card('Operation log', h('p', null, 'Stream: ', logState), logBox, logDone),
    card('Recent activity', actBody));
  ctx.sub(['status'], () => { void loadStatus(); void loadChecklist(); });
  ctx.sub(['machines', 'tunnels', 'probes'], () => void loadChecklist());
  ctx.sub(['activity'], () => void loadActivity());
  ctx.sub(['conn'], showConn);
  const offLog = onLog(addLine);
  void loadStatus();
  void loadChecklist();
  void loadActivity();
  return offLog;
};
