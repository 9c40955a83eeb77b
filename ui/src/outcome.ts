// The stored result of the last install, ban-tool set-up or firewall change
// (GET /api/local/status → outcomes). While the operation runs it says so;
// when it ends its result replaces that, so "started" never stays beside
// a failure.
import type { LocalStatus, Outcome } from './api';
import type { Ctx } from './ctx';
import { clear, fmtTime, h } from './dom';

export type OpName = 'install' | 'banner' | 'firewall';

/** elsewhere, when given, is a sentence the page already shows, and where
 * ("under Installed"): a result that says the same points there instead of
 * saying it twice. */
export function outcomeBox(ctx: Ctx, op: OpName, what: string, own = true, elsewhere?: () => [string, string] | null): {
  el: HTMLElement; started: () => void; show: (s: LocalStatus | undefined) => void; refresh: () => Promise<LocalStatus | undefined>;
} {
  const el = h('div', { class: 'outcome', role: 'status' });
  let running = false;
  let since = 0;
  const show = (s: LocalStatus | undefined) => {
    const o: Outcome | undefined = s?.outcomes?.[op];
    const fresh = o?.at ? new Date(o.at).getTime() >= since - 2000 : false;
    if (running && s && !s.operation && (fresh || !o || Date.now() - since > 5000)) running = false;
    if (running) {
      clear(el, h('p', { class: 'notice' }, `${what} is running; its log is on the Overview page.`));
      return;
    }
    if (!o) { clear(el); return; }
    const shown = elsewhere?.();
    const said = shown && o.message?.includes(shown[0]) ? `, for the reason shown ${shown[1]}.` : o.message ? `: ${o.message}` : '.';
    clear(el, h('p', { class: `notice ${o.ok ? 'ok' : 'error'}` },
      `Last ${what.toLowerCase()}: ${o.ok ? 'succeeded' : 'failed'}`, o.at ? ` (${fmtTime(o.at)})` : '', said));
  };
  const refresh = async () => {
    try {
      const s = await ctx.api.get<LocalStatus>('/api/local/status');
      show(s);
      return s;
    } catch { return undefined; }
  };
  if (own) ctx.sub(['status'], () => void refresh());
  return {
    el,
    started: () => { running = true; since = Date.now(); show(undefined); void refresh(); },
    show,
    refresh,
  };
}
