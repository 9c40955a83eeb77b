// Fleet updates on the Machines page and a machine's page: the update
// state as a badge, Update (one machine, with the downgrade the daemon
// refuses until it is asked for by name) and Update all, each asked first,
// and the progress of the running update from the log stream.
import { ApiError, type FleetUpdate, type Machine, type Message } from '../api';
import type { Ctx } from '../ctx';
import { ask } from '../dialog';
import { badge, clear, h, type Child, type Notice } from '../dom';
import { emit, logBuffer, onLog, type LogLine } from '../live';
import { downgradeTo, fleetSummary, updateBadge } from '../fleet';
import { briefUpdate, reason } from '../words';

/** The update state's badge and, when it failed, why (short, whole on demand). */
export function updateState(m: Machine): Child[] {
  const b = updateBadge(m);
  if (!b) return [];
  return [h('span', { 'data-update-state': m.update?.state }, badge(b.text, b.tone)), reason(b.why, undefined, briefUpdate)];
}

const bundle = (v?: string) => (v ? `bundle ${v}` : 'the bundle it runs (not reported yet)');

/** Asks, then starts the update of m; a refused downgrade is said in n
 * with a second question that names both versions. */
export function askUpdate(ctx: Ctx, m: Machine, n: Notice): void {
  const to = m.update?.target_version || "the server's bundle";
  const post = async (body?: { version: string }) => {
    const r = await ctx.api.post<Message>(`/api/machines/${m.id}/update`, body);
    n.ok(r.message || `Updating ${m.name}.`);
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

/** The "Update all" button: shown when a machine is outdated, naming how
 * many and to which version; it asks first. */
export function updateAllButton(ctx: Ctx, count: number, target: string, n: Notice): HTMLButtonElement | null {
  if (!count) return null;
  const many = count === 1 ? '1 machine' : `${count} machines`;
  const b = h('button', { type: 'button' }, `Update all (${many} to ${target || "the server's bundle"})`);
  b.addEventListener('click', () => void ask({
    title: `Update ${many} to ${target || "the server's bundle"}?`,
    body: h('p', null, count === 1 ? 'It updates, and goes back to its previous bundle by itself if it does not come back.'
      : 'One goes first; the rest follow in groups of 5; it stops at the first failure.'),
    confirm: `Update ${many}`,
    action: async () => {
      const r = await ctx.api.post<Message>('/api/machines/update', { all: true });
      n.ok(r.message || `Updating ${many}.`);
      emit('machines');
    },
  }));
  return b;
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
