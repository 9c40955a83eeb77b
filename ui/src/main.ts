// The app shell: asks the daemon for the auth state, then shows setup,
// login or the dashboard with hash routes (#/overview, #/machines/3,
// #/tunnels, #/edges, #/security/keys ...). Focus goes to the page's heading on
// every navigation; a lost session opens a login dialog over the page, so
// what was typed stays and the request that met the 401 is sent again.
import './style.css';
import { Api, describeError, type AuthStatus, type Message, type StepUpState } from './api';
import type { Ctx, View } from './ctx';
import { ask, modal } from './dialog';
import { allSecrets, dismiss, forgetSecrets } from './secrets';
import { clear, h } from './dom';
import * as live from './live';
import { loginFlow, loginView, setupView } from './views/auth';
import { edgesView } from './views/edges';
import { machineView } from './views/machine';
import { machinesView } from './views/machines';
import { overviewView } from './views/overview';
import { securityView } from './views/security';
import { usePasskey } from './passkey';
import { tunnelsView } from './views/tunnels';

const routes: Record<string, { title: string; view: View }> = {
  overview: { title: 'Overview', view: overviewView },
  machines: { title: 'Machines', view: (root, ctx, p) => (p[0] ? machineView : machinesView)(root, ctx, p) },
  tunnels: { title: 'Tunnels', view: tunnelsView },
  edges: { title: 'Edges', view: edgesView },
  security: { title: 'Security', view: securityView },
};

const app = document.getElementById('app') as HTMLElement;
const api = new Api();
let auth: AuthStatus | null = null;
let cleanups: (() => void)[] = [];

const parts = () => location.hash.replace(/^#\/?/, '').split('?')[0].split('/').filter(Boolean);
const currentRoute = () => parts()[0] || 'overview';
const NEXT = 'tunnelsvc-next';

function go(route: string): void {
  navigated = true;
  if (location.hash === `#/${route}`) void render();
  else location.hash = `#/${route}`;
}

const ctx: Ctx = {
  api,
  authChanged: (route) => {
    auth = null;
    go(route);
  },
  go,
  sub: (topics, fn) => { for (const t of topics) cleanups.push(live.on(t, fn)); },
  title: (t) => {
    document.title = `${t} · tunnelsvc`;
    const h1 = app.querySelector('main h1');
    if (h1) h1.textContent = t;
  },
};

// A 401 in the middle of a session: log in again in a dialog.
let relogin: Promise<boolean> | null = null;
api.onUnauthorized = () => relogin ??= new Promise<boolean>((resolve) => {
  live.stop();
  void modal('Your session expired', (box, done) => {
    box.append(h('p', null, 'Log in again to carry on. This page and what you typed stay as they are.'));
    const flow = h('div');
    box.append(flow);
    loginFlow(flow, api, (ok) => {
      done();
      relogin = null;
      if (ok) live.start();
      else ctx.authChanged('login');
      resolve(ok);
    });
  });
});
// A sensitive change from a session that has not logged in or passed a
// step-up in the last minutes (403 'recent authentication required'):
// ask for a code (or the password) here, then the change carries on.
let stepping: Promise<boolean> | null = null;
api.onRecentAuth = () => stepping ??= (async () => {
  try {
    const st = await api.get<StepUpState>('/api/auth/step-up');
    if (st.recent) return true; // passed meanwhile, in another dialog or tab
    const totp = st.requires === 'totp';
    const minutes = Math.round(st.window_seconds / 60);
    return await ask({
      title: 'Confirm it is you',
      body: h('p', null, `This change needs a sign-in from the last ${minutes} minutes. `,
        totp ? 'Type a code from your authenticator app' : 'Type your password', ' and it carries on.'),
      confirm: 'Confirm and carry on',
      code: totp ? { label: 'Code from your authenticator app' } : { label: 'Your login password', secret: true },
      action: async (secret) => {
        await api.post<StepUpState>('/api/auth/step-up', totp ? { code: secret } : { password: secret });
      },
      alt: st.passkey ? { label: 'Use a passkey', action: async () => {
        const p = await usePasskey(api, '/api/auth/step-up/passkey');
        await api.post<StepUpState>('/api/auth/step-up', { ceremony: p.ceremony, passkey: p.credential });
      } } : undefined,
    });
  } catch {
    return false; // the change then says why it was refused
  } finally {
    stepping = null;
  }
})();
api.onOffline = live.offline;
api.onSlow = live.slow;

// One banner for a daemon that stopped answering; it goes when it is back.
const banner = h('div', { class: 'banner', role: 'alert', hidden: true });
document.body.prepend(banner);
live.on('conn', () => {
  banner.hidden = live.conn !== 'offline';
  banner.textContent = banner.hidden ? '' : 'The daemon is not answering. Trying again every few seconds; this message goes away by itself.';
});

// And one for a full data disk: the daemon answers, but logins and changes
// fail until space is freed. It goes by itself once writes work again.
const diskBanner = h('div', { class: 'banner', role: 'alert', hidden: true });
banner.after(diskBanner);
live.on('disk', () => {
  diskBanner.hidden = live.diskFull === null;
  diskBanner.textContent = live.diskFull === null ? ''
    : `The data disk is full (${live.diskFull}): logins and changes cannot be saved. Free space on it; this message goes away by itself once writes work again.`;
});
api.onDiskFull = live.watchDisk;

// And one for a database that cannot be reached (PostgreSQL restarting or
// failing over): machines and tunnels keep working, changes wait.
const dbBanner = h('div', { class: 'banner', role: 'alert', hidden: true });
diskBanner.after(dbBanner);
live.on('db', () => {
  dbBanner.hidden = !live.dbDown;
  dbBanner.textContent = live.dbDown
    ? 'The database is unavailable: machines, tunnels and gates keep working, but changes cannot be saved. This message goes away by itself once it is back.'
    : '';
});
api.onDbDown = live.watchDisk;
live.watchDisk();

async function render(): Promise<void> {
  for (const c of cleanups) c();
  cleanups = [];
  if (!auth) {
    try {
      auth = await api.get<AuthStatus>('/api/auth/status');
    } catch (e) {
      const retry = h('button', { type: 'button', onclick: () => void render() }, 'Try again');
      clear(app, h('main', { class: 'auth' }, h('h1', null, 'tunnelsvc'),
        h('p', { class: 'notice error', role: 'alert' }, describeError(e)), retry));
      cleanups.push(live.onReconnect(() => void render()));
      return;
    }
  }
  const route = currentRoute();
  const main = h('main', { id: 'main', tabindex: -1 });
  if (!auth.setup || !auth.authenticated) {
    live.stop();
    const want = auth.setup ? 'login' : 'setup';
    if (route !== want) {
      if (routes[route]) sessionStorage.setItem(NEXT, parts().join('/'));
      return go(want);
    }
    clear(app, main);
    document.title = `${auth.setup ? 'Log in' : 'Set up'} · tunnelsvc`;
    const after = () => {
      const next = sessionStorage.getItem(NEXT);
      sessionStorage.removeItem(NEXT);
      ctx.authChanged(next || 'overview');
    };
    const c = (auth.setup ? loginView : setupView)(main, { ...ctx, authChanged: (r) => (r === 'overview' ? after() : ctx.authChanged(r)) }, []);
    if (c) cleanups.push(c);
    return;
  }
  const r = routes[route];
  if (!r) return go('overview');
  live.start();
  clear(app, skipLink(), shell(route), secretsNotice(), main);
  document.title = `${r.title} · tunnelsvc`;
  const c = r.view(main, ctx, parts().slice(1));
  if (c) cleanups.push(c);
  const h1 = main.querySelector('h1');
  if (h1) {
    h1.tabIndex = -1;
    // Not on the first page of a load: there Tab starts at the skip link.
    if (navigated) h1.focus();
  }
}
let navigated = false;

function skipLink(): HTMLElement {
  return h('a', {
    class: 'skip', href: '#main',
    onclick: (e: Event) => { e.preventDefault(); (app.querySelector('main h1') as HTMLElement | null)?.focus(); },
  }, 'Skip to content');
}

// One-time secrets not yet dismissed, on every page but their own.
function secretsNotice(): HTMLElement {
  const box = h('div', { class: 'secrets' });
  const fill = () => {
    const p = parts();
    const here = p[0] === 'security' && !p[1] ? 'security/2fa' : p.join('/');
    const others = allSecrets().filter((x) => x.route !== here);
    clear(box, others.length ? h('div', { class: 'notice warn' },
      h('p', null, 'Shown only once, and kept here until you dismiss it:'),
      h('ul', null, others.map((x) => h('li', null, x.what, ': ', h('a', { href: `#/${x.route}` }, 'show it again'), ' ',
        h('button', {
          type: 'button', class: 'secondary small', 'aria-label': `Dismiss ${x.what}`,
          onclick: () => void ask({
            title: `Dismiss ${x.what}?`, body: h('p', null, 'It cannot be shown again.'), confirm: 'Dismiss', danger: true,
            action: async () => dismiss(x.key),
          }),
        }, 'Dismiss'))))) : null);
  };
  fill();
  cleanups.push(live.on('secrets', fill));
  return box;
}

function shell(active: string): HTMLElement {
  const logout = h('button', { type: 'button', class: 'secondary' }, 'Log out');
  logout.addEventListener('click', async () => {
    logout.disabled = true;
    live.stop();
    forgetSecrets();
    try {
      await api.post<Message>('/api/auth/logout');
    } catch {
      // Logout always answers 200; even when unreachable, forget locally.
    }
    ctx.authChanged('login');
  });
  return h('header', { class: 'top' },
    h('a', { class: 'brand', href: '#/overview' }, 'tunnelsvc'),
    h('nav', { 'aria-label': 'Main' },
      h('ul', null, Object.entries(routes).map(([k, r]) =>
        h('li', null, h('a', { href: `#/${k}`, 'aria-current': k === active ? 'page' : null }, r.title))))),
    logout);
}

window.addEventListener('hashchange', () => { navigated = true; void render(); });
void render();
