// Tiny DOM helpers. Everything is built with createElement and textContent:
// no innerHTML, no inline styles (the daemon's CSP forbids them anyway).
import { describeError } from './api';

export type Child = Node | string | number | null | undefined | false;
type Props = Record<string, unknown>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props | null = null,
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2).toLowerCase(), value as EventListener);
    } else if (key === 'value') {
      (el as HTMLInputElement).value = String(value);
    } else if (key === 'checked') {
      (el as HTMLInputElement).checked = Boolean(value);
    } else if (value === true) {
      el.setAttribute(key, '');
    } else {
      el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el: Node, children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

let uid = 0;
/** A labelled input; returns the wrapper and the input. */
export function field(
  label: string,
  props: Props = {},
  hint?: string,
): { row: HTMLDivElement; input: HTMLInputElement } {
  const id = `f${++uid}`;
  const hintId = hint ? `${id}-hint` : undefined;
  const input = h('input', { id, 'aria-describedby': hintId, ...props });
  const row = h('div', { class: 'field' }, h('label', { for: id }, label), input,
    hint ? h('small', { id: hintId, class: 'hint' }, hint) : null);
  return { row, input };
}

export function checkbox(label: string, props: Props = {}): { row: HTMLDivElement; input: HTMLInputElement } {
  const id = `f${++uid}`;
  const input = h('input', { id, type: 'checkbox', ...props });
  return { row: h('div', { class: 'field check' }, input, h('label', { for: id }, label)), input };
}

export function select(label: string, options: [string, string][], props: Props = {}): { row: HTMLDivElement; input: HTMLSelectElement } {
  const id = `f${++uid}`;
  const input = h('select', { id, ...props }, options.map(([v, t]) => h('option', { value: v }, t)));
  return { row: h('div', { class: 'field' }, h('label', { for: id }, label), input), input };
}

/** A region for messages: errors are announced (role=alert). */
export function notice(): { el: HTMLParagraphElement; error: (e: unknown) => void; ok: (m: string) => void; clear: () => void } {
  const el = h('p', { class: 'notice', role: 'status', hidden: true });
  const show = (cls: string, text: string, role: string) => {
    el.className = `notice ${cls}`;
    el.setAttribute('role', role);
    el.textContent = text;
    el.hidden = false;
  };
  return {
    el,
    error: (e) => show('error', describeError(e), 'alert'),
    ok: (m) => show('ok', m, 'status'),
    clear: () => { el.hidden = true; el.textContent = ''; },
  };
}

/**
 * Runs fn while the buttons are disabled (and marked busy), showing any
 * error in n. Returns fn's result, or undefined when it failed.
 */
export async function busy<T>(
  buttons: (HTMLButtonElement | null | undefined)[] | HTMLButtonElement,
  n: ReturnType<typeof notice> | null,
  fn: () => Promise<T>,
): Promise<T | undefined> {
  const bs = (Array.isArray(buttons) ? buttons : [buttons]).filter((b): b is HTMLButtonElement => !!b);
  bs.forEach((b) => { b.disabled = true; b.setAttribute('aria-busy', 'true'); });
  n?.clear();
  try {
    return await fn();
  } catch (e) {
    if (n) n.error(e);
    else console.error(e);
    return undefined;
  } finally {
    bs.forEach((b) => { b.disabled = false; b.removeAttribute('aria-busy'); });
  }
}

/** A form whose submit button is disabled while onSubmit runs. */
export function form(
  opts: { label: string; submit: string; className?: string },
  fields: Child[],
  onSubmit: (n: ReturnType<typeof notice>, submit: HTMLButtonElement) => Promise<void>,
): { form: HTMLFormElement; submit: HTMLButtonElement; notice: ReturnType<typeof notice> } {
  const n = notice();
  const submit = h('button', { type: 'submit' }, opts.submit);
  const f = h('form', { 'aria-label': opts.label, class: opts.className ?? 'stack' }, ...fields, h('div', { class: 'actions' }, submit), n.el);
  f.addEventListener('submit', (ev) => {
    ev.preventDefault();
    void busy(submit, n, () => onSubmit(n, submit));
  });
  return { form: f, submit, notice: n };
}

export function card(title: string, ...children: (Child | Child[])[]): HTMLElement {
  return h('section', { class: 'card' }, h('h2', null, title), ...children);
}

export function fmtTime(s?: string | null): string {
  if (!s) return '—';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? s : d.toLocaleString();
}

export function table(headers: string[], rows: Child[][], empty: string): HTMLElement {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  return h('div', { class: 'table-wrap' },
    h('table', null,
      h('thead', null, h('tr', null, headers.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, rows.map((r) => h('tr', null, r.map((c, i) => h('td', { 'data-label': headers[i] }, c))))),
    ));
}

export async function copyText(text: string, fallback: HTMLElement): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // No clipboard (plain http): select the text so Ctrl+C works.
    const sel = window.getSelection();
    const range = document.createRange();
    range.selectNodeContents(fallback);
    sel?.removeAllRanges();
    sel?.addRange(range);
    return false;
  }
}
