// First-run setup, login and the 2FA step of login.
import { ApiError, type LoginResult, type Message } from '../api';
import type { View } from '../ctx';
import { clear, field, form, h } from '../dom';

export const setupView: View = (root, ctx) => {
  const pw = field('New password', { type: 'password', autocomplete: 'new-password', required: true, minlength: 8 },
    'At least 8 characters and not easy to guess.');
  const pw2 = field('Repeat the password', { type: 'password', autocomplete: 'new-password', required: true });
  const code = field('Setup code', { type: 'text', autocomplete: 'off', spellcheck: 'false' });
  const codeHelp = h('div', { class: 'callout', hidden: true },
    h('p', null, 'This browser is not on the server itself, so setting the password needs the one-time setup code. ',
      'On the server run ', h('code', null, 'tunnelsvc setup-code'),
      ' (or read it from the daemon\'s log at its first start) and enter it here.'),
    code.row);
  const f = form({ label: 'Set the operator password', submit: 'Set password' }, [pw.row, pw2.row, codeHelp], async (n) => {
    if (pw.input.value !== pw2.input.value) {
      n.error(new Error('The two passwords do not match.'));
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
        code.input.focus();
      }
      if (e instanceof ApiError && e.status === 409) {
        ctx.authChanged('login');
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

export const loginView: View = (root, ctx) => {
  const box = h('div', { class: 'auth' });
  clear(root, box);

  const passwordStep = () => {
    const pw = field('Password', { type: 'password', autocomplete: 'current-password', required: true });
    const f = form({ label: 'Log in', submit: 'Log in' }, [pw.row], async () => {
      const r = await ctx.api.post<LoginResult>('/api/auth/login', { password: pw.input.value });
      if (r.needs_2fa && r.pending_token) codeStep(r.pending_token);
      else ctx.authChanged('overview');
    });
    clear(box, h('h1', null, 'Log in to tunnelsvc'), f.form);
    pw.input.focus();
  };

  const codeStep = (pending: string) => {
    const code = field('Authentication code', { type: 'text', inputmode: 'numeric', autocomplete: 'one-time-code', required: true },
      'The 6-digit code from your authenticator app, or a backup code.');
    const f = form({ label: 'Two-factor authentication', submit: 'Verify' }, [code.row], async () => {
      await ctx.api.post<Message>('/api/auth/login/2fa', { pending_token: pending, code: code.input.value.trim() });
      ctx.authChanged('overview');
    });
    const back = h('button', { type: 'button', class: 'link', onclick: passwordStep }, 'Start over');
    clear(box, h('h1', null, 'Two-factor authentication'), f.form, back);
    code.input.focus();
  };

  passwordStep();
};
