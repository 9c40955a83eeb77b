// Search and filters above a table, applied in the page: a search box
// (every word must appear in the row's text) and selects (e.g. machine,
// kind, state). The choice survives live refreshes of the table; a line
// says how many rows show, and a filter that hides every row says so and
// offers to clear it.
import { field, h, select, type Child } from './dom';

export interface FilterDef<T> {
  /** The select's label and options; the first option ("" = all) is the default. */
  label: string;
  name: string;
  options: [string, string][];
  match: (item: T, value: string) => boolean;
}

export interface FilterBar<T> {
  el: HTMLElement;
  /** Replaces a select's options (e.g. the machines), keeping the choice. */
  setOptions: (name: string, options: [string, string][]) => void;
  /** The table for the items that pass, with the count line above it. */
  apply: (items: T[], render: (shown: T[]) => Child, what: [string, string]) => Child[];
  /** The search and each select's value, for a list the server filters. */
  query: () => URLSearchParams;
  /** As apply, for rows the server filtered: matched of total match. */
  framed: (shown: Child, matched: number, total: number, what: [string, string]) => Child[];
}

export function filterBar<T>(text: (item: T) => string, defs: FilterDef<T>[], onChange: () => void): FilterBar<T> {
  const search = field('Search', { type: 'search', name: 'search', autocomplete: 'off', spellcheck: 'false' });
  let timer: number | undefined;
  search.input.addEventListener('input', () => {
    clearTimeout(timer);
    timer = window.setTimeout(onChange, 150);
  });
  const selects = defs.map((d) => {
    const s = select(d.label, d.options, { name: d.name });
    s.input.addEventListener('change', onChange);
    return { d, s };
  });
  const el = h('div', { class: 'filters', role: 'search', 'aria-label': 'Filter the table' }, search.row, selects.map((x) => x.s.row));
  const clearAll = () => {
    search.input.value = '';
    for (const { s } of selects) s.input.value = '';
    onChange();
    search.input.focus();
  };
  return {
    el,
    setOptions: (name, options) => {
      const x = selects.find((y) => y.d.name === name);
      if (!x) return;
      const cur = x.s.input.value;
      x.s.input.replaceChildren(...options.map(([v, t]) => h('option', { value: v }, t)));
      x.s.input.value = options.some(([v]) => v === cur) ? cur : '';
    },
    apply: (items, render, what) => {
      const words = search.input.value.toLowerCase().split(/\s+/).filter(Boolean);
      const shown = items.filter((it) => {
        const t = text(it).toLowerCase();
        return words.every((w) => t.includes(w)) && selects.every(({ d, s }) => !s.input.value || d.match(it, s.input.value));
      });
      return frame(() => render(filtered() ? shown : items), shown.length, items.length, what);
    },
    query: () => {
      const q = new URLSearchParams();
      if (search.input.value.trim()) q.set('q', search.input.value.trim());
      for (const { d, s } of selects) if (s.input.value) q.set(d.name, s.input.value);
      return q;
    },
    framed: (shown, matched, total, what) => frame(() => shown, matched, total, what),
  };
  function filtered(): boolean {
    return search.input.value.trim() !== '' || selects.some(({ s }) => s.input.value);
  }
  // The rows, with "Showing n of m" above them while a filter is on, or
  // the line that says none matches.
  function frame(rows: () => Child, matched: number, total: number, [one, many]: [string, string]): Child[] {
    if (!filtered() || total === 0) return [rows()];
    if (matched === 0) {
      return [h('p', { class: 'muted' }, `No ${one} matches the search and filters. `,
        h('button', { type: 'button', class: 'link', onclick: clearAll }, 'Clear the filters'))];
    }
    return [h('p', { class: 'muted small count' }, `Showing ${matched} of ${total} ${total === 1 ? one : many}.`), rows()];
  }
}
