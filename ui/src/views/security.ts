// Security: two-factor devices and backup codes, SSH keys (download needs a
// step-up), the audit log, the ban tool and the firewall mode.
import { unwrap, type AuditEntry, type BanStatus, type Enrollment, type FirewallDetection, type Message, type SSHKey, type TwoFAStatus } from '../api';
import type { Ctx, View } from '../ctx';
import { busy, card, checkbox, clear, field, fmtTime, form, h, notice, select, table } from '../dom';
import { monitoringCard } from './monitoring';

export const securityView: View = (root, ctx) => {
  clear(root, h('h1', null, 'Security'), twoFA(ctx), sshKeys(ctx), banTool(ctx), firewall(ctx), monitoringCard(ctx), auditLog(ctx));
};

function backupCodesBox(codes: string[]): HTMLElement {
  const box = h('div', { class: 'callout' },
    h('p', null, h('strong', null, 'Backup codes — shown only now.'), ' Each works once when you have no device. Store them somewhere safe.'),
    h('ul', { class: 'codes' }, codes.map((c) => h('li', null, c))));
  const done = h('button', { type: 'button', class: 'secondary' }, 'I have saved them');
  done.addEventListener('click', () => box.remove());
  box.append(done);
  return box;
}

function twoFA(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const extra = h('div');
  const codesBox = h('div');
  const n = notice();
  const load = () => busy([], n, async () => {
    const s = await api.get<TwoFAStatus>('/api/auth/2fa/status');
    const devices = table(['Device', 'Added', 'Last used', ''], (s.devices ?? []).map((d) => {
      const rm = h('button', { type: 'button', class: 'danger small' }, 'Remove');
      rm.addEventListener('click', () => {
        const code = window.prompt(`Remove ${d.name}: enter a code from another device or a backup code`);
        if (!code) return;
        void busy(rm, n, async () => {
          n.ok((await api.del<Message>(`/api/auth/2fa/devices/${encodeURIComponent(d.id)}`, { code: code.trim() })).message);
          await load();
        });
      });
      return [d.name, fmtTime(d.created_at), fmtTime(d.last_used_at), rm];
    }), 'No devices.');
    const enroll = h('button', { type: 'button' }, s.enabled ? 'Add another device' : 'Turn on two-factor authentication');
    enroll.addEventListener('click', () => void busy(enroll, n, async () => {
      const e = await api.post<Enrollment>('/api/auth/2fa/enroll');
      const code = field('Code from the app', { type: 'text', inputmode: 'numeric', autocomplete: 'one-time-code', required: true });
      const name = field('Device name', { type: 'text', placeholder: 'Authenticator', maxlength: 64 });
      const confirm = form({ label: 'Confirm the new device', submit: 'Confirm' }, [code.row, name.row], async (cn) => {
        const r = await api.post<Message & { backup_codes?: string[] }>('/api/auth/2fa/confirm', { code: code.input.value.trim(), name: name.input.value.trim() });
        clear(extra);
        clear(codesBox, r.backup_codes?.length ? backupCodesBox(r.backup_codes) : null);
        cn.ok(r.message);
        n.ok(r.message || 'Device added.');
        await load();
      });
      clear(extra, h('div', { class: 'enroll' },
        h('p', null, 'Scan this code with an authenticator app, or enter the secret by hand, then confirm with a code.'),
        h('img', { class: 'qr', src: e.qr_data_url, alt: 'QR code of the new two-factor secret' }),
        h('p', null, 'Secret: ', h('code', null, e.secret)),
        confirm.form));
    }));
    const parts: Node[] = [
      h('p', null, 'Status: ', h('span', { class: `badge ${s.enabled ? 'good' : 'warn'}` }, s.enabled ? 'on' : 'off'),
        s.enabled ? ` · ${s.backup_codes_remaining} backup codes left` : ''),
      devices, h('div', { class: 'actions' }, enroll),
    ];
    if (s.enabled) {
      const regenCode = field('Code', { type: 'text', autocomplete: 'one-time-code', required: true });
      const regen = form({ label: 'New backup codes', submit: 'Issue new backup codes', className: 'stack inline' }, [regenCode.row], async () => {
        const r = await api.post<{ backup_codes: string[]; message: string }>('/api/auth/2fa/backup-codes/regenerate', { code: regenCode.input.value.trim() });
        clear(codesBox, backupCodesBox(r.backup_codes));
        await load();
      });
      const offCode = field('Code', { type: 'text', autocomplete: 'one-time-code', required: true });
      const off = form({ label: 'Turn off two-factor authentication', submit: 'Turn off 2FA', className: 'stack inline' }, [offCode.row], async (fn) => {
        fn.ok((await api.post<Message>('/api/auth/2fa/disable', { code: offCode.input.value.trim() })).message);
        clear(extra);
        await load();
      });
      parts.push(h('h3', null, 'New backup codes'), regen.form, h('h3', null, 'Turn off'), off.form);
    }
    clear(body, parts);
  });
  void load();
  return card('Two-factor authentication', n.el, codesBox, body, extra);
}

function sshKeys(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const stepUp = h('div');
  const n = notice();
  const download = async (k: SSHKey) => {
    const info = await api.get<{ requires: string }>('/api/local/ssh-keys/challenge-info');
    const totp = info.requires === 'totp';
    const secret = field(totp ? 'Code from your authenticator app' : 'Your login password',
      totp ? { type: 'text', inputmode: 'numeric', autocomplete: 'one-time-code', required: true }
        : { type: 'password', autocomplete: 'current-password', required: true });
    const f = form({ label: `Download ${k.name}`, submit: 'Download private key' }, [secret.row], async (fn) => {
      const res = await api.send('POST', `/api/local/ssh-keys/${encodeURIComponent(k.id)}/download`,
        totp ? { code: secret.input.value.trim() } : { password: secret.input.value });
      if (!res.ok) await unwrap(res); // throws the server's message
      const url = URL.createObjectURL(await res.blob());
      const a = h('a', { href: url, download: 'tunnel_id_rsa' });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
      secret.input.value = '';
      fn.ok('Downloaded as tunnel_id_rsa. Keep it private.');
    });
    clear(stepUp, h('h3', null, `Download the private key of ${k.name}`), f.form);
    secret.input.focus();
  };
  const load = () => busy([], n, async () => {
    const keys = (await api.get<SSHKey[]>('/api/local/ssh-keys')) ?? [];
    clear(body, table(['Name', 'Fingerprint', 'Used by', ''], keys.map((k) => {
      const dl = h('button', { type: 'button', class: 'secondary small' }, 'Download');
      const def = h('button', { type: 'button', class: 'secondary small', disabled: k.is_default }, 'Make default');
      const del = h('button', { type: 'button', class: 'danger small' }, 'Delete');
      dl.addEventListener('click', () => void busy(dl, n, () => download(k)));
      def.addEventListener('click', () => void busy(def, n, async () => {
        await api.put<Message>(`/api/local/ssh-keys/${encodeURIComponent(k.id)}/default`);
        await load();
      }));
      del.addEventListener('click', () => {
        if (!window.confirm(`Delete the key ${k.name}?`)) return;
        void busy(del, n, async () => {
          await api.del<Message>(`/api/local/ssh-keys/${encodeURIComponent(k.id)}`);
          await load();
        });
      });
      return [h('span', null, k.name, k.is_default ? [' ', h('span', { class: 'badge good' }, 'default')] : null),
        h('code', null, k.fingerprint ?? '—'), `${k.machine_count ?? 0} machines`, h('div', { class: 'row-actions' }, dl, def, del)];
    }), 'No SSH keys yet.'));
  });
  const name = field('Name', { type: 'text', placeholder: 'Unnamed key', autocomplete: 'off' });
  const setDef = checkbox('Make it the default key');
  const gen = form({ label: 'Generate an SSH key', submit: 'Generate key' }, [name.row, setDef.row], async (fn) => {
    const k = await api.post<SSHKey>('/api/local/ssh-keys/generate', { name: name.input.value.trim(), set_default: setDef.input.checked });
    fn.ok(`Generated ${k.name}.`);
    name.input.value = '';
    await load();
  });
  void load();
  return card('SSH keys', h('p', null, 'Machines trust the default key when they join. Downloading a private key asks you to confirm who you are.'),
    n.el, body, stepUp, h('h3', null, 'New key'), gen.form);
}

function banTool(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  const maxRetry = field('Failures before a ban', { type: 'number', min: 1, max: 1000, required: true });
  const findTime = field('Within (seconds)', { type: 'number', min: 10, required: true });
  const banTime = field('Ban for (seconds)', { type: 'number', min: 10, required: true });
  const cfg = form({ label: 'Ban settings', submit: 'Save settings', className: 'stack inline' }, [maxRetry.row, findTime.row, banTime.row], async (fn) => {
    fn.ok((await api.put<Message>('/api/security/banner/config', {
      max_retry: Number(maxRetry.input.value), find_time: Number(findTime.input.value), ban_time: Number(banTime.input.value),
    })).message || 'Saved.');
  });
  const wlIp = field('Address or network', { type: 'text', placeholder: '203.0.113.0/24', required: true, autocomplete: 'off' });
  const wl = form({ label: 'Never ban', submit: 'Add', className: 'stack inline' }, [wlIp.row], async () => {
    await api.post<Message>('/api/security/banner/whitelist', { ip: wlIp.input.value.trim() });
    wlIp.input.value = '';
    await load();
  });
  const setup = h('button', { type: 'button', class: 'secondary' }, 'Set up the ban tool');
  setup.addEventListener('click', () => void busy(setup, n, async () => {
    n.ok((await api.post<Message>('/api/local/setup-banner')).message + ' Progress shows in the Overview log.');
  }));
  const load = () => busy([], n, async () => {
    const s = await api.get<BanStatus>('/api/security/banner');
    const yes = (b: boolean) => h('span', { class: `badge ${b ? 'good' : 'warn'}` }, b ? 'yes' : 'no');
    const jails = table(['Jail', 'Failed now', 'Banned now', 'Banned addresses'], (s.jails ?? []).map((j) => [
      j.name, j.currently_failed ?? 0, j.currently_banned ?? 0,
      h('div', { class: 'row-actions' }, (j.banned ?? []).map((ip) => {
        const b = h('button', { type: 'button', class: 'secondary small', 'aria-label': `Unban ${ip}` }, `${ip} ✕`);
        b.addEventListener('click', () => void busy(b, n, async () => {
          n.ok((await api.post<Message>('/api/security/banner/unban', { jail: j.name, ip })).message);
          await load();
        }));
        return b;
      })),
    ]), 'No jails reported.');
    const whitelist = table(['Never banned', ''], (s.whitelist ?? []).map((ip) => {
      const rm = h('button', { type: 'button', class: 'danger small' }, 'Remove');
      rm.addEventListener('click', () => void busy(rm, n, async () => {
        await api.del<Message>(`/api/security/banner/whitelist/${encodeURIComponent(ip)}`);
        await load();
      }));
      return [ip, rm];
    }), 'No addresses are exempt.');
    if (s.config) {
      maxRetry.input.value = String(s.config.max_retry);
      findTime.input.value = String(s.config.find_time);
      banTime.input.value = String(s.config.ban_time);
    }
    clear(body,
      h('dl', { class: 'kv' }, h('dt', null, 'Installed'), h('dd', null, yes(s.installed)), h('dt', null, 'Running'), h('dd', null, yes(s.running)),
        h('dt', null, 'Managed by tunnelsvc'), h('dd', null, yes(s.managed))),
      h('div', { class: 'actions' }, setup), h('h3', null, 'Jails'), jails, h('h3', null, 'Exempt addresses'), whitelist);
  });
  void load();
  return card('Ban tool', n.el, body, h('h3', null, 'Add an exempt address'), wl.form, h('h3', null, 'Settings'), cfg.form);
}

function firewall(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  const mode = select('Mode', [['svc', 'tunnelsvc manages its own nftables table'], ['manual', 'I manage the firewall myself'], ['none', 'No firewall']]);
  const f = form({ label: 'Firewall mode', submit: 'Apply', className: 'stack inline' }, [mode.row], async (fn) => {
    const r = await api.post<Message>('/api/local/firewall/configure', { mode: mode.input.value });
    fn.ok(r.message + (mode.input.value === 'svc' ? ' Progress shows in the Overview log.' : ''));
    await load();
  });
  const load = () => busy([], n, async () => {
    const d = await api.get<FirewallDetection>('/api/local/firewall/detect');
    const tool = (name: string, installed?: boolean, active?: boolean | string) =>
      [name, installed ? 'installed' : 'not installed', active === undefined ? '—' : String(active)];
    if (d.mode) mode.input.value = d.mode;
    clear(body,
      h('p', null, 'Current mode: ', h('strong', null, d.mode ?? 'unknown')),
      table(['Tool', 'Installed', 'Active / rules'], [
        tool('nftables', d.nftables?.installed, (d.nftables?.tables ?? []).join(', ') || 'no tables'),
        tool('ufw', d.ufw?.installed, d.ufw?.active),
        tool('firewalld', d.firewalld?.installed, d.firewalld?.active),
        tool('iptables', d.iptables?.installed, `${d.iptables?.rules ?? 0} rules, ${d.iptables?.ipv6_rules ?? 0} IPv6`),
      ], ''),
      (d.notes ?? []).length ? h('ul', { class: 'muted' }, (d.notes ?? []).map((x) => h('li', null, x))) : null);
  });
  void load();
  return card('Firewall', n.el, body, f.form);
}

function auditLog(ctx: Ctx): HTMLElement {
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  const refresh = h('button', { type: 'button', class: 'secondary' }, 'Refresh');
  const load = () => busy(refresh, n, async () => {
    const entries = (await ctx.api.get<AuditEntry[]>('/api/security/logs')) ?? [];
    clear(body, table(['Time', 'Event', 'Client', 'Detail'],
      entries.map((e) => [fmtTime(e.created_at), e.kind, e.client_addr ?? '—', e.detail ?? '']), 'No events yet.'));
  });
  refresh.addEventListener('click', () => void load());
  void load();
  return card('Audit log', h('div', { class: 'actions end' }, refresh), n.el, h('div', { class: 'scroll' }, body));
}
