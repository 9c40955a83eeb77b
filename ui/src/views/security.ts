// Security, one page per subject: 2FA, SSH keys, ban tool, firewall and the
// audit log (filtered by kind, naming what changed).
import type { AuditEntry } from '../api';
import type { Ctx, View } from '../ctx';
import { busy, card, clear, h, notice, refill, select, table, time } from '../dom';
import { banTool, firewall } from './guard';
import { sshKeys } from './keys';
import { twoFA } from './twofa';
import { apiTokens } from './apitokens';
import { ssoCard } from './sso';
import { monitoringCard } from './monitoring';

// Each page's title, its tab's name (the title unless given: the eight
// tabs fit one row at desktop width), and a short name for the tabs on a
// phone (so they take two rows there, not three).
const sections: Record<string, [string, (ctx: Ctx) => HTMLElement, string?, string?]> = {
  '2fa': ['Two-factor authentication', twoFA, 'Two-factor', '2FA'],
  keys: ['SSH keys', sshKeys],
  tokens: ['API tokens', apiTokens, undefined, 'Tokens'],
  sso: ['Single sign-on', ssoCard, undefined, 'SSO'],
  ban: ['Ban tool', banTool],
  firewall: ['Firewall', firewall],
  monitoring: ['Metrics & notifications', monitoringCard, 'Metrics'],
  audit: ['Audit log', auditLog],
};

const CATEGORIES: [string, string][] = [['', 'Everything'], ['auth', 'Logins and 2FA'], ['machine', 'Machines'], ['tunnel', 'Tunnels'],
  ['token', 'Bootstrap tokens'], ['settings', 'Settings'], ['firewall', 'Firewall'], ['banner', 'Ban tool'], ['ssh_key', 'SSH keys']];

/** LOGIN_FAILED → "Login failed": words that wrap between words. */
export const kindWords = (k: string) => {
  const w = k.toLowerCase().replace(/_/g, ' ').replace(/\bssh\b/g, 'SSH').replace(/\b(totp|2fa)\b/g, '2FA')
    .replace(/\bbanner\b/g, 'ban tool').replace(/\bsetup\b/g, 'set-up');
  return w.charAt(0).toUpperCase() + w.slice(1);
};

function auditLog(ctx: Ctx): HTMLElement {
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const n = notice();
  const kind = select('Show', CATEGORIES, { name: 'kind' });
  const load = () => busy([], n, async () => {
    const q = kind.input.value ? `?kind=${encodeURIComponent(kind.input.value)}` : '';
    const entries = (await ctx.api.get<AuditEntry[]>(`/api/security/logs${q}`)) ?? [];
    refill(body, table(['Time', 'Event', 'Details', 'Client'],
      entries.map((e) => [time(e.created_at), (e.count ?? 1) > 1 ? `${kindWords(e.kind)} ×${e.count}` : kindWords(e.kind), e.detail || '—', e.client_addr || '—']), 'No events of this kind yet.', 'Audit log'));
  });
  kind.input.addEventListener('change', () => void load());
  ctx.sub(['audit'], () => void load());
  void load();
  return card('Events', h('div', { class: 'filter' }, kind.row), n.el, h('div', { class: 'audit' }, body));
}

export const securityView: View = (root, ctx, params) => {
  const key = sections[params[0]] ? params[0] : '2fa';
  const [title, build] = sections[key];
  clear(root,
    h('nav', { class: 'subnav', 'aria-label': 'Security' }, h('ul', null, Object.entries(sections).map(([k, [t, , tab, short]]) =>
      h('li', null, h('a', { href: `#/security/${k}`, 'aria-current': k === key ? 'page' : null, title: tab ? t : null },
        short ? [h('span', { class: 'long' }, tab ?? t), h('span', { class: 'short' }, short)] : tab ?? t))))),
    h('h1', null, title),
    build(ctx));
  document.title = `${title} · Security · tunnelsvc`;
};
