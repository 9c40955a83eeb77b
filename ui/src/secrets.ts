// One-time secrets (a join command, backup codes, the metrics token) are
// shown once by the daemon. They are kept here, in memory, until the
// operator dismisses them: the page that made one shows it again on
// return, and every other page has a notice that leads back to it. A
// reload forgets them (nothing secret is written to the browser's
// storage).
import { emit } from './live';

export interface Secret {
  /** One of each kind at a time: 'join', 'backup-codes', 'metrics-token'. */
  key: string;
  /** The page that shows it ("machines", "security/2fa"). */
  route: string;
  /** What it is, for the notice: "the join command for nas". */
  what: string;
  /** The secret itself and what its page needs to show it again. */
  data: Record<string, unknown>;
}

const kept = new Map<string, Secret>();

export function keep(s: Secret): void {
  kept.set(s.key, s);
  emit('secrets');
}

export function getSecret(key: string): Secret | undefined {
  return kept.get(key);
}

export function dismiss(key: string): void {
  if (kept.delete(key)) emit('secrets');
}

export function allSecrets(): Secret[] {
  return [...kept.values()];
}

/** Forgets every secret (at logout: the next operator must not see them). */
export function forgetSecrets(): void {
  kept.clear();
  emit('secrets');
}
