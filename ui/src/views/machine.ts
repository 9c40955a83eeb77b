// One machine: its status and why it is not online, the SSH command for
// it, its agent, its tunnels and its activity. Renamed in place; every view
// that shows the name follows (the rename is pushed to them).
import { loadTraffic } from './monitoring';
import { ApiError, describeError, unwrap, type ActivityEvent, type AgentStatus, type Machine, type Message, type SSHKey, type Tunnel } from '../api';
import type { View } from '../ctx';
import { ask } from '../dialog';
import { badge, type Child, busy, card, clear, copyBox, field, fmtTime, form, h, notice, refill, saveFile, table, time } from '../dom';
import { emit } from '../live';
import { statusBadge } from './machines';
import { machineEdgeBadge } from './edges';
import { reason } from '../words';
import { newTunnelForm, tunnelsTable } from './tunnels';
import { known } from '../fleet';
import { followUpdate, progress, updateButton, updateState } from './update';
import { speedTestCard } from './speedtest';

/** Where the SSH command expects the downloaded private key. */
const KEY_FILE = '~/.ssh/tunnel_id_rsa';

export const machineView: View = (root, ctx, params) => {
  const id = Number(params[0]);
  const api = ctx.api;
  let m: Machine | null = null;
  let tunnelIds = new Set<number>();

  const heading = h('h1', null, 'Machine');
  const renameBox = h('div', { class: 'rename' });
  const n = notice();
  const statusBody = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const sshBody = h('div');
  const agentBody = h('div', null, h('p', { class: 'muted' }, 'Asking the agent…'));
  const agentNotice = notice();
  const tunnelsNotice = notice();
  const tunnelsBody = h('div');
  const activityBody = h('div');
  const softBody = h('div');
  const softNotice = notice();
  const updating = progress();
  const speed = speedTestCard(ctx, id);

  const renameButton = h('button', { type: 'button', class: 'secondary small' }, 'Rename');
  const showRename = () => {
    if (!m) return;
    const name = field('New name', { type: 'text', name: 'name', required: true, maxlength: 64, autocomplete: 'off', value: m.name },
      'Unique among your machines, up to 64 characters.');
    const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
    const f = form({ label: `Rename ${m.name}`, submit: 'Save name', className: 'stack inline' }, [name.row], async () => {
      const v = name.input.value.trim();
      if (v !== m?.name) {
        m = await api.patch<Machine>(`/api/machines/${id}`, { name: v });
        emit('machines');
      }
      clear(renameBox);
      renameButton.hidden = false;
      renderMachine();
      renameButton.focus();
    });
    cancel.addEventListener('click', () => { clear(renameBox); renameButton.hidden = false; renameButton.focus(); });
    f.submit.after(cancel);
    clear(renameBox, f.form);
    renameButton.hidden = true;
    name.input.select();
    name.input.focus();
  };
  renameButton.addEventListener('click', showRename);

  const renderMachine = () => {
    if (!m) return;
    ctx.title(m.name);
    renameButton.setAttribute('aria-label', `Rename ${m.name}`);
    refill(statusBody,
      h('div', { class: 'status-line state' }, statusBadge(m), reason(m.status_reason)),
      h('dl', { class: 'kv' },
        // Online means connected now: "last seen" is for a machine that is not.
        h('dt', null, 'Last seen'), h('dd', null, m.status === 'online' ? 'now (connected)'
          : m.last_seen ? [time(m.last_seen), ` (${fmtTime(m.last_seen)})`] : 'never connected'),
        h('dt', null, 'Joined'), h('dd', null, fmtTime(m.created_at), m.client_addr ? ` from ${m.client_addr}` : ''),
        h('dt', null, 'User'), h('dd', null, m.username),
        h('dt', null, 'SSH tunnel port'), h('dd', null, m.tunnel_port ?? '—'),
        h('dt', null, 'Config'), h('dd', { 'data-config-state': m.config?.state ?? '' }, configLine(m)),
        (m.serves?.length ?? 0) > 0 ? [h('dt', null, 'Also serves'), h('dd', null, h('ul', { class: 'serves' }, (m.serves ?? []).map((p) =>
          h('li', { 'data-serves': p.tunnel_name }, h('a', { href: `#/tunnels` }, p.tunnel_name), p.url ? ` (${p.url})` : '',
            ` from port ${p.local_port}: ${p.status}`, p.health.state !== 'unknown' ? `, ${p.health.state}` : ''))))] : null,
        m.transport ? [h('dt', null, 'Transport'), h('dd', { 'data-transport': m.transport.seen || m.transport.configured },
          m.transport.configured === 'wss' ? h('strong', null, 'Port 443 ') : 'Direct ', h('span', { class: 'muted small' }, m.transport.summary))] : null,
        // Several edges: what each one sees of the machine.
        (m.edges?.length ?? 0) > 1 ? [h('dt', null, 'Edges'), h('dd', null, h('ul', { class: 'edge-list' }, (m.edges ?? []).map((e) =>
          h('li', null, e.edge, ' ', machineEdgeBadge(e), e.last_seen ? [' ', h('span', { class: 'muted small' }, 'seen ', time(e.last_seen))] : null))))] : null,
        m.agent_outdated ? [h('dt', null, 'Agent'), h('dd', { class: 'bad-text' },
          'outdated (it predates signed requests): run bootstrap.sh on the machine again to get signed requests, the config allow-list and frpc as an unprivileged user')] : null));
    renderSoftware(m);
    if (m.ssh_command) {
      // The machine trusts one of this server's keys: ssh needs its
      // private half, downloaded as tunnel_id_rsa.
      const cmd = m.ssh_command.replace(/^ssh /, `ssh -i ${KEY_FILE} `);
      const key = keys.find((k) => k.id === m?.ssh_key_id);
      refill(sshBody,
        h('p', null, m.ssh_direct ? 'Its SSH port is public, so you connect directly:'
          : 'Its SSH port is open only on the VPS, so you hop through the VPS (ProxyJump):'),
        copyBox(cmd, `Copy the SSH command for ${m.name}`),
        h('p', { class: 'small' }, 'It logs in with the key ', key ? h('strong', null, key.name) : 'the machine was given when it joined',
          ': download its private key on ', h('a', { href: '#/security/keys' }, 'Security → SSH keys'),
          ', save it as ', h('code', null, KEY_FILE), ' and make it private (', h('code', null, `chmod 600 ${KEY_FILE}`), ').'));
    } else {
      clear(sshBody, h('p', { class: 'muted' }, 'This daemon does not say how to reach the machine by SSH.'));
    }
  };

  // What the machine runs and whether it runs the server's bundle.
  const renderSoftware = (m: Machine) => {
    const u = m.update;
    const v = (x?: string) => x || h('span', { class: 'muted' }, 'not reported yet');
    const failed = u?.state === 'failed' || u?.state === 'rolled_back';
    const update = updateButton(ctx, m, softNotice, false);
    const state = updateState(m);
    followUpdate(softNotice, [m], true);
    updating.show(u?.state === 'updating');
    refill(softBody,
      h('dl', { class: 'kv' },
        h('dt', null, 'Agent'), h('dd', null, v(m.agent_version)),
        h('dt', null, 'Tunnel client'), h('dd', null, v(m.client_version)),
        h('dt', null, 'Bundle'), h('dd', null, v(m.bundle_version)),
        h('dt', null, 'Update'), h('dd', { class: 'state' }, u && known(m) ? [h('div', null, state[0], u.at ? [' ', time(u.at), ` (${fmtTime(u.at)})`] : null), state[2]]
          : h('span', { class: 'muted' }, u ? 'this server has no machine bundle to update to' : 'this daemon does not update machines'))),
      failed && u?.error ? h('p', { class: 'bad-text why' }, `${u.state === 'rolled_back' ? 'Rolled back' : 'Failed'}: ${u.error}`) : null,
      u?.state === 'unsupported' ? rejoin(m) : null,
      update ? h('div', { class: 'actions' }, update) : null);
  };

  let keys: SSHKey[] = [];
  const loadKeys = () => api.get<SSHKey[]>('/api/local/ssh-keys').then((ks) => { keys = ks ?? []; renderMachine(); }, () => {});
  // Live events can start a load while another runs, and answers can
  // arrive out of order: only the latest load's answer is shown.
  let loads = 0;
  const loadMachine = () => busy([], n, async () => {
    const mine = ++loads;
    try {
      const got = await api.get<Machine>(`/api/machines/${id}`);
      if (mine !== loads) return;
      m = got;
    } catch (e) {
      if (mine !== loads) return;
      if (e instanceof ApiError && e.status === 404) {
        m = null;
        ctx.title('Machine not found');
        clear(root, heading, h('p', null, 'This machine does not exist (any more). ', h('a', { href: '#/machines' }, 'Back to the machines')));
        return;
      }
      throw e;
    }
    renderMachine();
  });

  // While the agent does not answer, the tunnel client cannot be
  // restarted: the button says so instead of failing with the same words.
  const restart = h('button', { type: 'button', class: 'secondary', disabled: true }, 'Restart tunnel client');
  const restartWhy = h('p', { id: `agent-why-${id}`, class: 'muted small', hidden: true },
    'The agent does not answer, so the tunnel client cannot be restarted from here.');
  const unreachable = (e: unknown) => {
    refill(agentBody, h('div', { class: 'state' }, badge('not reachable', 'warn'), reason(describeError(e))));
    restart.disabled = true;
    restartWhy.hidden = false;
    restart.setAttribute('aria-describedby', restartWhy.id);
  };
  // Only an online machine's agent can answer (through its tunnel): an
  // offline one is said so without asking.
  const loadAgent = () => busy([], agentNotice, async () => {
    if (m && m.status !== 'online') {
      refill(agentBody, h('div', { class: 'state' }, badge('not reachable', 'warn'),
        h('span', { class: 'why' }, m.status === 'pending' ? 'The machine has not connected yet.' : 'The machine is offline.')));
      restart.disabled = true;
      restartWhy.textContent = `The machine is ${m.status === 'pending' ? 'not connected yet' : 'offline'}, so the tunnel client cannot be restarted from here.`;
      restartWhy.hidden = false;
      restart.setAttribute('aria-describedby', restartWhy.id);
      return;
    }
    restartWhy.textContent = 'The agent does not answer, so the tunnel client cannot be restarted from here.';
    try {
      const s = await api.get<AgentStatus>(`/api/machines/${id}/agent/status`, { timeout: 25_000 });
      const up = s.active_state === 'active';
      refill(agentBody, h('dl', { class: 'kv' },
        h('dt', null, 'Tunnel client'), h('dd', null, badge(`${s.active_state ?? '?'} (${s.sub_state ?? '?'})`, up ? 'good' : 'bad')),
        s.uptime_seconds !== undefined ? [h('dt', null, 'Running for'), h('dd', null, `${Math.round(s.uptime_seconds / 60)} min`)] : null,
        h('dt', null, 'Versions'), h('dd', null, `agent ${s.agent_version ?? '?'}, tunnel client ${s.revtunnel_client_version ?? '?'}`)));
      restart.disabled = false;
      restartWhy.hidden = true;
      restart.removeAttribute('aria-describedby');
    } catch (e) {
      if (!(e instanceof ApiError) || e.status !== 502) {
        restart.disabled = false;
        throw e;
      }
      unreachable(e);
    }
  });
  restart.addEventListener('click', () => void busy(restart, agentNotice, async () => {
    try {
      agentNotice.ok((await api.post<Message>(`/api/machines/${id}/agent/restart-tunnel`, undefined, { timeout: 25_000 })).message || 'Restarted.');
    } catch (e) {
      // The agent stopped answering: said once, in the agent's state.
      if (!(e instanceof ApiError) || e.status !== 502) throw e;
      unreachable(e);
      return;
    }
    window.setTimeout(() => void loadAgent(), 3000);
  }).then(() => { if (!restartWhy.hidden) restart.disabled = true; }));

  // The tunnel client's config as the daemon renders it now
  // (GET /api/machines/{id}/revtunnel-client): what the machine should run.
  const config = h('button', { type: 'button', class: 'secondary' }, 'Download its client config');
  config.addEventListener('click', () => void busy(config, agentNotice, async () => {
    const res = await api.send('GET', `/api/machines/${id}/revtunnel-client`);
    if (!res.ok) await unwrap(res); // throws the server's message
    saveFile(`${m?.name ?? `machine-${id}`}-client.toml`, await res.text(), 'text/plain');
    agentNotice.ok('Downloaded the tunnel client config the machine should run. It holds the machine\'s credentials: keep it private.');
  }));

  const newTunnel = newTunnelForm(ctx, id);
  const loadTunnels = () => busy([], tunnelsNotice, async () => {
    const [ts0, traffic] = await Promise.all([api.get<Tunnel[]>(`/api/tunnels?machine_id=${id}`), loadTraffic(ctx)]);
    const ts = ts0 ?? [];
    tunnelIds = new Set(ts.map((t) => t.id));
    refill(tunnelsBody, tunnelsTable(ctx, ts, tunnelsNotice, false, [], traffic));
  });

  const loadActivity = () => busy([], n, async () => {
    const ev = ((await api.get<ActivityEvent[]>(`/api/local/activity?machine_id=${id}`)) ?? [])
      .filter((e) => e.machine_id === id || (e.tunnel_id != null && tunnelIds.has(e.tunnel_id)));
    refill(activityBody, table(['When', 'What'], ev.map((e) => [time(e.created_at), e.message ?? e.kind ?? '']), 'Nothing yet.', 'Activity'));
  });

  const del = h('button', { type: 'button', class: 'danger' }, 'Delete machine');
  del.addEventListener('click', () => {
    if (!m) return;
    const name = m.name;
    void ask({
      title: `Delete ${name}?`,
      body: h('p', null, `${name} loses its tunnels and its credentials; it must join again with a new token.`),
      confirm: `Delete ${name}`, danger: true,
      action: async () => {
        await api.del<Message>(`/api/machines/${id}`);
        emit('machines');
        ctx.go('machines');
      },
    });
  });

  clear(root,
    h('p', { class: 'crumbs' }, h('a', { href: '#/machines' }, 'Machines'), ' / '),
    h('div', { class: 'title-row' }, heading, renameButton), renameBox, n.el,
    card('Status', statusBody),
    card('SSH', sshBody),
    card('Agent', agentNotice.el, agentBody, h('div', { class: 'actions' }, restart, config), restartWhy),
    card('Software', softBody, updating.el, softNotice.el),
    speed.el,
    card('Tunnels', tunnelsNotice.el, tunnelsBody, h('h3', null, 'New tunnel'), newTunnel.el),
    card('Activity', activityBody),
    card('Danger zone', h('p', null, 'Deleting removes its tunnels and its credentials.'), del));
  ctx.sub(['machines'], () => {
    const was = m?.status;
    void loadMachine().then(() => { if (m && m.status !== was) void loadAgent(); });
  });
  ctx.sub(['tunnels', 'probes'], () => void loadTunnels().then(loadActivity));
  ctx.sub(['activity'], () => void loadActivity());
  void loadMachine().then(() => m && (void loadKeys(), loadAgent()));
  void loadTunnels().then(loadActivity);
  return () => { updating.stop(); speed.stop(); };
};

/** An agent too old to update itself: the one line that joins the
 * machine again, keeping what it is. */
function rejoin(m: Machine): Child {
  const keeps = 'It joins the machine again and keeps its id, name, ports and tunnels.';
  const line = m.update?.rejoin_command;
  if (line) {
    return h('div', null, h('p', null, `Its agent is too old to update itself. Run this one line on ${m.name}, as root; it installs the current agent and tunnel client. ${keeps}`),
      copyBox(line, `Copy the line to run on ${m.name}`));
  }
  return h('p', null, 'Its agent is too old to update itself. Run ', h('code', null, 'tunnelsvc machines outdated'),
    ` on the server: it prints the one line to run on ${m.name}. ${keeps}`);
}

/** "config applied (generation N)", or "pending since <time>: <why>". */
function configLine(m: Machine): Child {
  const c = m.config;
  if (!c) return 'not reported by this daemon';
  if (c.state === 'applied') return c.summary;
  const why = c.last_error || `delivering generation ${c.desired_generation}`;
  return h('span', { class: c.last_error ? 'bad-text' : '' }, 'pending since ',
    c.pending_since ? [fmtTime(c.pending_since), ' (', time(c.pending_since), ')'] : '?', `: ${why}`);
}
