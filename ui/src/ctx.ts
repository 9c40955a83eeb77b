import type { Api } from './api';

/** What every view gets from the app shell. */
export interface Ctx {
  api: Api;
  /** Forget the cached auth state and go to a route (e.g. after login). */
  authChanged: (route: string) => void;
  /** Go to a route ("machines/3"). */
  go: (route: string) => void;
  /** Refresh with fn whenever one of the topics changes, while the view shows. */
  sub: (topics: string[], fn: () => void) => void;
  /** The page's name in the title bar and its h1, once known. */
  title: (t: string) => void;
}

/** A view fills root and may return a cleanup run when the route changes. */
export type View = (root: HTMLElement, ctx: Ctx, params: string[]) => void | (() => void);
