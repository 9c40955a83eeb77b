// A modal question in the page (never window.prompt): it names what will
// happen, may ask for a one-time code (or a masked password), runs the
// action while open and shows its error there (a refused code at the
// code), so a wrong code can be typed again.
import { ApiError, describeError } from './api';
import { busy, codeField, field, h, nextId, notice, validate, type Child } from './dom';

export interface AskOpts {
  title: string;
  body?: Child | Child[];
  /** The confirming button's text, e.g. "Delete nas-1". */
  confirm: string;
  danger?: boolean;
  /** Ask for a one-time code (or, with secret, a password: masked) and
   * hand it to action; backup says a backup code is accepted too. */
  code?: { label: string; hint?: string; secret?: boolean; backup?: boolean };
  /** Runs with the dialog open; its error is shown there. */
  action?: (code: string) => Promise<void>;
  /** Another way to confirm (a passkey instead of the code): a button of
   * its own whose action runs with the dialog open, as action does. */
  alt?: { label: string; action: () => Promise<void> };
}

/** Resolves true when confirmed (and action succeeded), false when cancelled. */
export function ask(o: AskOpts): Promise<boolean> {
  return new Promise((resolve) => {
    const back = document.activeElement as HTMLElement | null;
    const titleId = nextId('dlg');
    const n = notice();
    const c = o.code;
    const code = !c ? null : c.secret
      ? field(c.label, { type: 'password', name: 'code', autocomplete: 'current-password', required: true }, c.hint)
      : codeField(c.label, c.hint, c.backup);
    const ok = h('button', { type: 'submit', class: o.danger ? 'danger solid' : '' }, o.confirm);
    const cancel = h('button', { type: 'button', class: 'secondary' }, 'Cancel');
    const alt = o.alt ? h('button', { type: 'button', class: 'secondary' }, o.alt.label) : null;
    const f = h('form', { class: 'stack', novalidate: true },
      h('h2', { id: titleId }, o.title),
      o.body ? h('div', { class: 'dlg-body' }, o.body) : null,
      code?.row, n.el,
      h('div', { class: 'actions end' }, cancel, alt, ok));
    const d = h('dialog', { class: o.danger ? 'dlg danger' : 'dlg', 'aria-labelledby': titleId, role: o.danger ? 'alertdialog' : null }, f);
    let result = false;
    const close = () => d.close();
    d.addEventListener('close', () => {
      d.remove();
      back?.focus();
      resolve(result);
    });
    cancel.addEventListener('click', close);
    alt?.addEventListener('click', () => void busy([ok, cancel, alt], n, async () => {
      await o.alt?.action();
      result = true;
      close();
    }));
    f.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (!validate(f)) return;
      void busy([ok, cancel], n, async () => {
        try {
          await o.action?.(code?.input.value.trim() ?? '');
        } catch (e) {
          // A refused code is said at the code, like a wrong password.
          if (!code || !(e instanceof ApiError) || ![400, 401, 403, 429].includes(e.status)) throw e;
          code.error(describeError(e));
          return;
        }
        result = true;
        close();
      }).then(() => { if (!result) { code?.input.select(); code?.input.focus(); } });
    });
    document.body.append(d);
    d.showModal();
    (code?.input ?? cancel).focus();
  });
}

/** A dialog around what build puts in box; close() ends it. Escape closes
 * it only when cancellable (the session-expired login is not). */
export function modal(title: string, build: (box: HTMLElement, close: () => void) => void, cancellable = false): Promise<void> {
  return new Promise((resolve) => {
    const back = document.activeElement as HTMLElement | null;
    const titleId = nextId('dlg');
    const box = h('div');
    const d = h('dialog', { class: 'dlg', 'aria-labelledby': titleId }, h('h2', { id: titleId }, title), box);
    if (!cancellable) d.addEventListener('cancel', (ev) => ev.preventDefault());
    d.addEventListener('close', () => { d.remove(); if (back?.isConnected) back.focus(); resolve(); });
    document.body.append(d);
    d.showModal();
    build(box, () => d.close());
  });
}
