// Machines: joining (a bootstrap token's one-line command, then waiting for
// the machine, whose page opens when it registers), pending tokens, and the
// machines with why they are not online.
import { loadTraffic, trafficCell, type TrafficHistory } from './monitoring';
import { filterBar } from '../filter';
import { pages } from '../pages';
import { ApiError, type BootstrapToken, type Machine, type MachinePage, type Message, type StaleTokenAttempt } from '../api';
import type { Ctx, View } from '../ctx';
import { ask } from '../dialog';
import { badge, busy, card, clear, copyBox, field, fmtTime, form, h, notice, refill, rowButton, table, time, type Child, type Notice } from '../dom';
import { dismiss, getSecret, keep } from '../secrets';
import { emit } from '../live';
import { reason } from '../words';
import { versionsLine } from '../fleet';
import { fleetBox, followUpdate, loadFleet, progress, updateAllButton, updateButton, updateState } from './update';

export function statusBadge(m: Machine): HTMLElement {
  return badge(m.status, m.status === 'online' ? 'good' : m.status === 'offline' ? 'bad' : 'warn');
}

/** The join command, then "waiting for the machine to join…" until the
 * token is used; then the new machine's page. The command is kept (see
 * secrets.ts) until it is dismissed, used or expired, so leaving the page
 * does not lose it. */
function joinCard(ctx: Ctx): HTMLElement {
  const label = field('Label', { type: 'text', name: 'label', maxlength: 64, autocomplete: 'off', placeholder: 'e.g. office NAS' },
    'Optional: which machine this is for.');
  const minutes = field('Valid for (minutes)', { type: 'number', name: 'expires_in_minutes', min: 1, max: 10080, value: 60, required: true },
    { invalid: 'From 1 minute to 7 days (10080).' });
  const out = h('div', { hidden: true });
  let stopWaiting = () => {};
  const show = (t: BootstrapToken, resumed: boolean) => {
    const waiting = h('p', { class: 'waiting', role: 'status' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'Waiting for the machine to join…');
    const hide = h('button', { type: 'button', class: 'secondary small' }, 'Dismiss the command');
    hide.addEventListener('click', () => {
      dismiss('join');
      stopWaiting();
      clear(out);
      out.hidden = true;
      label.input.focus();
    });
    clear(out,
      h('p', null, 'Run this on the machine that should join. The token works once, until ', fmtTime(t.expires_at), '.'),
      copyBox(t.command ?? t.token ?? '', 'Copy the join command'),
      // The daemon knows no address machines can reach; it says what to set.
      t.warning ? h('p', { class: 'callout', role: 'alert' }, t.warning) : null,
      waiting, h('div', { class: 'actions' }, hide));
    out.hidden = false;
    stopWaiting();
    stopWaiting = follow(ctx, t, waiting, resumed);
  };
  const f = form({ label: 'Create a bootstrap token', submit: 'Create bootstrap token', className: 'stack inline' }, [label.row, minutes.row], async () => {
    // The daemon makes the token even when it answers late (a frozen
    // daemon, once it resumes): the answer is waited for, however late,
    // so its one-time command is shown and not lost.
    const t = await ctx.api.post<BootstrapToken>('/api/bootstrap/tokens', {
      expires_in_minutes: Number(minutes.input.value), label: label.input.value.trim() || undefined,
    }, { timeout: 5 * 60_000 });
    emit('tokens');
    keep({ key: 'join', route: 'machines', what: `the join command ${t.label ? `for ${t.label}` : 'for a new machine'}`, data: { token: t } });
    show(t, false);
  });
  const again = getSecret('join');
  if (again) show(again.data.token as BootstrapToken, true);
  return card('Add a machine', h('p', null, 'A bootstrap token lets one machine join with a single command.'), f.form, out);
}

// Asks about the token whenever machines or tokens change (pushed), and
// every 5 s in case a push was missed, until it is used or expired. When
// it is used the new machine's page opens, unless it was used while the
// operator was elsewhere: then a link says so.
function follow(ctx: Ctx, t: BootstrapToken, status: HTMLElement, resumed: boolean): () => void {
  let done = false;
  let timer: number | undefined;
  const end = (text: Child[]) => {
    done = true;
    dismiss('join');
    clear(status, ...text);
  };
  const check = async () => {
    if (done || !status.isConnected) return;
    try {
      const cur = await ctx.api.get<BootstrapToken>(`/api/bootstrap/tokens/${t.id}`);
      if (cur.state === 'used' && cur.machine_id) {
        if (!resumed) {
          done = true;
          dismiss('join');
          ctx.go(`machines/${cur.machine_id}`);
          return;
        }
        end(['A machine joined with this command: ', h('a', { href: `#/machines/${cur.machine_id}` }, 'open its page'), '.']);
        return;
      }
      if (cur.state === 'expired' || new Date(t.expires_at).getTime() < Date.now()) {
        end(['The token expired before a machine joined; create a new one.']);
        return;
      }
      resumed = false;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) {
        end(['The token was revoked.']);
        return;
      }
    }
    clearTimeout(timer);
    timer = window.setTimeout(() => void check(), 5000);
  };
  ctx.sub(['machines', 'tokens'], () => void check());
  timer = window.setTimeout(() => void check(), resumed ? 0 : 5000);
  return () => { done = true; clearTimeout(timer); };
}

function tokensCard(ctx: Ctx): HTMLElement {
  const n = notice();
  const body = h('div');
  const load = () => busy([], n, async () => {
    const ts = (await ctx.api.get<BootstrapToken[]>('/api/bootstrap/tokens')) ?? [];
    refill(body, table(['Label', 'Created', 'Expires', ''], ts.map((t) => {
      const name = t.label || `token #${t.id}`;
      const revoke = rowButton('Revoke', name, () => void ask({
        title: `Revoke ${name}?`, body: h('p', null, 'Its join command stops working at once.'),
        confirm: `Revoke ${name}`, danger: true,
        action: async () => {
          await ctx.api.del<Message>(`/api/bootstrap/tokens/${t.id}`);
          emit('tokens');
        },
      }), 'danger small');
      return [t.label || h('span', { class: 'muted' }, `#${t.id} (no label)`), time(t.created_at), time(t.expires_at), revoke];
    }), 'No pending tokens.', 'Pending tokens'));
  });
  ctx.sub(['tokens'], () => void load());
  void load();
  return card('Pending tokens', n.el, body);
}

// The machine list, a page at a time (pages.ts): the server searches and
// filters, and a fleet of thousands is read as it scrolls.
function machinesCard(ctx: Ctx, stops: (() => void)[]): HTMLElement {
  const n = notice();
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  // Fleet updates: Update all, the last fleet update, the running one.
  const fleet = h('div', { class: 'fleet' });
  // Its own notice: a background load clears old errors, and a refused
  // downgrade's offer must stay until the operator answers it.
  const un = notice();
  const running = progress();
  stops.push(running.stop);
  let traffic: TrafficHistory | null = null;
  const filters = filterBar(
    [{ label: 'State', name: 'state', options: [['', 'All states'], ['online', 'Online'], ['offline', 'Offline'], ['pending', 'Pending'],
      ['outdated', 'Outdated (not on the server\'s bundle)']] }],
    () => void load(true));
  filters.el.hidden = true;
  const list = pages<Machine, MachinePage>(ctx.api, '/api/machines', filters.query, n, stops, () => show());
  const show = () => {
    const page = list.page();
    if (!page) return;
    list.label('machines');
    refill(body, filters.framed(machinesTable(ctx, list.rows(), traffic, un), page.matched, page.counts.all, ['machine', 'machines']), list.moreRow);
  };
  let poll: number | undefined;
  const load = (reset = false) => busy([], n, async () => {
    const [apply, tr, last] = await Promise.all([list.read(reset), loadTraffic(ctx), loadFleet(ctx)]);
    if (!apply()) return;
    traffic = tr;
    const ms = list.rows();
    const counts = list.page()!.counts;
    filters.el.hidden = counts.all === 0;
    const target = ms.find((m) => m.update?.state === 'outdated' && m.update.target_version)?.update?.target_version ?? '';
    const all = updateAllButton(ctx, counts, target, un);
    followUpdate(un, ms);
    refill(fleet, all ? h('div', { class: 'actions update-all' }, ...all) : null, fleetBox(last, ms));
    const updating = !!last?.running || counts.updating > 0;
    running.show(updating);
    // The fleet's summary is not pushed: asked again while it runs.
    clearTimeout(poll);
    if (updating) poll = window.setTimeout(() => { if (body.isConnected) void load(); }, 3000);
    show();
  });
  stops.push(() => clearTimeout(poll));
  ctx.sub(['machines', 'status'], () => void load());
  void load();
  return card('Machines', fleet, running.el, un.el, filters.el, n.el, body);
}

function machinesTable(ctx: Ctx, ms: Machine[], traffic: TrafficHistory | null, n: Notice): HTMLElement {
  return table([['Machine', 'c-main'], ['Status', 'c-state'], ['Last seen', 'c-seen'], ['Traffic (24 h)', 'c-traffic'], ['', 'c-actions']], ms.map((m) => {
    const del = rowButton('Delete', m.name, () => void ask({
      title: `Delete ${m.name}?`,
      body: h('p', null, `${m.name} loses its tunnels and its credentials; it must join again with a new token.`),
      confirm: `Delete ${m.name}`, danger: true,
      action: async () => {
        await ctx.api.del<Message>(`/api/machines/${m.id}`);
        emit('machines');
        emit('tunnels');
      },
    }), 'danger small');
    const update = updateButton(ctx, m, n, true);
    const versions = versionsLine(m);
    return [
      h('div', { class: 'main-cell' }, h('a', { href: `#/machines/${m.id}`, class: 'name' }, m.name),
        h('div', { class: 'muted small' }, `user ${m.username}`, m.tunnel_port ? ` · SSH port ${m.tunnel_port}` : '',
          m.transport?.configured === 'wss' ? ' · over port 443' : ''),
        versions ? h('div', { class: 'muted small versions' }, versions) : null),
      h('div', { class: 'state' }, statusBadge(m), reason(m.status_reason), updateState(m)),
      time(m.last_seen), trafficCell(traffic?.machines[String(m.id)], traffic !== null), h('div', { class: 'row-actions' }, update, del)];
  }), 'No machines yet: create a bootstrap token above and run its command on a machine.', 'Machines', 'data-table');
}

// Joins that failed (a stale, used or mistyped token) and tunnel clients
// whose credentials were refused, grouped by address and reason.
function failedCard(ctx: Ctx): HTMLElement {
  const n = notice();
  const body = h('div');
  const load = () => busy([], n, async () => {
    const as = (await ctx.api.get<StaleTokenAttempt[]>('/api/security/stale-tokens')) ?? [];
    refill(body, table(['Last try', 'From', 'What', 'Why', 'Tries'], as.map((a) => [
      time(a.created_at), a.client_addr || '—', a.kind === 'bootstrap' ? 'join with a token' : 'tunnel client login',
      a.reason || '—', h('span', { title: a.first_seen ? `first ${fmtTime(a.first_seen)}` : null }, a.count ?? 1),
    ]), 'No failed joins.', 'Failed join attempts'));
  });
  ctx.sub(['tokens', 'machines', 'audit'], () => void load());
  void load();
  return card('Failed join attempts',
    h('p', { class: 'muted' }, 'Joins refused because the token was unknown, used or expired, and tunnel clients whose credentials were refused.'),
    n.el, body);
}

export const machinesView: View = (root, ctx) => {
  const stops: (() => void)[] = [];
  clear(root, h('h1', null, 'Machines'), joinCard(ctx), machinesCard(ctx, stops), tokensCard(ctx), failedCard(ctx));
  return () => stops.forEach((f) => f());
};
