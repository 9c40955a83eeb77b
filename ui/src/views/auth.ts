// First-run setup, login and the 2FA step of login (also used, in a
// dialog, when the session expires mid-work).
import { ApiError, describeError, isDiskFull, type Api, type AuthStatus, type LoginResult, type Message } from '../api';
import type { View } from '../ctx';
import { busy, clear, codeField, field, form, h, notice, type Field } from '../dom';
import { usePasskey } from '../passkey';

export const setupView: View = (root, ctx) => {
  const pw = field('New password', { type: 'password', name: 'password', autocomplete: 'new-password', required: true, minlength: 8 },
    'At least 8 characters and not easy to guess.');
  const pw2 = field('Repeat the password', { type: 'password', autocomplete: 'new-password', required: true });
  const code = field('Setup code', { type: 'text', autocomplete: 'off', spellcheck: 'false' });
  const codeHelp = h('div', { class: 'callout', hidden: true },
    h('p', null, 'This browser is not on the server itself, so setting the password needs the one-time setup code. ',
      'On the server run ', h('code', null, 'tunnelsvc setup-code'),
      ' (or read it from the daemon\'s log at its first start) and enter it here.'),
    code.row);
  const f = form({ label: 'Set the operator password', submit: 'Set password' }, [pw.row, pw2.row, codeHelp], async () => {
    if (pw.input.value !== pw2.input.value) {
      pw2.error('The two passwords do not match.');
      pw2.input.focus();
      return;
    }
    const headers: Record<string, string> = {};
    if (code.input.value.trim()) headers['X-Setup-Code'] = code.input.value.trim();
    try {
      await ctx.api.post<Message>('/api/auth/setup', { password: pw.input.value }, { headers });
    } catch (e) {
      if (e instanceof ApiError && e.status === 403) {
        codeHelp.hidden = false;
        code.error(e.message);
        code.input.focus();
        return;
      }
      if (e instanceof ApiError && e.status === 409) {
        ctx.authChanged('login');
        return;
      }
      if ((e instanceof ApiError && e.status === 400) || isDiskFull(e)) {
        pw.error(e.message);
        pw.input.focus();
        return;
      }
      throw e;
    }
    ctx.authChanged('overview');
  });
  clear(root, h('div', { class: 'auth' },
    h('h1', null, 'Welcome to tunnelsvc'),
    h('p', null, 'Choose the operator password that protects this dashboard.'),
    f.form));
  pw.input.focus();
};

/** Password, then a code when 2FA is on. done(true) once logged in;
 * done(false) when the operator gives up (dialog only). */
export function loginFlow(box: HTMLElement, api: Api, done: (ok: boolean) => void, heading?: (t: string) => HTMLElement): void {
  const giveUp = heading ? null : h('button', { type: 'button', class: 'link', onclick: () => done(false) }, 'Log out instead');
  const passwordStep = () => {
    const pw = field('Password', { type: 'password', name: 'password', autocomplete: 'current-password', required: true });
    const f = form({ label: 'Log in', submit: 'Log in' }, [pw.row], async () => {
      const r = await api.post<LoginResult>('/api/auth/login', { password: pw.input.value })
        .catch((e) => atField(e, pw));
      if (!r) return;
      if (r.needs_2fa && r.pending_token) codeStep(r.pending_token, r.passkey !== false);
      else done(true);
    });
    // A passkey alone, when the operator turned that on: asked after the
    // page shows, so the password form never waits for it.
    const alone = h('div');
    const an = notice();
    const pwOff = h('p', { class: 'muted', hidden: true }, 'Password sign-in is off here. If no way below works, root on the VPS turns it back on with ',
      h('code', null, 'sudo tunnelsvc reset-password'), '.');
    // Single sign-on, when set up: "Sign in with <name>" beside the form,
    // and why the last attempt did not sign in, in the provider's words.
    const ssoBox = h('div');
    // Why single sign-on sent the browser back: the URL carries a code,
    // and the daemon says its fixed sentence (never text from the URL).
    const refused = h('p', { class: 'bad-text', role: 'alert', hidden: true });
    const ssoError = hashParams().get('sso_error');
    const statusPath = ssoError ? `/api/auth/status?sso_error=${encodeURIComponent(ssoError)}` : '/api/auth/status';
    // One question to the daemon for all four (asked after the page
    // shows, so the password form never waits for it).
    void api.get<AuthStatus>(statusPath).then((st) => {
      if (st.sso_error) {
        refused.textContent = st.sso_error;
        refused.hidden = false;
      }
      if (st.password_login === false) {
        f.form.hidden = true;
        pwOff.hidden = false;
      }
      if (st.sso) {
        clear(ssoBox, h('div', { class: 'actions' }, h('a', { class: 'button secondary', href: '/api/auth/sso/start' }, `Sign in with ${st.sso}`)));
      }
      if (!st.passkey_login) return;
      const b = h('button', { type: 'button', class: 'secondary' }, 'Sign in with a passkey');
      b.addEventListener('click', () => void busy(b, an, async () => {
        const p = await usePasskey(api, '/api/auth/login/passkey/begin', {});
        await api.post<Message>('/api/auth/login/passkey', { ceremony: p.ceremony, credential: p.credential });
        done(true);
      }));
      clear(alone, h('div', { class: 'actions' }, b), an.el);
    }).catch(() => { /* the password form is there */ });
    clear(box, heading?.('Log in to tunnelsvc'), refused, pwOff, f.form, alone, ssoBox, giveUp);
    pw.input.focus();
  };
  // passkey: one is registered (offered only then).
  const codeStep = (pending: string, passkey: boolean) => {
    const code = codeField('Authentication code', 'The 6-digit code from your authenticator app, or a backup code.', true);
    const f = form({ label: 'Two-factor authentication', submit: 'Verify' }, [code.row], async () => {
      const r = await api.post<Message>('/api/auth/login/2fa', { pending_token: pending, code: code.input.value.trim() })
        .catch((e) => atField(e, code, true));
      if (r) done(true);
    });
    const back = h('button', { type: 'button', class: 'link', onclick: passwordStep }, 'Start over');
    // A passkey answers the second step instead of a code, when one is
    // registered. Both ways and "Start over" are in the card.
    const pn = notice();
    const use = passkey ? h('button', { type: 'button', class: 'secondary' }, 'Use a passkey') : null;
    use?.addEventListener('click', () => void busy(use, pn, async () => {
      const p = await usePasskey(api, '/api/auth/login/passkey/begin', { pending_token: pending });
      await api.post<Message>('/api/auth/login/passkey', { pending_token: pending, ceremony: p.ceremony, credential: p.credential });
      done(true);
    }));
    f.submit.after(...[use, back].filter((x): x is HTMLButtonElement => !!x));
    f.form.append(pn.el);
    clear(box, heading?.('Two-factor authentication'), f.form, giveUp);
    code.input.focus();
  };
  // Back from single sign-on with 2FA enrolled: the provider was the
  // first factor, and the second-factor step follows with its pending
  // login (taken out of the address bar at once).
  const back = hashParams();
  const pending = back.get('step') === '2fa' ? back.get('pending') : null;
  if (pending) {
    history.replaceState(null, '', location.pathname + location.search + '#/login');
    codeStep(pending, back.get('passkey') !== '0');
    return;
  }
  passwordStep();
}

/** The query of the address's fragment (#/login?a=b). */
function hashParams(): URLSearchParams {
  return new URLSearchParams(location.hash.split('?')[1] ?? '');
}

/** A full data disk is said at the field the operator just filled (the
 * banner says it too), and so is a refused code (like a wrong password);
 * anything else goes on to the form's own handling. */
function atField(e: unknown, f: Field, refused = false): undefined {
  if (!isDiskFull(e) && !(refused && e instanceof ApiError && [400, 401, 403, 429].includes(e.status))) throw e;
  f.error(describeError(e));
  f.input.select();
  f.input.focus();
  return undefined;
}

export const loginView: View = (root, ctx) => {
  const box = h('div', { class: 'auth' });
  clear(root, box);
  loginFlow(box, ctx.api, () => ctx.authChanged('overview'), (t) => h('h1', null, t));
};
