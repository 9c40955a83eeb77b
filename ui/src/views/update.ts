// Fleet updates on the Machines page and a machine's page: the update
// state as a badge, Update (one machine, with the downgrade the daemon
// refuses until it is asked for by name) and Update all, each asked first,
// and the progress of the running update from the log stream.
import { ApiError, type FleetUpdate, type Machine, type MachineCounts, type Message } from '../api';
import type { Ctx } from '../ctx';
import { ask } from '../dialog';
import { badge, clear, h, rowButton, type Child, type Notice } from '../dom';
import { emit, logBuffer, onLog, type LogLine } from '../live';
import { downgradeTo, fleetSummary, skipsLine, updateBadge, updateOffer } from '../fleet';
import { briefUpdate, reason } from '../words';

/** The update state's badge and, when it failed, why (short, whole on
 * demand); then why Update cannot work now, when it cannot. */
export function updateState(m: Machine): Child[] {
  const b = updateBadge(m);
  if (!b) return [];
  const blocked = updateOffer(m).blocked;
  return [h('span', { 'data-update-state': m.update?.state }, badge(b.text, b.tone)), reason(b.why, undefined, briefUpdate),
    blocked ? h('div', { id: `update-why-${m.id}`, class: 'muted small update-why' }, `No update now: ${blocked}.`) : null];
}

/** Update for m, or null when m needs none: disabled, and described by
 * the reason updateState shows, when it cannot work now. */
export function updateButton(ctx: Ctx, m: Machine, n: Notice, small: boolean): HTMLButtonElement | null {
  const o = updateOffer(m);
  if (!o.show) return null;
  const b = small ? rowButton('Update', m.name, () => askUpdate(ctx, m, n))
    : h('button', { type: 'button', 'aria-label': `Update ${m.name}` }, 'Update');
  if (!small) b.addEventListener('click', () => askUpdate(ctx, m, n));
  if (o.blocked) {
    b.disabled = true;
    b.setAttribute('aria-describedby', `update-why-${m.id}`);
  }
  return b;
}

const bundle = (v?: string) => (v ? `bundle ${v}` : 'the bundle it runs (not reported yet)');

/** Asks, then starts the update of m; a refused downgrade is said in n
 * with a second question that names both versions. */
export function askUpdate(ctx: Ctx, m: Machine, n: Notice): void {
  const to = m.update?.target_version || "the server's bundle";
  const post = async (body?: { version: string }) => {
    await ctx.api.post<Message>(`/api/machines/${m.id}/update`, body);
    following(n, m, body?.version ?? to);
    emit('machines');
  };
  void ask({
    title: `Update ${m.name}?`,
    body: h('p', null, `${m.name} goes from ${bundle(m.bundle_version)} to ${to}. Its agent downloads and checks the new bundle, `,
      'restarts into it, and goes back to the previous one by itself if it does not come back within a minute.'),
    confirm: `Update ${m.name}`,
    action: async () => {
      try {
        await post();
      } catch (e) {
        if (!(e instanceof ApiError) || e.status !== 409) throw e;
        const w = downgradeTo(e.message);
        if (!w) throw e;
        // Not an error to retry: a choice the operator makes on purpose.
        offerDowngrade(m, w, e.message, n, post);
      }
    },
  });
}

// The notice of an update just started follows the machine's state: it
// says "started" until the update ends, then how it ended (never a green
// "updating" beside a red "update failed").
const followed = new WeakMap<HTMLElement, { id: number; name: string; to: string }>();

function following(n: Notice, m: Machine, to: string): void {
  n.ok(`Update of ${m.name} to ${to} started: its state shows how it goes.`);
  followed.set(n.el, { id: m.id, name: m.name, to });
}

/** Says in n how the update it follows ended, once ms shows it; with
 * shown, the page says it already (a machine's Software card), and the
 * notice only goes. */
export function followUpdate(n: Notice, ms: Machine[], shown = false): void {
  const f = followed.get(n.el);
  const m = f && ms.find((x) => x.id === f.id);
  if (!f || !m) return;
  const s = m.update?.state;
  if (shown && (s === 'current' || s === 'failed' || s === 'rolled_back')) n.clear();
  else if (s === 'current') n.ok(`${f.name} runs bundle ${m.bundle_version || f.to} now.`);
  else if (s === 'failed' || s === 'rolled_back') {
    n.error(new Error(`The update of ${f.name} ${s === 'failed' ? 'failed' : 'was rolled back'}: ${m.update?.error || 'no reason given'}.`));
  } else return;
  followed.delete(n.el);
}

function offerDowngrade(m: Machine, w: string, said: string, n: Notice, post: (b: { version: string }) => Promise<void>): void {
  n.error(new Error(`Not updated: ${said.replace(/; to go back to .*$/, '')}.`));
  const from = m.bundle_version || 'a newer bundle';
  const b = h('button', { type: 'button', class: 'secondary small' }, `Go back to ${w}`);
  b.addEventListener('click', () => void ask({
    title: `Downgrade ${m.name} to ${w}?`,
    body: h('p', null, `${m.name} runs bundle ${from}, newer than this server's ${w}. Going back installs the older agent and tunnel client on it.`),
    confirm: `Downgrade ${m.name} from ${from} to ${w}`, danger: true,
    action: () => post({ version: w }),
  }));
  n.el.append(' ', b);
}

/** "Update all": shown when a machine lacks the server's bundle, naming
 * how many it updates and to which version, and whom it leaves out and
 * why (disabled when it would update none); it asks first. */
export function updateAllButton(ctx: Ctx, counts: MachineCounts, target: string, n: Notice): Child[] | null {
  const count = counts.for_update_all;
  const skipped = skipsLine(counts.update_all_skips);
  if (!count && !skipped) return null;
  const many = count === 1 ? '1 machine' : `${count} machines`;
  const to = target || "the server's bundle";
  const b = h('button', { type: 'button', 'aria-describedby': skipped ? 'update-all-skips' : null }, `Update all (${many} to ${to})`);
  b.disabled = count === 0;
  b.addEventListener('click', () => void ask({
    title: `Update ${many} to ${to}?`,
    body: [h('p', null, count === 1 ? 'It updates, and goes back to its previous bundle by itself if it does not come back.'
      : 'One goes first; the rest follow in groups of 5; it stops at the first failure.'), skipped ? h('p', null, skipped) : null],
    confirm: `Update ${many}`,
    action: async () => {
      await ctx.api.post<Message>('/api/machines/update', { all: true });
      n.ok(`Update of ${many} to ${to} started: the last fleet update below shows how it goes.`);
      emit('machines');
    },
  }));
  return [b, skipped ? h('p', { id: 'update-all-skips', class: 'muted small' }, skipped) : null];
}

/** The last fleet update (null when none ran, or the daemon has none). */
export async function loadFleet(ctx: Ctx): Promise<FleetUpdate | null> {
  try {
    return await ctx.api.get<FleetUpdate>('/api/machines/update');
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 503)) return null;
    throw e;
  }
}

/** The last fleet update in words. */
export function fleetBox(f: FleetUpdate | null, ms: Machine[]): HTMLElement | null {
  const s = fleetSummary(f, new Map(ms.map((m) => [m.id, m.name])));
  if (!s) return null;
  return h('div', { class: `fleet-summary notice ${s.running ? '' : s.failed ? 'error' : 'ok'}`, role: 'status', 'aria-label': 'Last fleet update' },
    h('strong', null, 'Last fleet update. '), s.lines.join(' '),
    s.failed ? h('div', null, h('strong', null, `Failed: ${s.failed.name}`), ' — ', reason(s.failed.why, 'why inline', briefUpdate)) : null);
}

/** "Updating… (its log is on the Overview)" and the update's last lines,
 * as they come, while show(true). stop() ends the subscription. */
export function progress(): { el: HTMLElement; show: (running: boolean) => void; stop: () => void } {
  const lines = h('ol', { class: 'log short', 'aria-label': 'Update log', tabindex: 0 });
  const el = h('div', { class: 'update-progress', hidden: true },
    h('p', { class: 'waiting' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'Updating… (its log is on the ',
      h('a', { href: '#/overview' }, 'Overview'), ')'), lines);
  const fill = (ls: LogLine[]) => clear(lines, ls.filter((l) => l.op === 'update' && l.line).slice(-4)
    .map((l) => h('li', { class: l.level ?? '' }, l.line ?? '')));
  const stop = onLog((l) => { if (l.op === 'update' && !el.hidden) fill(logBuffer); });
  return {
    el,
    show: (running) => {
      el.hidden = !running;
      if (running) fill(logBuffer);
    },
    stop,
  };
}
