// The ban tool (fail2ban) and the firewall mode, each with the stored
// result of its last run.
import type { BanStatus, FirewallDetection, Message } from '../api';
import type { Ctx } from '../ctx';
import { ask } from '../dialog';
import { badge, busy, card, field, form, h, notice, refill, rowButton, select, table, type Child } from '../dom';
import { outcomeBox } from '../outcome';

export function banTool(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  // Why fail2ban is not installed, as the status says it (shown under
  // Installed): a failed set-up's result points there.
  let problem = '';
  const outcome = outcomeBox(ctx, 'banner', 'Ban-tool set-up', true, () => (problem ? [problem, 'under Installed'] : null));
  const maxRetry = field('Failures before a ban', { type: 'number', name: 'max_retry', min: 1, max: 1000, required: true });
  const findTime = field('Within (seconds)', { type: 'number', name: 'find_time', min: 10, required: true });
  const banTime = field('Ban for (seconds)', { type: 'number', name: 'ban_time', min: 10, required: true });
  const cfg = form({ label: 'Ban settings', submit: 'Save settings', className: 'stack inline' }, [maxRetry.row, findTime.row, banTime.row], async (fn) => {
    fn.ok((await api.put<Message>('/api/security/banner/config', {
      max_retry: Number(maxRetry.input.value), find_time: Number(findTime.input.value), ban_time: Number(banTime.input.value),
    })).message || 'Saved.');
  });
  const wlIp = field('Address or network', { type: 'text', name: 'ip', placeholder: '203.0.113.0/24', required: true, autocomplete: 'off', spellcheck: 'false' });
  const wl = form({ label: 'Never ban', submit: 'Add', className: 'stack inline' }, [wlIp.row], async () => {
    await api.post<Message>('/api/security/banner/whitelist', { ip: wlIp.input.value.trim() });
    wlIp.input.value = '';
    await load();
  });
  // Under the status it acts on; disabled, with why, while fail2ban is
  // not installed (the set-up would fail with the same words).
  const setupWhy = h('p', { id: 'ban-setup-why', class: 'muted small', hidden: true });
  const setup = h('button', { type: 'button', class: 'secondary' }, 'Set up the ban tool');
  setup.addEventListener('click', () => void busy(setup, n, async () => {
    // What earlier actions said ("Saved.") is not about this set-up.
    for (const x of [n, cfg.notice, wl.notice]) x.clear();
    await api.post<Message>('/api/local/setup-banner');
    outcome.started();
  }));
  const load = () => busy([], n, async () => {
    const s = await api.get<BanStatus>('/api/security/banner');
    const yes = (b: boolean) => badge(b ? 'yes' : 'no', b ? 'good' : 'warn');
    const jails = table(['Jail', 'Failed now', 'Banned now', 'Banned addresses'], (s.jails ?? []).map((j) => [
      j.name, j.currently_failed ?? 0, j.currently_banned ?? 0,
      h('div', { class: 'row-actions' }, (j.banned ?? []).map((ip) => rowButton('Unban', ip, (b) => void busy(b, n, async () => {
        n.ok((await api.post<Message>('/api/security/banner/unban', { jail: j.name, ip })).message);
        await load();
      })))),
    ]), 'No jails reported.', 'Jails');
    const whitelist = table(['Never banned', ''], (s.whitelist ?? []).map((ip) => [ip, rowButton('Remove', ip, () => void ask({
      title: `Remove ${ip} from the exempt addresses?`, body: h('p', null, `${ip} can be banned again after repeated failures.`),
      confirm: `Remove ${ip}`, danger: true,
      action: async () => {
        await api.del<Message>(`/api/security/banner/whitelist/${encodeURIComponent(ip)}`);
        await load();
      },
    }), 'danger small')]), 'No addresses are exempt.', 'Exempt addresses');
    if (s.config && !cfg.form.contains(document.activeElement)) {
      maxRetry.input.value = String(s.config.max_retry);
      findTime.input.value = String(s.config.find_time);
      banTime.input.value = String(s.config.ban_time);
    }
    // The same installed check the set-up makes: when it says no, why;
    // when yes, which version, and any package it lacks here.
    const missing = s.installed ? (s.missing ?? []) : [];
    problem = s.installed ? '' : s.problem ?? '';
    setup.disabled = !s.installed;
    setupWhy.hidden = s.installed;
    setupWhy.textContent = s.installed ? '' : 'Install fail2ban first (apt-get install fail2ban, or dnf install fail2ban), then set it up here.';
    if (s.installed) setup.removeAttribute('aria-describedby');
    else setup.setAttribute('aria-describedby', 'ban-setup-why');
    void outcome.refresh();
    refill(body,
      missing.length ? h('div', { class: 'notice warn', role: 'status' },
        h('p', null, 'Not installed on this server (install with apt-get install or dnf install):'),
        h('ul', null, missing.map((m) => h('li', null, h('code', null, m.package), ` — needed for ${m.needed_for}`)))) : null,
      h('dl', { class: 'kv' },
        h('dt', null, 'Installed'), h('dd', null, yes(s.installed), s.installed && s.version ? ` (${s.version})` : null,
          !s.installed && s.problem ? h('div', { class: 'small' }, s.problem) : null),
        h('dt', null, 'Running'), h('dd', null, yes(s.running)),
        h('dt', null, 'Managed by tunnelsvc'), h('dd', null, yes(s.managed))),
      h('div', { class: 'actions' }, setup), setupWhy,
      h('h3', null, 'Jails'), jails, h('h3', null, 'Exempt addresses'), whitelist);
  });
  ctx.sub(['status'], () => void load());
  void load();
  return card('fail2ban', n.el, outcome.el, body,
    h('h3', null, 'Add an exempt address'), wl.form, h('h3', null, 'Settings'), cfg.form);
}

interface FirewallPlan {
  open_tcp?: number[]; open_udp?: number[]; public_tunnel_tcp?: number[]; public_tunnel_udp?: number[]; bind_ip?: string;
  private_tcp?: number[]; dashboard_port?: number; dashboard_private?: boolean; warnings?: string[];
}

// What svc mode would let in and keep out, from the daemon's plan.
async function svcPlan(ctx: Ctx): Promise<Child[]> {
  const p = await ctx.api.get<FirewallPlan>('/api/local/firewall/plan');
  const ports = (l?: number[]) => (l ?? []).join(', ');
  return [
    h('p', null, 'Incoming traffic is dropped except:'),
    h('ul', null,
      h('li', null, `TCP ${ports(p.open_tcp)}`, p.dashboard_port && !p.dashboard_private ? ` (${p.dashboard_port} is this dashboard)` : ''),
      p.open_udp?.length ? h('li', null, `UDP ${ports(p.open_udp)}`) : null,
      p.public_tunnel_tcp?.length ? h('li', null, `public tunnels: TCP ${ports(p.public_tunnel_tcp)}${p.bind_ip ? ` on ${p.bind_ip}` : ''}`) : null,
      p.public_tunnel_udp?.length ? h('li', null, `public tunnels: UDP ${ports(p.public_tunnel_udp)}${p.bind_ip ? ` on ${p.bind_ip}` : ''}`) : null),
    p.private_tcp?.length ? h('p', null, `Only this server itself may reach TCP ${ports(p.private_tcp)}.`) : null,
    h('div', { class: 'callout' }, h('p', null, h('strong', null, 'Lock-out: '),
      p.warnings?.length ? 'read this first.' : 'if you reach this server on a port that is not listed (an SSH port other than 22, another service), you will be cut off.'),
    p.warnings?.length ? h('ul', null, p.warnings.map((w) => h('li', null, w))) : null),
  ];
}

// The three modes, in words, before anything is applied.
const MODES: [string, string, string][] = [
  ['none', 'No firewall', 'tunnelsvc does not touch the firewall, and nothing filters incoming traffic unless you set that up.'],
  ['manual', 'I manage the firewall myself', 'tunnelsvc does not touch the firewall; you open the ports tunnels need (ufw, firewalld or your own nftables).'],
  ['svc', 'tunnelsvc manages its own nftables table', 'Incoming traffic is dropped except SSH on port 22, HTTP and HTTPS, the tunnel server\'s port, public tunnel ports and this dashboard (unless it is private); the table follows tunnels as they change, and other tables are left alone. Apply shows the ports and asks first.'],
];
const modeName = (m?: string) => MODES.find(([v]) => v === m)?.[1] ?? m ?? 'unknown';

/** "active", "inactive", or "—" for a tool that is not installed. */
const state = (installed?: boolean, active?: boolean) => (!installed ? '—' : active ? 'active' : 'inactive');

export function firewall(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  const outcome = outcomeBox(ctx, 'firewall', 'Firewall change');
  const mode = select('Mode', MODES.map(([v, t]): [string, string] => [v, t]), { name: 'mode' });
  const apply = async () => {
    await api.post<Message>('/api/local/firewall/configure', { mode: mode.input.value });
    outcome.started();
    await load();
  };
  const f = form({ label: 'Firewall mode', submit: 'Apply' }, [mode.row], async () => {
    if (mode.input.value !== 'svc') return apply();
    await ask({
      title: 'Let tunnelsvc take over the firewall?', body: await svcPlan(ctx),
      confirm: 'Turn on svc mode', danger: true, action: apply,
    });
  });
  const load = () => busy([], n, async () => {
    const d = await api.get<FirewallDetection>('/api/local/firewall/detect');
    if (d.mode && !f.form.contains(document.activeElement)) mode.input.value = d.mode;
    const tables = d.nftables?.tables ?? [];
    refill(body,
      h('p', null, 'Current mode: ', h('strong', null, modeName(d.mode)), d.mode ? [' (', h('code', null, d.mode), ')'] : null),
      h('h3', null, 'Firewall tools on this server'),
      table(['Tool', 'Installed', 'State'], [
        ['nftables', d.nftables?.installed ? 'yes' : 'no', !d.nftables?.installed ? '—' : tables.length ? `tables: ${tables.join(', ')}` : 'no tables'],
        ['ufw', d.ufw?.installed ? 'yes' : 'no', state(d.ufw?.installed, d.ufw?.active)],
        ['firewalld', d.firewalld?.installed ? 'yes' : 'no', state(d.firewalld?.installed, d.firewalld?.active)],
        ['iptables', d.iptables?.installed ? 'yes' : 'no', !d.iptables?.installed ? '—'
          : `${d.iptables?.rules ?? 0} rule${d.iptables?.rules === 1 ? '' : 's'}, ${d.iptables?.ipv6_rules ?? 0} for IPv6`],
      ], '', 'Firewall tools'),
      (d.notes ?? []).length ? h('ul', { class: 'muted' }, (d.notes ?? []).map((x) => h('li', null, x))) : null);
  });
  ctx.sub(['status'], () => void load());
  void load();
  void outcome.refresh();
  return card('Mode', n.el, outcome.el, body, h('h3', null, 'Choose the mode'),
    h('dl', { class: 'modes' }, MODES.flatMap(([v, t, w]) => [h('dt', null, t, ' (', h('code', null, v), ')'), h('dd', null, w)])), f.form);
}
