// The app shell: asks the daemon for the auth state, then shows setup,
// login or the dashboard with hash routes (#/overview, #/machines, #/security).
import './style.css';
import { Api, describeError, type AuthStatus, type Message } from './api';
import type { Ctx, View } from './ctx';
import { clear, h } from './dom';
import { loginView, setupView } from './views/auth';
import { machinesView } from './views/machines';
import { overviewView } from './views/overview';
import { securityView } from './views/security';

const routes: Record<string, { title: string; view: View }> = {
  overview: { title: 'Overview', view: overviewView },
  machines: { title: 'Machines', view: machinesView },
  security: { title: 'Security', view: securityView },
};

const app = document.getElementById('app') as HTMLElement;
const api = new Api();
let auth: AuthStatus | null = null;
let cleanup: (() => void) | void;

const currentRoute = () => location.hash.replace(/^#\/?/, '').split('?')[0] || 'overview';

function go(route: string): void {
  if (currentRoute() === route && location.hash) void render();
  else location.hash = `#/${route}`;
}

const ctx: Ctx = {
  api,
  authChanged: (route) => {
    auth = null;
    go(route);
  },
};
api.onUnauthorized = () => ctx.authChanged('login');

async function render(): Promise<void> {
  if (cleanup) cleanup();
  cleanup = undefined;
  if (!auth) {
    try {
      auth = await api.get<AuthStatus>('/api/auth/status');
    } catch (e) {
      const retry = h('button', { type: 'button', onclick: () => void render() }, 'Try again');
      clear(app, h('main', { class: 'auth' }, h('h1', null, 'tunnelsvc'),
        h('p', { class: 'notice error', role: 'alert' }, describeError(e)), retry));
      return;
    }
  }
  const route = currentRoute();
  const main = h('main', { id: 'main', tabindex: -1 });
  if (!auth.setup) {
    if (route !== 'setup') return go('setup');
    clear(app, main);
    document.title = 'Set up · tunnelsvc';
    cleanup = setupView(main, ctx);
    return;
  }
  if (!auth.authenticated) {
    if (route !== 'login') return go('login');
    clear(app, main);
    document.title = 'Log in · tunnelsvc';
    cleanup = loginView(main, ctx);
    return;
  }
  const r = routes[route];
  if (!r) return go('overview');
  clear(app, shell(route), main);
  document.title = `${r.title} · tunnelsvc`;
  cleanup = r.view(main, ctx);
}

function shell(active: string): HTMLElement {
  const logout = h('button', { type: 'button', class: 'secondary' }, 'Log out');
  logout.addEventListener('click', async () => {
    logout.disabled = true;
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

window.addEventListener('hashchange', () => void render());
void render();
