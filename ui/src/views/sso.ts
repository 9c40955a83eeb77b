// Single sign-on: the OpenID provider the dashboard's "Sign in with
// <name>" goes through, and who may enter. The client secret is kept by
// the daemon (sealed) and never shown back.
import type { AuthStatus, Message } from '../api';
import type { Ctx } from '../ctx';
import { busy, card, checkbox, copyBox, field, form, h, notice, refill } from '../dom';

interface SSOSettings {
  enabled: boolean; name: string; issuer: string; client_id: string; has_secret: boolean;
  emails: string[]; email_domains: string[]; groups: string[]; groups_claim: string;
}
interface SSOView { settings: SSOSettings; redirect_uri: string }

const list = (v: string) => v.split(/[,\s]+/).map((s) => s.trim()).filter(Boolean);

export function ssoCard(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  const n = notice();
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const load = () => busy([], n, async () => {
    const v = await api.get<SSOView>('/api/auth/sso');
    const s = v.settings;
    const on = checkbox('Offer “Sign in with …” on the login page');
    on.input.checked = s.enabled;
    const name = field('Name', { type: 'text', name: 'name', value: s.name, placeholder: 'SSO', maxlength: 40 }, 'Shown as “Sign in with <name>”.');
    const issuer = field('Issuer URL', { type: 'text', name: 'issuer', value: s.issuer, inputmode: 'url', spellcheck: 'false', placeholder: 'https://auth.example.com' },
      'Where the provider answers /.well-known/openid-configuration.');
    const client = field('Client ID', { type: 'text', name: 'client_id', value: s.client_id, autocomplete: 'off', spellcheck: 'false' });
    const secret = field('Client secret', { type: 'password', name: 'client_secret', autocomplete: 'new-password', placeholder: s.has_secret ? 'kept; type to replace' : '' });
    const emails = field('Allowed emails', { type: 'text', name: 'emails', value: s.emails.join(', '), spellcheck: 'false' }, 'Separated by commas.');
    const domains = field('Allowed email domains', { type: 'text', name: 'email_domains', value: s.email_domains.join(', '), spellcheck: 'false' }, 'Anyone whose verified email is under one of these.');
    const groups = field('Allowed groups', { type: 'text', name: 'groups', value: s.groups.join(', '), spellcheck: 'false' }, 'Members of any of these groups, from the claim below.');
    const claim = field('Groups claim', { type: 'text', name: 'groups_claim', value: s.groups_claim, placeholder: 'groups', spellcheck: 'false' });
    const f = form({ label: 'Single sign-on settings', submit: 'Save single sign-on' },
      [on.row, name.row, issuer.row, client.row, secret.row, emails.row, domains.row, groups.row, claim.row], async (fn) => {
        await api.put<SSOView>('/api/auth/sso', {
          enabled: on.input.checked, name: name.input.value.trim(), issuer: issuer.input.value.trim(), client_id: client.input.value.trim(),
          client_secret: secret.input.value, emails: list(emails.input.value), email_domains: list(domains.input.value),
          groups: list(groups.input.value), groups_claim: claim.input.value.trim(),
        });
        // The form stays as typed; only the secret field empties (it is
        // kept now, never shown back).
        secret.input.value = '';
        secret.input.placeholder = 'kept; type to replace';
        fn.ok('Saved.');
      });
    // Password sign-in: off only while another way in remains.
    const st = await api.get<AuthStatus>('/api/auth/status');
    const pw = checkbox('Allow password sign-in');
    pw.input.checked = st.password_login !== false;
    pw.input.addEventListener('change', () => void busy([], n, async () => {
      try {
        n.ok((await api.put<Message>('/api/auth/password-login', { on: pw.input.checked })).message);
      } catch (e) {
        pw.input.checked = !pw.input.checked;
        throw e;
      }
    }));
    refill(body,
      h('p', null, 'Register this redirect URI at the provider, for a confidential client (authorization code with PKCE):'),
      copyBox(v.redirect_uri, 'Copy the redirect URI'),
      f.form,
      h('h3', null, 'Password sign-in'),
      h('p', null, 'Turn it off only while single sign-on or a passkey alone signs in. Root on the VPS can always turn it back on with ',
        h('code', null, 'sudo tunnelsvc reset-password'), '.'),
      pw.row);
  });
  void load();
  return card('Single sign-on (OpenID Connect)', n.el, body);
}
