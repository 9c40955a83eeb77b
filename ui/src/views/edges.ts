// Edges: the VPSes of this cluster (daemons sharing one PostgreSQL
// database), whether each answers, which machines each one has (a machine
// × edge grid), adding an edge with a one-time command, and retiring one.
// An edge's status comes from the time it last reported, so the page asks
// again every 10 s besides the pushed changes.
import type { Edge, EdgeToken, Machine, MachineEdge, Message } from '../api';
import type { Ctx, View } from '../ctx';
import { ask } from '../dialog';
import { badge, busy, card, clear, copyBox, fmtTime, form, h, notice, refill, rowButton, table, time, type Child } from '../dom';
import { emit } from '../live';
import { dismiss, getSecret, keep } from '../secrets';
import { statusBadge } from './machines';
import { reason } from '../words';

const POLL = 10_000;

export function edgeBadge(e: Edge): HTMLElement {
  return badge(e.status, e.status === 'up' ? 'good' : e.status === 'down' ? 'bad' : 'warn');
}

/** A machine as one edge sees it. */
export function machineEdgeBadge(e: MachineEdge): HTMLElement {
  return badge(e.status === 'edge_down' ? 'edge down' : e.status, e.status === 'online' ? 'good' : e.status === 'offline' ? 'bad' : 'warn');
}

function edgesTable(ctx: Ctx, es: Edge[]): HTMLElement {
  return table([['Edge', 'c-main'], ['Status', 'c-state'], ['Last seen', 'c-seen'], 'Version', ['', 'c-actions']], es.map((e) => {
    // Not itself (another edge retires it), not the only one, not twice.
    const retire = !e.this && es.length > 1 && e.status !== 'retiring' ? rowButton('Retire', e.name, () => void ask({
      title: `Retire ${e.name}?`,
      body: [h('p', null, `Every machine drops ${e.name} from its tunnel clients; once none is connected through it, it is forgotten.`),
        h('p', null, `Then remove the package on that VPS and take ${e.address || 'its address'} out of your DNS records.`)],
      confirm: `Retire ${e.name}`, danger: true,
      action: async () => {
        await ctx.api.del<Message>(`/api/edges/${e.id}`);
        emit('edges');
      },
    }), 'danger small') : null;
    return [
      h('div', { class: 'main-cell' }, h('span', { class: 'name' }, e.name), e.this ? [' ', badge('this edge', '')] : null,
        h('div', { class: 'muted small' }, e.address || 'no public address yet')),
      h('div', { class: 'state' }, edgeBadge(e), hostParts(e)),
      time(e.last_seen), h('div', null, e.version || h('span', { class: 'muted' }, '—'),
        e.tunnel_version ? h('div', { class: 'muted small' }, `tunnel server: frp ${e.tunnel_version}`) : null),
      h('div', { class: 'row-actions' }, retire)];
  }), 'No edge has reported yet.', 'Edges', 'data-table');
}

/** The parts of an edge's host that are not as desired, in words:
 * "Caddy config pending since 12:03: <the tool's words>"; or that all are. */
function hostParts(e: Edge): Child {
  const pending = (e.parts ?? []).filter((p) => p.drifted);
  if (!(e.parts ?? []).length) return null;
  if (!pending.length) return h('div', { class: 'muted small' }, 'host as desired');
  return h('div', null, ...pending.map((p) => h('div', { class: 'bad-text small', role: 'status' },
    `${e.name}: ${p.label} pending`, p.pending_since ? [' since ', time(p.pending_since)] : null,
    reason(p.error ? `: ${p.error}` : '', 'bad-text small'))));
}

/** Rows of machines, a column per edge: what each edge sees of each. */
function gridTable(es: Edge[], ms: Machine[]): HTMLElement {
  return table(['Machine', ...es.map((e) => e.name)], ms.map((m) => [
    h('div', null, h('a', { href: `#/machines/${m.id}` }, m.name), ' ', statusBadge(m)),
    ...es.map((e): Child => {
      const seen = m.edges?.find((x) => x.edge_id === e.id);
      if (!seen) return h('span', { class: 'muted' }, 'never connected');
      return h('div', { class: 'state' }, machineEdgeBadge(seen), seen.last_seen ? h('div', { class: 'muted small' }, 'seen ', time(seen.last_seen)) : null);
    })]), 'No machines yet.', 'Machines on each edge');
}

function addCard(ctx: Ctx): HTMLElement {
  const out = h('div', { hidden: true });
  const show = (t: EdgeToken) => {
    const hide = h('button', { type: 'button', class: 'secondary small' }, 'Dismiss the command');
    hide.addEventListener('click', () => {
      dismiss('edge-join');
      clear(out);
      out.hidden = true;
      f.submit.focus();
    });
    clear(out,
      h('p', null, 'Run this as root on the new VPS, after installing the tunnelsvc package there. The token works once, until ', fmtTime(t.expires_at), '.'),
      copyBox(t.command, 'Copy the edge join command'),
      t.warning ? h('p', { class: 'callout', role: 'alert' }, t.warning) : null,
      h('p', { class: 'muted small' }, 'The new edge shows up above once it has joined.'),
      h('div', { class: 'actions' }, hide));
    out.hidden = false;
  };
  const f = form({ label: 'Add an edge', submit: 'Create an edge join command', className: 'stack inline' }, [], async () => {
    const t = await ctx.api.post<EdgeToken>('/api/edges/tokens');
    keep({ key: 'edge-join', route: 'edges', what: 'the edge join command', data: { token: t } });
    show(t);
  });
  const again = getSecret('edge-join');
  if (again) show(again.data.token as EdgeToken);
  return card('Add an edge',
    h('p', null, 'An edge is another VPS with the tunnelsvc package, sharing this cluster\'s PostgreSQL database. ',
      'Every machine connects to every edge, so machines stay reachable while one edge is down. ',
      'Point ', h('code', null, '*.<domain>'), ' and ', h('code', null, 'router.<domain>'), ' at every edge.'),
    f.form, out);
}

export const edgesView: View = (root, ctx) => {
  const n = notice();
  const list = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const grid = h('div');
  let poll: number | undefined;
  const load = () => busy([], n, async () => {
    const [es, ms] = await Promise.all([ctx.api.get<Edge[]>('/api/edges'), ctx.api.get<Machine[]>('/api/machines')]);
    refill(list, edgesTable(ctx, es ?? []));
    refill(grid, gridTable(es ?? [], ms ?? []));
  }).finally(() => {
    clearTimeout(poll);
    poll = window.setTimeout(() => { if (root.isConnected) void load(); }, POLL);
  });
  clear(root, h('h1', null, 'Edges'), n.el,
    card('Edges', h('p', { class: 'muted' }, 'The VPSes of this cluster. An edge is up while it reports every few seconds.'), list),
    card('Machines on each edge', h('p', { class: 'muted' }, 'A machine is online while at least one edge that is up has it.'), grid),
    addCard(ctx));
  ctx.sub(['edges', 'machines', 'host_parts'], () => void load());
  void load();
  return () => clearTimeout(poll);
};
