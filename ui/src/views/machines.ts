// Machines: bootstrap tokens (the one-line join command), the machines that
// joined, and their tunnels.
import type { BootstrapToken, Machine, Message, Tunnel } from '../api';
import type { View } from '../ctx';
import { busy, card, checkbox, clear, copyText, field, fmtTime, form, h, notice, select, table } from '../dom';
import { loadTraffic, trafficCell, type TrafficHistory } from './monitoring';

export const machinesView: View = (root, ctx) => {
  const api = ctx.api;
  let machines: Machine[] = [];
  let traffic: TrafficHistory | null = null;

  // Bootstrap tokens.
  const expiry = field('Valid for (minutes)', { type: 'number', min: 1, max: 10080, value: 60, required: true });
  const commandBox = h('div', { class: 'command', hidden: true });
  const tokensBody = h('div');
  const tokensNotice = notice();
  const tokenForm = form({ label: 'Create a bootstrap token', submit: 'Create bootstrap token', className: 'stack inline' }, [expiry.row], async () => {
    const t = await api.post<BootstrapToken>('/api/bootstrap/tokens', { expires_in_minutes: Number(expiry.input.value) });
    const code = h('code', { class: 'cmd', tabindex: 0 }, t.command ?? t.token ?? '');
    const copied = h('span', { class: 'muted', role: 'status' });
    const copy = h('button', { type: 'button', class: 'secondary' }, 'Copy');
    copy.addEventListener('click', async () => {
      copied.textContent = (await copyText(code.textContent ?? '', code)) ? 'Copied.' : 'Selected; press Ctrl+C to copy.';
    });
    clear(commandBox,
      h('p', null, 'Run this on the machine that should join (the token works once, until ', fmtTime(t.expires_at), '):'),
      h('pre', null, code), h('div', { class: 'actions' }, copy, copied),
      // The daemon knows no address machines can reach; it says what to set.
      t.warning ? h('p', { class: 'callout', role: 'alert' }, t.warning) : null);
    commandBox.hidden = false;
    void loadTokens();
  });
  const loadTokens = () => busy([], tokensNotice, async () => {
    const ts = await api.get<BootstrapToken[]>('/api/bootstrap/tokens');
    clear(tokensBody, table(['Token', 'Created', 'Expires', ''], (ts ?? []).map((t) => {
      const b = h('button', { type: 'button', class: 'danger small' }, 'Revoke');
      b.addEventListener('click', () => void busy(b, tokensNotice, async () => {
        await api.del<Message>(`/api/bootstrap/tokens/${t.id}`);
        await loadTokens();
      }));
      return [`#${t.id}`, fmtTime(t.created_at), fmtTime(t.expires_at), b];
    }), 'No unused tokens.'));
  });

  // Machines.
  const machinesBody = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const machinesNotice = notice();
  const loadMachines = () => busy([], machinesNotice, async () => {
    [machines, traffic] = await Promise.all([api.get<Machine[]>('/api/machines').then((ms) => ms ?? []), loadTraffic(ctx)]);
    clear(machinesBody, table(['Name', 'Status', 'User', 'Tunnel port', 'Last seen', 'Traffic (24 h)', ''], machines.map((m) => {
      const rename = h('button', { type: 'button', class: 'secondary small' }, 'Rename');
      const del = h('button', { type: 'button', class: 'danger small' }, 'Delete');
      rename.addEventListener('click', () => {
        const name = window.prompt(`New name for ${m.name}`, m.name);
        if (!name || name === m.name) return;
        void busy([rename, del], machinesNotice, async () => {
          await api.patch<Machine>(`/api/machines/${m.id}`, { name });
          await loadMachines();
        });
      });
      del.addEventListener('click', () => {
        if (!window.confirm(`Delete ${m.name}, its tunnels and its credentials?`)) return;
        void busy([rename, del], machinesNotice, async () => {
          await api.del<Message>(`/api/machines/${m.id}`);
          await Promise.all([loadMachines(), loadTunnels()]);
        });
      });
      return [m.name, h('span', { class: `badge ${m.status === 'online' ? 'good' : m.status === 'offline' ? 'bad' : 'warn'}` }, m.status),
        m.username, m.tunnel_port ?? '—', fmtTime(m.last_seen), trafficCell(traffic?.machines[m.id]), h('div', { class: 'row-actions' }, rename, del)];
    }), 'No machines yet: create a bootstrap token and run its command on a machine.'));
    fillMachineSelect();
  });

  // Tunnels.
  const tunnelsBody = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const tunnelsNotice = notice();
  const loadTunnels = () => busy([], tunnelsNotice, async () => {
    const ts = (await api.get<Tunnel[]>('/api/tunnels')) ?? [];
    const nameOf = (id: number) => machines.find((m) => m.id === id)?.name ?? `#${id}`;
    clear(tunnelsBody, table(['Name', 'Machine', 'Kind', 'Local port', 'Exposed as', 'Status', 'Traffic (24 h)', ''], ts.map((t) => {
      const del = h('button', { type: 'button', class: 'danger small' }, 'Delete');
      del.addEventListener('click', () => {
        if (!window.confirm(`Delete tunnel ${t.name}?`)) return;
        void busy(del, tunnelsNotice, async () => {
          await api.del<Message>(`/api/tunnels/${t.id}`);
          await loadTunnels();
        });
      });
      const exposed = t.kind === 'http' ? (t.subdomain ?? '—') : `port ${t.remote_port ?? '?'}${t.public ? ' (public)' : ''}`;
      return [t.name, nameOf(t.machine_id), t.kind, t.local_port, exposed, t.status ?? '—', trafficCell(traffic?.tunnels[t.id]), del];
    }), 'No tunnels yet.'));
  });

  const machineSel = select('Machine', [], { required: true });
  const fillMachineSelect = () => {
    const cur = machineSel.input.value;
    clear(machineSel.input, machines.map((m) => h('option', { value: m.id }, m.name)));
    if (cur) machineSel.input.value = cur;
    tunnelForm.form.hidden = machines.length === 0;
    noMachines.hidden = machines.length > 0;
  };
  const noMachines = h('p', { class: 'muted', hidden: true }, 'Tunnels belong to a machine: add a machine first.');
  const tName = field('Name', { type: 'text', required: true, autocomplete: 'off', pattern: '[A-Za-z0-9-]+' }, 'A hostname label, unique per machine.');
  const kind = select('Kind', [['http', 'HTTP (via the web proxy)'], ['tcp', 'TCP (a remote port)']]);
  const port = field('Local port', { type: 'number', min: 1, max: 65535, required: true });
  const sub = field('Subdomain', { type: 'text', autocomplete: 'off' }, 'HTTP only: the name under your domain.');
  const pub = checkbox('Public (TCP only: listen on all addresses)');
  const syncKind = () => {
    const http = kind.input.value === 'http';
    sub.row.hidden = !http;
    pub.row.hidden = http;
  };
  kind.input.addEventListener('change', syncKind);
  syncKind();
  const tunnelForm = form({ label: 'Create a tunnel', submit: 'Create tunnel' },
    [machineSel.row, tName.row, kind.row, port.row, sub.row, pub.row], async (n) => {
      const http = kind.input.value === 'http';
      const body: Record<string, unknown> = {
        machine_id: Number(machineSel.input.value), name: tName.input.value.trim(), kind: kind.input.value,
        local_port: Number(port.input.value), public: !http && pub.input.checked,
      };
      if (http) body.subdomain = sub.input.value.trim();
      const t = await api.post<Tunnel>('/api/tunnels', body);
      n.ok(`Tunnel ${t.name} created.`);
      await loadTunnels();
    });

  clear(root,
    h('h1', null, 'Machines'),
    card('Add a machine',
      h('p', null, 'A bootstrap token lets one machine join with a single command.'),
      tokenForm.form, commandBox, h('h3', null, 'Unused tokens'), tokensNotice.el, tokensBody),
    card('Machines', machinesNotice.el, machinesBody),
    card('Tunnels', tunnelsNotice.el, tunnelsBody, h('h3', null, 'New tunnel'), noMachines, tunnelForm.form));
  void loadTokens();
  void loadMachines().then(() => loadTunnels());
};
