// API tokens: long-lived credentials for scripts and CI (Authorization:
// Bearer), each with a scope and an expiry; the secret is shown once.
import { ask } from '../dialog';
import type { Ctx } from '../ctx';
import { busy, card, clear, clearFieldErrors, copyBox, field, form, h, notice, refill, rowButton, select, table, time } from '../dom';
import { dismiss, getSecret, keep } from '../secrets';

export interface APIToken {
  id: number; name: string; scope: 'read' | 'write'; created_at: string; expires_at: string;
  last_used_at: string | null; last_used_addr: string; expired: boolean; token?: string;
}

export function apiTokens(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const listNotice = notice();
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const shown = h('div');
  const showToken = (name: string, token: string) => {
    const done = h('button', { type: 'button', class: 'secondary small' }, 'I have saved it');
    done.addEventListener('click', () => { dismiss('api-token'); clear(shown); });
    clear(shown, h('div', { class: 'callout' },
      h('p', null, h('strong', null, `API token “${name}” — shown only now.`), ' Send it as ',
        h('code', null, 'Authorization: Bearer <token>'), '.'),
      copyBox(token, `Copy the API token ${name}`, 'cmd token'), h('div', { class: 'actions' }, done)));
  };
  const kept = getSecret('api-token');
  if (kept) showToken(kept.data.name as string, kept.data.token as string);
  // A revoked token is gone everywhere: its secret on this card and in the
  // banner that leads back to it, and what the form said about its name.
  const forget = (id: number) => {
    if (getSecret('api-token')?.data.id === id) {
      dismiss('api-token');
      clear(shown);
    }
    clearFieldErrors(create.form);
    create.notice.clear();
  };

  const load = () => busy([], listNotice, async () => {
    const ts = (await api.get<APIToken[]>('/api/tokens')) ?? [];
    refill(body, table(['Name', 'Scope', 'Expires', 'Last used', ''], ts.map((t) => [
      h('strong', null, t.name),
      t.scope === 'read' ? 'read (GET only)' : 'write',
      t.expired ? h('span', { class: 'bad-text' }, 'expired') : time(t.expires_at),
      t.last_used_at ? h('span', null, time(t.last_used_at), t.last_used_addr ? ` from ${t.last_used_addr}` : '') : 'never',
      rowButton('Revoke', t.name, async (b) => {
        if (!await ask({ title: `Revoke the API token “${t.name}”?`, body: h('p', null, 'Anything using it gets 401 from its next request.'), confirm: 'Revoke the token', danger: true })) return;
        void busy(b, listNotice, async () => {
          await api.del(`/api/tokens/${t.id}`);
          forget(t.id);
          listNotice.ok(`Revoked “${t.name}”.`);
          await load();
        });
      }, 'danger small'),
    ]), 'No API tokens yet.', 'API tokens'));
  });

  const name = field('Name', { type: 'text', name: 'name', required: true, maxlength: 64, autocomplete: 'off', placeholder: 'ci' },
    'Shown in the audit log beside what the token does.');
  const scope = select('Scope', [['read', 'read: GET requests only'], ['write', 'write: every route a token may use']], { name: 'scope' });
  const days = field('Expires in (days)', { type: 'number', name: 'expires_in_days', min: 1, max: 365, value: '30', required: true });
  const create = form({ label: 'New API token', submit: 'Create token' }, [name.row, scope.row, days.row], async () => {
    const t = await api.post<APIToken>('/api/tokens', { name: name.input.value.trim(), scope: scope.input.value, expires_in_days: Number(days.input.value) });
    keep({ key: 'api-token', route: 'security/tokens', what: `the API token ${t.name}`, data: { id: t.id, name: t.name, token: t.token ?? '' } });
    showToken(t.name, t.token ?? '');
    name.input.value = '';
    await load();
  });
  ctx.sub(['api_tokens'], () => void load());
  void load();
  return h('div', null,
    card('API tokens',
      h('p', null, 'For scripts and CI: ', h('code', null, 'Authorization: Bearer <token>'),
        ' on the API, with or without two-factor, for at most a year. No token manages identity (tokens, two-factor, passkeys, single sign-on, ',
        'the password, edges), generates, uploads or downloads a private key, or does what needs a recent sign-in. ',
        'Resetting the password on the VPS revokes every token.'),
      shown, listNotice.el, body),
    card('New API token', create.form));
}
