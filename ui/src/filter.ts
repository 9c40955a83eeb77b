// Search and filters above a table that the server searches and filters
// (pages.ts): a search box (every word must appear in the row's text) and
// selects (e.g. machine, kind, state), each a query parameter of the list.
// The choice survives live refreshes of the table; a line says how many
// rows match, and a filter that hides every row says so and offers to
// clear it.
import { field, h, select, type Child } from './dom';

export interface FilterDef {
  /** The select's label and options; the first option ("" = all) is the
   * default. name is the list's query parameter. */
  label: string;
  name: string;
  options: [string, string][];
}

export interface FilterBar {
  el: HTMLElement;
  /** Replaces a select's options (e.g. the machines), keeping the choice. */
  setOptions: (name: string, options: [string, string][]) => void;
  /** The search and each select's value, for a list the server filters. */
  query: () => URLSearchParams;
  /** The rows the server filtered, with the count line above them:
   * matched of total match. */
  framed: (shown: Child, matched: number, total: number, what: [string, string]) => Child[];
}

export function filterBar(defs: FilterDef[], onChange: () => void): FilterBar {
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
