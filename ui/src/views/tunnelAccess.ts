// The access gate of an HTTP tunnel in the tunnel form: who may reach the
// site (public, the operator, or a shared password) and an optional list of
// addresses. Self-contained: the form adds rows() and merges body().
import { field, h, select, textarea } from '../dom';

export interface AccessControl {
  rows: HTMLElement[];
  /** Shows the rows for HTTP tunnels only. */
  sync: (http: boolean) => void;
  /** The access fields of the request body (only for HTTP tunnels). */
  body: () => Record<string, unknown>;
  /** Back to the defaults (public, no password, no list). */
  reset: () => void;
  /** Whether single sign-on is on: while it is not, choosing "sso" says
   * why it cannot work (the API refuses it too). */
  setSSO: (on: boolean) => void;
}

/** The access rows, filled from an existing tunnel when one is edited: a
 * blank password then keeps the one it has. */
export function accessControl(init: { access?: string; allow_ips?: string[]; has_password?: boolean; sso_allow?: string[];
  rules?: AccessRule[]; remember_days?: number } = {}): AccessControl {
  // The names are the API's, so its errors land at the right field.
  const mode = select('Access', [
    ['public', 'Public: anyone'],
    ['operator', 'Operator: only a browser signed in to this dashboard'],
    ['password', 'Password: a shared password'],
    ['sso', 'Single sign-on: people you list, through the dashboard\'s provider'],
  ], { name: 'access' });
  const who = field('Who may enter', { type: 'text', name: 'sso_allow', autocomplete: 'off', spellcheck: 'false', placeholder: 'ana@example.com, @example.com, group:ops' },
    'Emails, @domains and group:names, comma-separated. They sign in through Security → Single sign-on\'s provider; the app gets X-Forwarded-User and X-Forwarded-Email.');
  const pw = field('Shared password', { type: 'password', name: 'password', autocomplete: 'new-password', minlength: 8 },
    { hint: 'At least 8 characters, not easy to guess. Whoever should see the site signs in with it.', invalid: 'At least 8 characters.' });
  const ips = field('Allowed addresses', { type: 'text', name: 'allow_ips', autocomplete: 'off', spellcheck: 'false', placeholder: '203.0.113.0/24, 2001:db8::1' },
    'Optional: addresses and CIDRs, comma-separated; others are refused.');
  const remember = field('Remember sign-ins for (days)', { type: 'number', name: 'remember_days', min: 0, max: 90, placeholder: '1', value: init.remember_days || undefined },
    'Optional: how long a visitor stays signed in on their device, up to 90 days (default: a day). Signing everyone out ends it.');
  const rulesField = textarea('Path rules', { name: 'rules', rows: 3, autocomplete: 'off', spellcheck: 'false', placeholder: 'allow /api/*\ndeny /admin*' },
    'Optional, one per line, the first that matches decides: "allow /api/*" lets a path through without the gate (an app\'s API), "deny /admin*" closes it to everyone, "gate" asks the gate. A path ending with * covers everything under it.');
  const rules = rulesField.input;
  if (init.rules?.length) rules.value = init.rules.map((r) => `${r.action} ${r.path}`).join('\n');
  // Shown while "sso" is chosen and single sign-on is not on.
  const ssoOff = h('p', { class: 'bad-text small', hidden: true, role: 'status' },
    'Single sign-on is not set up, so nobody could sign in to this site: set it up in ',
    h('a', { href: '#/security' }, 'Security → Single sign-on'), ' first.');
  let ssoOn = true;
  if (init.access) mode.input.value = init.access;
  if (init.allow_ips?.length) ips.input.value = init.allow_ips.join(', ');
  if (init.sso_allow?.length) who.input.value = init.sso_allow.join(', ');
  let http = true;
  const syncMode = () => {
    pw.row.hidden = !http || mode.input.value !== 'password';
    who.row.hidden = !http || mode.input.value !== 'sso';
    ssoOff.hidden = !http || mode.input.value !== 'sso' || ssoOn;
    remember.row.hidden = !http || (mode.input.value !== 'password' && mode.input.value !== 'sso');
    who.input.required = !who.row.hidden;
    // Editing a tunnel that has a password: blank keeps it.
    pw.input.required = !pw.row.hidden && !(init.has_password && init.access === 'password');
  };
  mode.input.addEventListener('change', syncMode);
  const sync = (isHTTP: boolean) => {
    http = isHTTP;
    mode.row.hidden = !http;
    ips.row.hidden = !http;
    rulesField.row.hidden = !http;
    syncMode();
  };
  const body = () => {
    const out: Record<string, unknown> = {
      access: mode.input.value,
      allow_ips: ips.input.value.split(',').map((s) => s.trim()).filter((s) => s !== ''),
    };
    if (mode.input.value === 'password' && pw.input.value !== '') out.password = pw.input.value;
    if (mode.input.value === 'sso') out.sso_allow = who.input.value.split(',').map((s) => s.trim()).filter((s) => s !== '');
    if (!remember.row.hidden) out.remember_days = Number(remember.input.value || 0);
    out.rules = parseRules(rules.value);
    return out;
  };
  const reset = () => {
    mode.input.value = 'public';
    pw.input.value = '';
    ips.input.value = '';
    who.input.value = '';
    remember.input.value = '';
    rules.value = '';
    syncMode();
  };
  const setSSO = (on: boolean) => {
    ssoOn = on;
    syncMode();
  };
  return { rows: [mode.row, ssoOff, pw.row, who.row, remember.row, ips.row, rulesField.row], sync, body, reset, setSSO };
}

export interface AccessRule { path: string; action: string }

/** The rules box's lines, "<action> <path>" each, as the API takes them;
 * a line the server cannot read is sent as it is, for its words at the
 * field (rules[N]...). */
export function parseRules(text: string): AccessRule[] {
  return text.split('\n').map((l) => l.trim()).filter((l) => l !== '').map((l) => {
    const [action, ...rest] = l.split(/\s+/);
    return { action: action.toLowerCase(), path: rest.join(' ') };
  });
}

/** A tunnel's access, as the tunnel list shows it: who may reach it and
 * from where, in a line of its own that wraps. */
export function accessLabel(t: { kind?: string; access?: string; allow_ips?: string[]; sso_allow?: string[] }): Node | string {
  const parts: string[] = [];
  if (t.access === 'operator') parts.push('operator only');
  else if (t.access === 'password') parts.push('shared password');
  else if (t.access === 'sso') parts.push(`single sign-on: ${(t.sso_allow ?? []).join(', ')}`);
  if (t.allow_ips && t.allow_ips.length > 0) parts.push(`only from ${t.allow_ips.join(', ')}`);
  return parts.length ? h('div', { class: 'small muted access' }, `Access: ${parts.join('; ')}`) : '';
}
