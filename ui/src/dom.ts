// Tiny DOM helpers. Everything is built with createElement and textContent:
// no innerHTML, no inline styles (the daemon's CSP forbids them anyway).
import { ApiError, describeError } from './api';
import { onReconnect } from './live';

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

/**
 * Replaces el's children and, when focus was on a control inside it, puts
 * focus back on the control with the same name (live updates re-render
 * tables under the operator's hands).
 */
export function refill(el: Element, ...children: (Child | Child[])[]): void {
  const a = document.activeElement;
  const key = a && el.contains(a) ? a.getAttribute('aria-label') ?? a.textContent : null;
  clear(el, ...children);
  if (!key) return;
  for (const c of el.querySelectorAll<HTMLElement>('button, a, input, select')) {
    if ((c.getAttribute('aria-label') ?? c.textContent) === key) { c.focus(); break; }
  }
}

let uid = 0;
export const nextId = (p = 'f') => `${p}${++uid}`;

export interface Field<T extends HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement = HTMLInputElement> {
  row: HTMLDivElement;
  input: T;
  /** Shows msg under the field and ties it to the input; null clears it. */
  error: (msg: string | null) => void;
}

type FieldOpts = string | { hint?: string; invalid?: string };

function makeField<T extends HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>(label: string, input: T, opts: FieldOpts = {}, check = false): Field<T> {
  const o = typeof opts === 'string' ? { hint: opts } : opts;
  const id = input.id || nextId();
  input.id = id;
  const hintId = o.hint ? `${id}-hint` : '';
  if (hintId) input.setAttribute('aria-describedby', hintId);
  if (o.invalid) input.dataset.invalid = o.invalid;
  const err = h('small', { id: `${id}-err`, class: 'field-error', hidden: true });
  const required = input.required ? h('span', { class: 'req', 'aria-hidden': 'true' }, ' *') : null;
  const lab = h('label', { for: id }, label, required);
  const row = h('div', { class: check ? 'field check' : 'field' }, ...(check ? [input, lab] : [lab, input]),
    o.hint ? h('small', { id: hintId, class: 'hint' }, o.hint) : null, err);
  const error = (msg: string | null) => {
    err.textContent = msg ?? '';
    err.hidden = !msg;
    if (msg) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
    input.setAttribute('aria-describedby', [hintId, msg ? err.id : ''].filter(Boolean).join(' '));
    if (!input.getAttribute('aria-describedby')) input.removeAttribute('aria-describedby');
  };
  fieldErrors.set(input, error);
  input.addEventListener('input', () => { if (input.getAttribute('aria-invalid')) error(null); });
  return { row, input, error };
}

const fieldErrors = new WeakMap<Element, (msg: string | null) => void>();

/** A labelled input. Required fields are marked in their label. */
export function field(label: string, props: Props = {}, opts?: FieldOpts): Field {
  return makeField(label, h('input', props), opts);
}

/** A labelled text area (several lines). */
export function textarea(label: string, props: Props = {}, opts?: FieldOpts): Field<HTMLTextAreaElement> {
  return makeField(label, h('textarea', props), opts);
}

/**
 * A field for a one-time code: shown as typed (it is no password), a
 * number pad on phones, filled by the system's one-time-code helpers.
 * Where a backup code is accepted too, a button switches to a keyboard
 * with letters.
 */
export function codeField(label: string, hint?: string, backup = false, props: Props = {}): Field {
  const f = field(label, {
    type: 'text', name: 'code', inputmode: 'numeric', autocomplete: 'one-time-code', required: true,
    spellcheck: 'false', autocapitalize: 'off', ...props,
  }, hint);
  if (backup) {
    // At the end of the field (after its hint), at the start of its line.
    const toggle = h('button', { type: 'button', class: 'link small code-toggle' }, 'Type a backup code');
    toggle.addEventListener('click', () => {
      const letters = f.input.inputMode !== 'text';
      f.input.inputMode = letters ? 'text' : 'numeric';
      toggle.textContent = letters ? 'Type a code from the app' : 'Type a backup code';
      f.input.focus();
    });
    f.row.append(toggle);
  }
  return f;
}

export function checkbox(label: string, props: Props = {}): Field {
  return makeField(label, h('input', { type: 'checkbox', ...props }), {}, true);
}

export function select(label: string, options: [string, string][], props: Props = {}, opts?: FieldOpts): Field<HTMLSelectElement> {
  return makeField(label, h('select', props, options.map(([v, t]) => h('option', { value: v }, t))), opts);
}

export type Notice = {
  el: HTMLParagraphElement; error: (e: unknown, retry?: () => void) => void; ok: (m: string) => void; clear: () => void;
  /** A request is still on its way: said in words (busy() does). */
  waiting: (m: string) => void;
};

/** A region for messages: errors are announced (role=alert). A lost
 * connection's error clears itself when the daemon answers again. */
export function notice(): Notice {
  const el = h('p', { class: 'notice', role: 'status', hidden: true });
  let offline = false;
  const show = (cls: string, text: string, role: string) => {
    el.className = `notice ${cls}`;
    el.setAttribute('role', role);
    el.textContent = text;
    el.hidden = false;
  };
  const n: Notice = {
    el,
    error: (e, retry) => {
      offline = e instanceof ApiError && e.status === 0;
      show('error', describeError(e), 'alert');
      // No answer (or no connection): offer to ask again.
      if (offline && retry) el.append(' ', h('button', { type: 'button', class: 'secondary small', onclick: retry }, 'Try again'));
    },
    ok: (m) => { offline = false; show('ok', m, 'status'); },
    clear: () => { offline = false; el.hidden = true; el.textContent = ''; },
    waiting: (m) => { offline = false; show('waiting', m, 'status'); },
  };
  onReconnect(() => { if (offline && el.isConnected) n.clear(); });
  return n;
}

/**
 * Runs fn while the buttons are disabled (and marked busy), showing any
 * error in n. Returns fn's result, or undefined when it failed.
 */
export async function busy<T>(
  buttons: (HTMLButtonElement | null | undefined)[] | HTMLButtonElement,
  n: Notice | null,
  fn: () => Promise<T>,
): Promise<T | undefined> {
  const bs = (Array.isArray(buttons) ? buttons : [buttons]).filter((b): b is HTMLButtonElement => !!b);
  bs.forEach((b) => { b.disabled = true; b.setAttribute('aria-busy', 'true'); });
  // A load in the background clears only an old error: a confirmation of
  // what the operator just did stays while the page refreshes.
  if (bs.length || n?.el.classList.contains('error')) n?.clear();
  // What the operator pressed and still waits for is said in words, not
  // only by a grey button; the words go when the answer comes.
  const said: string[] = [];
  const say = (m: string) => { if (n && bs.length && (n.el.hidden || said.includes(n.el.textContent ?? ''))) { n.waiting(m); said.push(m); } };
  const timers = [window.setTimeout(() => say('Waiting for the server…'), 1500),
    window.setTimeout(() => say('No answer yet after 10 s: the server may be busy. Its answer shows here when it comes.'), 10_500)];
  try {
    return await fn();
  } catch (e) {
    if (n) n.error(e, () => void busy(buttons, n, fn));
    else console.warn(e);
    return undefined;
  } finally {
    timers.forEach((t) => clearTimeout(t));
    if (n && said.includes(n.el.textContent ?? '')) n.clear();
    bs.forEach((b) => { b.disabled = false; b.removeAttribute('aria-busy'); });
  }
}

/** Shows the browser's verdict on each invalid control beside it; focuses
 * the first. Returns whether the form is valid. */
export function validate(f: HTMLFormElement): boolean {
  let first: HTMLElement | null = null;
  for (const c of f.querySelectorAll<HTMLInputElement | HTMLSelectElement>('input, select')) {
    const set = fieldErrors.get(c);
    if (!set) continue;
    if (c.checkValidity() || c.closest('[hidden]')) { set(null); continue; }
    const custom = c.dataset.invalid;
    set(c.validity.valueMissing ? 'This field is required.' : custom ?? c.validationMessage);
    first ??= c;
  }
  first?.focus();
  return !first;
}

/** A field's label in words, without the required mark. */
function labelOf(c: Element): string {
  const l = c.id ? document.querySelector(`label[for="${c.id}"]`) : null;
  return (l?.textContent ?? '').replace(/\s*\*$/, '').replace(/:.*$/, '').trim();
}

/**
 * Puts a server message beside the field it names ("subdomain is already
 * in use", "allow_ips: \"10.0.0.0/33\" is not an address or CIDR"), when
 * the form has one: the field named first in the message wins, and API
 * names become the field's label ("Allowed addresses …"), or go when they
 * only prefix the message. Returns whether it found the field.
 */
export function errorToField(f: HTMLElement, e: unknown): boolean {
  if (!(e instanceof ApiError) || e.status === 0 || e.status === 401 && !f.querySelector('[name=password]')) return false;
  let best: { c: HTMLInputElement; at: number } | null = null;
  const visible = [...f.querySelectorAll<HTMLInputElement>('input[name], select[name], textarea[name]')]
    .filter((c) => fieldErrors.has(c) && !c.closest('[hidden]'));
  for (const c of visible) {
    const at = e.message.search(new RegExp(`\\b${c.name}\\b`));
    if (at >= 0 && (!best || at < best.at)) best = { c, at };
  }
  if (!best) return false;
  const c = best.c;
  const said = describeError(e);
  let msg = said;
  if (msg.startsWith(`${c.name}: `)) msg = msg.slice(c.name.length + 2);
  else if (best.at === 0) msg = labelOf(c) + msg.slice(c.name.length);
  // Other API names (with an underscore) in the message, in words too.
  for (const o of visible) if (o.name.includes('_')) msg = msg.replace(new RegExp(`\\b${o.name}\\b`, 'g'), labelOf(o).toLowerCase() || o.name);
  fieldErrors.get(c)?.(msg === said ? msg : msg.charAt(0).toUpperCase() + msg.slice(1));
  c.focus();
  return true;
}

/** Takes the errors beside a form's fields away (what they were about is
 * gone). */
export function clearFieldErrors(f: HTMLElement): void {
  for (const c of f.querySelectorAll('input, select, textarea')) fieldErrors.get(c)?.(null);
}

/** A form: checked in the page (errors beside their fields), its submit
 * button disabled while onSubmit runs. */
export function form(
  opts: { label: string; submit: string; className?: string; danger?: boolean; submitLabel?: string },
  fields: Child[],
  onSubmit: (n: Notice, submit: HTMLButtonElement) => Promise<void>,
): { form: HTMLFormElement; submit: HTMLButtonElement; notice: Notice } {
  const n = notice();
  const submit = h('button', { type: 'submit', class: opts.danger ? 'danger' : null, 'aria-label': opts.submitLabel }, opts.submit);
  const f = h('form', { 'aria-label': opts.label, class: opts.className ?? 'stack', novalidate: true },
    ...fields, h('div', { class: 'actions' }, submit), n.el);
  f.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (!validate(f)) return;
    void busy(submit, n, async () => {
      try {
        await onSubmit(n, submit);
      } catch (e) {
        if (!errorToField(f, e)) throw e;
      }
    });
  });
  return { form: f, submit, notice: n };
}

export function card(title: string, ...children: (Child | Child[])[]): HTMLElement {
  return h('section', { class: 'card' }, h('h2', null, title), ...children);
}

export function fmtTime(s?: string | null): string {
  if (!s) return '—';
  const d = new Date(s);
  return Number.isNaN(d.getTime()) || d.getTime() <= 0 ? s : d.toLocaleString();
}

/** "3 min ago", "in 2 h" */
export function ago(s?: string | null): string {
  if (!s) return 'never';
  const t = new Date(s).getTime();
  if (Number.isNaN(t) || t <= 0) return 'never';
  const d = (Date.now() - t) / 1000;
  const a = Math.abs(d);
  const v = a < 60 ? [Math.round(a), 's'] : a < 3600 ? [Math.round(a / 60), 'min'] : a < 86400 ? [Math.round(a / 3600), 'h'] : [Math.round(a / 86400), 'd'];
  if (a < 5) return 'just now';
  return d >= 0 ? `${v[0]} ${v[1]} ago` : `in ${v[0]} ${v[1]}`;
}

export function time(s?: string | null, rel = true): HTMLElement | string {
  if (!s) return rel ? 'never' : '—';
  return h('time', { datetime: s, title: fmtTime(s), class: rel ? 'ago' : null }, rel ? ago(s) : fmtTime(s));
}

// "2 min ago" stays true while the page is open.
setInterval(() => {
  for (const t of document.querySelectorAll<HTMLTimeElement>('time.ago')) t.textContent = ago(t.dateTime);
}, 30_000);

export function badge(text: string, tone: 'good' | 'warn' | 'bad' | '' = ''): HTMLElement {
  return h('span', { class: `badge ${tone}` }, text);
}

/** A column: its heading, and a class for its th and tds (widths). An
 * empty heading is read as "Actions". */
export type Head = string | [string, string];

export function table(headers: Head[], rows: Child[][], empty: string, caption?: string, cls?: string): HTMLElement {
  if (rows.length === 0) return h('p', { class: 'muted' }, empty);
  const heads = headers.map((x) => (typeof x === 'string' ? [x, ''] : x));
  return h('div', { class: 'table-wrap' },
    h('table', { class: cls },
      caption ? h('caption', { class: 'sr-only' }, caption) : null,
      h('thead', null, h('tr', null, heads.map(([t, c]) => h('th', { scope: 'col', class: c || null }, t || h('span', { class: 'sr-only' }, 'Actions'))))),
      h('tbody', null, rows.map((r) => h('tr', null, r.map((c, i) => h('td', { 'data-label': heads[i][0], class: heads[i][1] || null }, c))))),
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

/** A block of text with a Copy button that says what happened. shown is
 * what the page displays when it differs from what is copied (a secret
 * grouped in fours is copied without its spaces). */
export function copyBox(text: string, label: string, cls = 'cmd', shown = text): HTMLElement {
  const code = h('code', { class: cls }, shown);
  const said = h('span', { class: 'muted', role: 'status' });
  const copy = h('button', { type: 'button', class: 'secondary small', 'aria-label': label }, 'Copy');
  copy.addEventListener('click', async () => {
    said.textContent = (await copyText(text, code)) ? 'Copied.' : 'Selected; press Ctrl+C to copy.';
  });
  return h('div', { class: 'command' }, h('pre', { tabindex: 0 }, code), h('div', { class: 'actions' }, copy, said));
}

/** Saves text as a file the browser downloads. */
export function saveFile(name: string, text: string, type = 'text/plain'): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** "Delete nas-1": a small button named with the row it acts on. */
export function rowButton(text: string, name: string, onClick: (b: HTMLButtonElement) => void, cls = 'secondary small'): HTMLButtonElement {
  const b = h('button', { type: 'button', class: cls, 'aria-label': `${text} ${name}` }, text);
  b.addEventListener('click', () => onClick(b));
  return b;
}
