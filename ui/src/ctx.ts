import type { Api } from './api';

/** What every view gets from the app shell. */
export interface Ctx {
  api: Api;
  /** Forget the cached auth state and go to a route (e.g. after login). */
  authChanged: (route: string) => void;
}

/** A view fills root and may return a cleanup run when the route changes. */
export type View = (root: HTMLElement, ctx: Ctx) => void | (() => void);
