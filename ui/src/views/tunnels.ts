// Tunnels: every HTTP tunnel as its full URL with what the daemon's probe
// through the web proxy found (up or down, the certificate's issuer and
// expiry); every TCP tunnel as host:port. Edited with PATCH in a dialog.
import { loadTraffic, trafficCell, type TrafficHistory } from './monitoring';
import { accessControl, accessLabel } from './tunnelAccess';
import { tunnelApps } from './tunnelApps';
import { targetsControl, targetsList } from './tunnelTargets';
import type { AuthStatus, Machine, MachinePage, Message, Tunnel, TunnelPage } from '../api';
import type { Ctx, View } from '../ctx';
import { ask, modal } from '../dialog';
import { badge, busy, card, checkbox, clear, field, fmtTime, form, h, notice, refill, rowButton, select, table, textarea, time, type Child, type Head, type Notice } from '../dom';
import { emit } from '../live';
import { filterBar } from '../filter';
import { MAX_PAGE, pages } from '../pages';
import { reason } from '../words';

// The server's rule for names and subdomains (TunnelInput in
// daemon/api/openapi.yaml): a hostname label, 1-63 lowercase letters,
// digits and inner hyphens. Chrome compiles pattern attributes with the v
// flag, where a bare "-" in a class is an error, so it is escaped. The
// server lower-cases what it gets, so the fields do the same as one types.
export const LABEL = '[a-z0-9]([a-z0-9\\-]{0,61}[a-z0-9])?';
const LABEL_MSG = 'Use letters, digits and hyphens (not first or last), at most 63 characters.';

/** Where a tunnel is reached: a link for HTTP, host:port for TCP and UDP. */
export function reachedAt(t: Tunnel): Child {
  if (t.kind === 'http') {
    if (t.url) return h('a', { href: t.url, target: '_blank', rel: 'noopener', class: 'url' }, t.url);
    return h('span', { class: 'muted' }, `${t.subdomain ?? '?'}.<domain> (no domain set)`);
  }
  return h('code', { class: 'url' }, t.address ?? `port ${t.remote_port ?? '?'}`);
}

/** An HTTP tunnel's own domains, each with the DNS record it needs. */
function ownDomains(t: Tunnel): Child {
  if (!t.domains?.length) return null;
  return h('ul', { class: 'plain own-domains small' }, t.domains.map((d) => h('li', null,
    h('a', { href: d.url, target: '_blank', rel: 'noopener', class: 'url' }, d.url), h('div', { class: 'muted' }, `DNS: ${d.dns}`))));
}

/** What GET /api/tunnels/{id}/dns found for one own domain. */
interface DomainDNS { domain: string; ok: boolean; resolved_to?: string; message?: string }

/** A tunnel that is not active yet (or any more), and why; null when active. */
export function tunnelState(t: Tunnel): Child | null {
  if (!t.status || t.status === 'active') return null;
  const tone = t.status === 'pending' ? 'warn' : 'bad';
  return h('div', null, badge(t.status, tone), reason(t.status_reason));
}

/** What the last probe through the web proxy found (HTTP tunnels). */
function probeResult(t: Tunnel): Child {
  const r = t.reachability;
  const pp = t.proxy_protocol ? `, PROXY ${t.proxy_protocol}` : '';
  if (t.kind !== 'http') return h('div', { class: 'small' }, (t.public ? 'public port' : 'VPS only') + pp);
  if (!r || r.state === 'unknown') return h('div', null, badge('not checked yet'));
  const when = r.checked_at ? h('span', { class: 'muted small' }, ' checked ', time(r.checked_at)) : null;
  // The certificate the web proxy served: issuer, expiry, and what is
  // wrong with it (not obtained, expired, not renewed in time, untrusted).
  const cert = [
    r.cert_issuer
      ? h('div', { class: 'small' }, `Certificate: ${r.cert_issuer}`, r.cert_expires_at ? `, expires ${fmtTime(r.cert_expires_at)}` : '',
        r.cert_valid === false && !r.cert_error ? h('span', { class: 'bad-text' }, ' (not trusted)') : null)
      : null,
    reason(r.cert_error, 'bad-text small'),
  ];
  if (r.state === 'down') return h('div', null, badge('down', 'bad'), when, reason(r.error), cert);
  return h('div', null, badge('up', 'good'), r.http_status ? ` HTTP ${r.http_status}` : null, when, cert);
}

/** The tunnel's state: its status when not active, then its last probe.
 * (The machines that serve a site are listed under its name: the Tunnel
 * column is the wide one.) */
export function reachability(t: Tunnel): Child {
  return h('div', { class: 'state' }, tunnelState(t), probeResult(t));
}

function tunnelFields(t: Partial<Tunnel>, kindFixed: boolean, ownMachine: () => number) {
  const name = field('Name', { type: 'text', name: 'name', required: true, autocomplete: 'off', spellcheck: 'false', pattern: LABEL, maxlength: 63, value: t.name },
    { hint: 'A hostname label, unique on its machine.', invalid: LABEL_MSG });
  const kind = select('Kind', [['http', 'HTTP, published at https://<subdomain>.<domain>'], ['tcp', 'TCP, a port on the VPS'],
    ['udp', 'UDP, a port on the VPS (games, DNS, VoIP, WireGuard)']], { name: 'kind', disabled: kindFixed });
  if (t.kind) kind.input.value = t.kind;
  const port = field('Local port', { type: 'number', name: 'local_port', min: 1, max: 65535, required: true, value: t.local_port },
    { hint: 'The port the service listens on, on the machine.', invalid: 'A port from 1 to 65535.' });
  const sub = field('Subdomain', { type: 'text', name: 'subdomain', required: true, autocomplete: 'off', spellcheck: 'false', pattern: LABEL, maxlength: 63, value: t.subdomain ?? undefined },
    { hint: 'The name under your domain.', invalid: LABEL_MSG });
  const pub = checkbox('Public: reachable from the internet (otherwise only from the VPS)', { name: 'public', checked: t.public });
  const access = accessControl(t);
  const targets = targetsControl(t, kindFixed);
  const pp = proxyProtocolControl(t);
  const fallback = textarea('Fallback page message', { name: 'fallback', rows: 2, maxlength: 500, placeholder: 'Back at 14:00.' },
    'Optional: while no machine of this site answers, visitors get a page with this message (503, on the site\'s own name) instead of an error.');
  fallback.input.value = t.fallback?.message ?? '';
  const domains = field('Own domains', { type: 'text', name: 'domains', autocomplete: 'off', spellcheck: 'false', placeholder: 'app.example.org, www.example.org',
    value: (t.domains ?? []).map((d) => d.name).join(', ') },
  'Optional: names of your own domains this site is also served at, comma-separated. Point each at this server in DNS (a CNAME to router.<domain>); certificates follow.');
  for (const i of [name.input, sub.input]) {
    i.addEventListener('input', () => {
      const low = i.value.toLowerCase();
      if (low === i.value) return;
      const at = i.selectionStart;
      i.value = low;
      i.setSelectionRange(at, at);
    });
  }
  const sync = () => {
    const http = kind.input.value === 'http';
    sub.row.hidden = !http;
    pub.row.hidden = http;
    access.sync(http);
    targets.sync(http);
    domains.row.hidden = !http;
    fallback.row.hidden = !http;
    pp.sync(kind.input.value);
  };
  kind.input.addEventListener('change', sync);
  sync();
  const body = () => {
    const http = kind.input.value === 'http';
    const b: Record<string, unknown> = { name: name.input.value.trim(), local_port: Number(port.input.value) };
    if (http) {
      Object.assign(b, { subdomain: sub.input.value.trim() }, access.body(), targets.body({ machine_id: ownMachine(), local_port: Number(port.input.value) }));
      const ds = domains.input.value.split(',').map((s) => s.trim()).filter((s) => s !== '');
      if (ds.length || kindFixed) b.domains = ds;
      if (fallback.input.value.trim() !== '' || kindFixed) b.fallback = { message: fallback.input.value.trim() };
    }
    else b.public = pub.input.checked;
    b.proxy_protocol = pp.value();
    if (!kindFixed) b.kind = kind.input.value;
    return b;
  };
  // After a create: empty again but for the kind (and the machine), so a
  // second submit cannot collide with the tunnel just made.
  const reset = () => {
    for (const i of [name.input, port.input, sub.input, domains.input, fallback.input]) i.value = '';
    pub.input.checked = false;
    pp.reset();
    access.reset();
    targets.reset();
  };
  // Editing only: paused or served.
  const paused = kindFixed ? checkbox('Paused: not served until resumed (the machine keeps the tunnel)', { name: 'paused', checked: !!t.paused }) : null;
  const bodyWithPause = () => (paused ? { ...body(), paused: paused.input.checked } : body());
  return { rows: [name.row, kind.row, port.row, sub.row, domains.row, pub.row, ...access.rows, ...targets.rows, fallback.row, pp.row, paused?.row ?? null], body: bodyWithPause, name, reset, setMachines: targets.setMachines, setSSO: access.setSSO };
}

/** The PROXY protocol header, under the form's advanced options: off, v1
 * or v2 (a udp tunnel's datagrams take only v2). */
function proxyProtocolControl(t: Partial<Tunnel>) {
  const f = select('PROXY protocol', [['', 'Off: the service sees the tunnel\'s own address'], ['v1', 'v1 (text)'], ['v2', 'v2 (binary)']],
    { name: 'proxy_protocol' },
    'The service gets each visitor\'s own address in a PROXY protocol header before the connection\'s first bytes. Turn it on only for a service set up to expect it (nginx: listen … proxy_protocol; HAProxy: accept-proxy): any other reads the header as garbage and fails.');
  f.input.value = t.proxy_protocol ?? '';
  const v1 = f.input.querySelector<HTMLOptionElement>('option[value="v1"]');
  const row = h('details', { class: 'advanced', open: !!t.proxy_protocol }, h('summary', null, 'Advanced options'), f.row);
  return {
    row,
    value: () => f.input.value,
    reset: () => { f.input.value = ''; row.open = false; },
    sync: (kind: string) => {
      const udp = kind === 'udp';
      if (v1) v1.disabled = udp;
      if (udp && f.input.value === 'v1') f.input.value = 'v2';
    },
  };
}

function editTunnel(ctx: Ctx, t: Tunnel, n: Notice): void {
  void modal(`Edit tunnel ${t.name}`, (box, close) => {
    const f = tunnelFields(t, true, () => t.machine_id);
    void ctx.api.get<Machine[]>('/api/machines').then((ms) => f.setMachines(ms ?? []), () => undefined);
    ssoState(ctx, f.setSSO);
    const cancel = h('button', { type: 'button', class: 'secondary', onclick: close }, 'Cancel');
    const fm = form({ label: `Edit tunnel ${t.name}`, submit: 'Save changes' }, f.rows, async () => {
      const saved = await ctx.api.patch<Tunnel>(`/api/tunnels/${t.id}`, f.body());
      close();
      n.ok(`Saved the changes to ${saved?.name ?? t.name}.`);
      emit('tunnels');
    });
    fm.submit.before(cancel);
    box.append(fm.form);
    if (t.kind === 'http') box.append(tunnelApps(ctx, t));
    f.name.input.focus();
  }, true);
}

/** The tunnels table; without machine it lists every machine's. Secondary
 * details (where it is reached, the local port, who may reach it) sit
 * under the name; the actions are stacked in a narrow column. */
export function tunnelsTable(ctx: Ctx, ts: Tunnel[], n: Notice, withMachine: boolean, machines: Machine[] = [], traffic: TrafficHistory | null = null): HTMLElement {
  const machineName = (t: Tunnel) => t.machine_name ?? machines.find((m) => m.id === t.machine_id)?.name ?? `#${t.machine_id}`;
  const heads: Head[] = [['Tunnel', 'c-main'], ...(withMachine ? [['Machine', 'c-machine'] as Head] : []),
    ['State', 'c-state'], ['Traffic (24 h)', 'c-traffic'], ['', 'c-actions']];
  return table(heads, ts.map((t) => {
    // What this row's own buttons answer shows on the row.
    const rowNote = notice();
    // The tunnel as it is now: the row may be drawn from before a save
    // whose refresh has not come yet.
    const edit = rowButton('Edit', t.name, (b) => void busy(b, n, async () => {
      editTunnel(ctx, (await ctx.api.get<Tunnel>(`/api/tunnels/${t.id}`)) ?? t, n);
    }));
    const dns = t.domains?.length ? rowButton('Check DNS', t.name, (b) => void busy(b, rowNote, async () => {
      const rs = await ctx.api.get<DomainDNS[]>(`/api/tunnels/${t.id}/dns`);
      const bad = (rs ?? []).filter((r) => !r.ok);
      if (bad.length) throw new Error(bad.map((r) => r.message).join(' '));
      rowNote.ok(`DNS is right: ${(rs ?? []).map((r) => r.domain).join(', ')} ${(rs ?? []).length === 1 ? 'points' : 'point'} at this server.`);
    })) : null;
    // Paused: not served, its machine's client config without it, until
    // resumed (PATCH {paused}).
    const pause = rowButton(t.paused ? 'Resume' : 'Pause', t.name, (b) => void busy(b, rowNote, async () => {
      await ctx.api.patch<Tunnel>(`/api/tunnels/${t.id}`, { paused: !t.paused });
      n.ok(t.paused ? `Resumed ${t.name}: it is served again.` : `Paused ${t.name}: it is not served until you resume it.`);
      emit('tunnels');
    }));
    const probe = t.kind === 'http' && t.url ? rowButton('Check now', t.name, (b) => void busy(b, n, async () => {
      await ctx.api.post<Tunnel>(`/api/tunnels/${t.id}/probe`, undefined, { timeout: 20_000 });
      emit('tunnels');
    })) : null;
    const del = rowButton('Delete', t.name, () => void ask({
      title: `Delete tunnel ${t.name}?`,
      body: h('p', null, `${t.kind === 'http' ? t.url || t.name : t.address || t.name} stops answering at once.`),
      confirm: `Delete ${t.name}`, danger: true,
      action: async () => {
        await ctx.api.del<Message>(`/api/tunnels/${t.id}`);
        emit('tunnels');
      },
    }), 'danger small');
    return [
      h('div', { class: 'main-cell' },
        h('div', null, h('strong', { class: 'name' }, t.name), ' ', badge(t.kind.toUpperCase())),
        h('div', null, reachedAt(t), h('span', { class: 'muted small' }, ` → local port ${t.local_port}`)),
        ownDomains(t), accessLabel(t), targetsList(t), rowNote.el),
      ...(withMachine ? [h('a', { href: `#/machines/${t.machine_id}`, class: 'name' }, machineName(t))] : []),
      reachability(t), trafficCell(traffic?.tunnels[String(t.id)], traffic !== null), h('div', { class: 'row-actions' }, edit, pause, probe, dns, del)];
  }), 'No tunnels yet.', 'Tunnels', 'data-table');
}

/** Tells a tunnel form whether single sign-on is on (an access gate of
 * mode sso needs it); unknown when the question fails, and then the API's
 * answer says it. */
function ssoState(ctx: Ctx, set: (on: boolean) => void): void {
  void ctx.api.get<AuthStatus>('/api/auth/status').then((st) => set(st.sso !== undefined), () => undefined);
}

/** The form that adds a tunnel, to one machine or to a chosen one. */
export function newTunnelForm(ctx: Ctx, machineId?: number): { el: HTMLElement; setMachines: (ms: Machine[]) => void } {
  const sel = select('Machine', [], { name: 'machine_id', required: true });
  const f = tunnelFields({ kind: 'http' }, false, () => machineId ?? Number(sel.input.value));
  ssoState(ctx, f.setSSO);
  // Until the machines are known (a load can fail or time out) neither
  // the form nor "add a machine first" shows: that would not be true.
  const none = h('p', { class: 'muted', hidden: true }, 'Tunnels belong to a machine: ', h('a', { href: '#/machines' }, 'add a machine'), ' first.');
  const waiting = h('p', { class: 'muted' }, 'Loading the machines…');
  const fm = form({ label: 'New tunnel', submit: 'Create tunnel' }, [machineId ? null : sel.row, ...f.rows], async (n) => {
    const t = await ctx.api.post<Tunnel>('/api/tunnels', { ...f.body(), machine_id: machineId ?? Number(sel.input.value) });
    n.ok(`Tunnel ${t.name} created${t.url ? `: ${t.url}` : t.address ? `: ${t.address}` : ''}.`);
    f.reset();
    f.name.input.focus();
    emit('tunnels');
  });
  const setMachines = (ms: Machine[]) => {
    f.setMachines(ms);
    const cur = sel.input.value;
    clear(sel.input, ms.map((m) => h('option', { value: m.id }, m.name)));
    if (cur) sel.input.value = cur;
    fm.form.hidden = !machineId && ms.length === 0;
    none.hidden = !fm.form.hidden;
    waiting.hidden = true;
    required.hidden = fm.form.hidden;
  };
  const required = h('p', { class: 'muted small', hidden: true }, 'Fields marked * are required.');
  fm.form.hidden = true;
  if (machineId) {
    setMachines([]);
    // The other machines a site may also be served by.
    void ctx.api.get<Machine[]>('/api/machines').then((ms) => f.setMachines(ms ?? []), () => undefined);
  }
  return { el: h('div', null, waiting, required, none, fm.form), setMachines };
}

// The states the list filters by, on the server: a tunnel's status or,
// for HTTP, its last check (GET /api/tunnels?state=…).
export const TUNNEL_STATES: [string, string][] = [['', 'All states'], ['active', 'Active'], ['pending', 'Pending'], ['error', 'Error'],
  ['offline', 'Offline'], ['paused', 'Paused'], ['up', 'Check: up'], ['down', 'Check: down'], ['unknown', 'Not checked yet']];

export const tunnelsView: View = (root, ctx) => {
  const stops: (() => void)[] = [];
  const n = notice();
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const create = newTunnelForm(ctx);
  let machines: Machine[] = [];
  let traffic: TrafficHistory | null = null;
  // The search and the filters go to the server. The machine filter
  // lists at most a page of 500 machines; past that the search finds a
  // machine's tunnels by its name.
  const filters = filterBar(
    [
      { label: 'Machine', name: 'machine_id', options: [['', 'All machines']] },
      { label: 'Kind', name: 'kind', options: [['', 'Every kind'], ['http', 'HTTP'], ['tcp', 'TCP'], ['udp', 'UDP']] },
      { label: 'State', name: 'state', options: TUNNEL_STATES },
    ],
    () => void load(true));
  filters.el.hidden = true;
  const list = pages<Tunnel, TunnelPage>(ctx.api, '/api/tunnels', filters.query, n, stops, () => show());
  const show = () => {
    const page = list.page();
    if (!page) return;
    list.label('tunnels');
    refill(body, filters.framed(tunnelsTable(ctx, list.rows(), n, true, machines, traffic), page.matched, page.counts.all, ['tunnel', 'tunnels']),
      list.moreRow);
  };
  const loadMachines = async () => {
    const r = await ctx.api.page<Machine[], MachinePage>(`/api/machines?limit=${MAX_PAGE}`);
    machines = r.data ?? [];
    filters.setOptions('machine_id', r.page.next_cursor ? [['', 'All machines']]
      : [['', 'All machines'], ...machines.map((m): [string, string] => [String(m.id), m.name])]);
    create.setMachines(machines);
  };
  const load = (reset = false, withMachines = false) => busy([], n, async () => {
    const [apply, tr] = await Promise.all([list.read(reset), loadTraffic(ctx), withMachines ? loadMachines() : undefined]);
    if (!apply()) return;
    traffic = tr;
    filters.el.hidden = list.page()!.counts.all === 0;
    show();
  });
  ctx.sub(['tunnels', 'probes'], () => void load());
  ctx.sub(['machines'], () => void load(false, true));
  clear(root, h('h1', null, 'Tunnels'),
    card('All tunnels', h('p', { class: 'muted' }, 'HTTP tunnels are checked through the web proxy every few minutes and after each change.'),
      filters.el, n.el, body),
    card('New tunnel', create.el));
  void load(false, true);
  return () => stops.forEach((f) => f());
};
