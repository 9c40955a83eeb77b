// A list the server reads a page at a time (GET /api/machines,
// GET /api/tunnels with limit and cursor): the rows read so far, the next
// page as its button scrolls into view, and reads again that keep the
// place a live refresh was at.
import type { Api } from './api';
import { busy, h, type Notice } from './dom';

/** What every paged list says beside its rows. */
export interface PageInfo { matched: number; next_cursor: string }

export const PAGE = 100;
export const MAX_PAGE = 500;

export interface Pages<T, P extends PageInfo> {
  /** The "Show n more" row, below the table; hidden on the last page. */
  moreRow: HTMLElement;
  rows: () => T[];
  page: () => P | null;
  /** Starts reading the list again: the rows shown so far (at least a
   * page), or the first page when reset (the filters changed). What it
   * resolves to applies the answer, and says false if a later read began
   * meanwhile (the answer is then dropped). */
  read: (reset: boolean) => Promise<() => boolean>;
  /** Says how many more there are on the button; call it on each show. */
  label: (what: string) => void;
}

/** The list at path, with the search and filters query gives; shown is
 * called after the button added a page. Pushes its own stop onto stops. */
export function pages<T, P extends PageInfo>(api: Api, path: string, query: () => URLSearchParams,
  n: Notice, stops: (() => void)[], shown: () => void): Pages<T, P> {
  const fetch = (limit: number, cursor: string) => {
    const q = query();
    q.set('limit', String(limit));
    if (cursor) q.set('cursor', cursor);
    return api.page<T[], P>(`${path}?${q}`);
  };
  let rows: T[] = [];
  let page: P | null = null;
  let seq = 0;
  const more = h('button', { type: 'button', class: 'secondary' }, 'Show more');
  const moreRow = h('div', { class: 'actions more', hidden: true }, more);
  more.addEventListener('click', () => void busy([more], n, async () => {
    if (!page?.next_cursor) return;
    const mine = seq;
    const r = await fetch(PAGE, page.next_cursor);
    if (mine !== seq) return; // the list was read again meanwhile
    rows = [...rows, ...(r.data ?? [])];
    page = r.page;
    shown();
  }));
  const seen = new IntersectionObserver((es) => {
    if (es.some((e) => e.isIntersecting) && !moreRow.hidden && !more.disabled) more.click();
  });
  seen.observe(more);
  stops.push(() => seen.disconnect());
  return {
    moreRow,
    rows: () => rows,
    page: () => page,
    read: async (reset) => {
      const mine = ++seq;
      const limit = reset || !page ? PAGE : Math.min(MAX_PAGE, Math.max(PAGE, rows.length));
      const r = await fetch(limit, '');
      return () => {
        if (mine !== seq) return false;
        rows = r.data ?? [];
        page = r.page;
        return true;
      };
    },
    label: (what) => {
      const left = page ? page.matched - rows.length : 0;
      more.textContent = `Show ${Math.min(left, PAGE)} more of ${left} ${what}`;
      moreRow.hidden = !page?.next_cursor;
    },
  };
}
