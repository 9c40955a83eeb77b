// An http tunnel's ways in for apps and its visitors' sign-ins, in its
// Edit dialog: bypass tokens (an app sends one instead of following a
// sign-in page; the secret is shown once) and "Sign everyone out".
import { ask } from '../dialog';
import type { BypassToken, Tunnel } from '../api';
import type { Ctx } from '../ctx';
import { busy, clear, copyBox, field, form, h, notice, refill, rowButton, table, time } from '../dom';

export function tunnelApps(ctx: Ctx, t: Tunnel): HTMLElement {
  const api = ctx.api;
  const path = `/api/tunnels/${t.id}/bypass-tokens`;
  const listNotice = notice();
  const list = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const shown = h('div');
  const load = () => busy([], listNotice, async () => {
    const ts = (await api.get<BypassToken[]>(path)) ?? [];
    refill(list, table(['Name', 'Expires', ''], ts.map((b) => [
      h('strong', null, b.name),
      b.expired ? h('span', { class: 'bad-text' }, 'expired') : time(b.expires_at),
      rowButton('Revoke', b.name, async (btn) => {
        if (!await ask({ title: `Revoke the token “${b.name}”?`, body: h('p', null, `An app sending it gets 401 at ${t.name} from its next request.`), confirm: 'Revoke the token', danger: true })) return;
        void busy(btn, listNotice, async () => {
          await api.del(`${path}/${b.id}`);
          clear(shown);
          listNotice.ok(`Revoked “${b.name}”.`);
          await load();
        });
      }, 'danger small'),
    ]), 'No app tokens yet.', `App tokens of ${t.name}`));
  });
  const name = field('Token name', { type: 'text', name: 'name', required: true, maxlength: 64, autocomplete: 'off', placeholder: 'ios-app' },
    'Letters, digits, . _ -; in the audit log, and what the app gets as X-Forwarded-User (token:<name>) behind an operator or single sign-on gate.');
  const days = field('Expires in (days)', { type: 'number', name: 'expires_in_days', min: 1, max: 730, value: '90', required: true });
  const make = form({ label: `New app token for ${t.name}`, submit: 'Make a token' }, [name.row, days.row], async () => {
    const b = await api.post<BypassToken>(path, { name: name.input.value.trim(), expires_in_days: Number(days.input.value) });
    clear(shown, h('div', { class: 'callout' },
      h('p', null, h('strong', null, `Token “${b.name}” — shown only now.`), ' The app sends it as ',
        h('code', null, 'Authorization: Bearer <token>'), ' or ', h('code', null, 'X-Tunnel-Token: <token>'), '; the site never sees it.'),
      copyBox(b.token ?? '', `Copy the token ${b.name}`, 'cmd token')));
    name.input.value = '';
    await load();
  });
  const outNotice = notice();
  const signOut = h('button', { type: 'button', class: 'secondary' }, 'Sign everyone out');
  signOut.addEventListener('click', async () => {
    if (!await ask({ title: `Sign every visitor of ${t.name} out?`, body: h('p', null, 'Remembered devices included; they sign in again at their next visit. App tokens keep working.'), confirm: 'Sign everyone out', danger: true })) return;
    void busy(signOut, outNotice, async () => {
      await api.del(`/api/tunnels/${t.id}/sessions`);
      outNotice.ok(`Every visitor of ${t.name} is signed out.`);
    });
  });
  void load();
  return h('section', { class: 'tunnel-apps', 'aria-label': `Apps and sign-ins of ${t.name}` },
    h('h3', null, 'Apps and sign-ins'),
    h('p', { class: 'muted small' }, 'An app\'s own client cannot follow the sign-in page: give it a token instead. It passes this site\'s gate (any mode) without a cookie; a wrong one is refused with 401 and counts toward its address\'s limit.'),
    shown, listNotice.el, list, make.form,
    h('div', { class: 'actions' }, signOut), outNotice.el);
}
