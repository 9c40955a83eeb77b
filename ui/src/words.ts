// Short phrases for the long reasons the daemon gives (a failed config
// delivery, a probe that found nothing, an agent that does not answer):
// tables show the phrase, and the whole text is one click (or a hover)
// away. The daemon's words come first; Go error chains ("dial tcp
// 127.0.0.1:27989: connect: connection refused") are only in the details.
import type { DatabaseInfo } from './api';
import { h, type Child } from './dom';

/** The cause of a failure in a few words. */
export function cause(s: string): string {
  const t = s.toLowerCase();
  if (/agent (of machine \d+ )?(is not reachable|does not answer)/.test(t)) return 'agent not answering';
  if (/another program answers on the machine's agent port/.test(t)) return 'another program on the agent port';
  if (/the machine refused the config/.test(t)) return 'the machine refused the config';
  if (/tls connection to the web proxy failed/.test(t)) {
    return /nothing accepts connections|connection refused|no route|unreachable|cannot be reached|no answer from|timeout|timed out/.test(t)
      ? 'web proxy not answering' : 'TLS to the web proxy failed';
  }
  if (/proxy answered 50[234]|service does not answer/.test(t)) return "the machine's service does not answer";
  if (/no http answer/.test(t)) return 'no HTTP answer';
  if (/connection refused|nothing accepts connections/.test(t)) return 'connection refused';
  if (/i\/o timeout|deadline exceeded|timed out|timeout/.test(t)) return 'no answer in time';
  if (/no such host|does not resolve/.test(t)) return 'name does not resolve';
  if (/x509|certificate/.test(t)) return 'certificate not valid';
  return clip(s);
}

/** A long reason in a few words; short ones as they are. */
export function brief(s: string): string {
  const t = s.trim();
  let m: RegExpExecArray | null;
  if ((m = /^config not delivered: (.+)$/s.exec(t))) return `config not delivered: ${cause(m[1])}`;
  if ((m = /^waiting for .+ to apply config generation \d+(?:: (.+))?$/s.exec(t))) {
    return m[1] ? `waiting for its machine: ${cause(m[1])}` : 'waiting for its machine to take the change';
  }
  if ((m = /^the config of .+ has not been delivered for ([^:]+): (.+)$/s.exec(t))) return `config not delivered for ${m[1]}: ${cause(m[2])}`;
  if (/^the config of .+ cannot be rendered/s.test(t)) return 'its config cannot be built';
  if (/^its machine's tunnel client closed it/.test(t)) return 'its machine disconnected';
  if (/^waiting for the tunnel server to accept it/.test(t)) return 'waiting for the tunnel server';
  if (/tunnel-agent is outdated/.test(t)) return 'agent outdated: run bootstrap.sh again';
  // Why an update failed (daemon/fleet).
  if (/^the machine's agent does not answer/.test(t)) return 'agent not answering';
  if (/^the agent refused the update/.test(t)) return 'the agent refused the update';
  if (/^the server has no bundle for this machine/.test(t)) return 'no bundle for this machine';
  if (/^the new agent runs, but did not take the confirmation/.test(t)) return 'the new agent did not confirm';
  // A certificate's problem by its name ("certificate not renewed"), the
  // dates and where to look on demand.
  if ((m = /^((?:no )?certificate[^:(]*):/.exec(t))) return m[1].trim();
  // The daemon's own words stay; what looks like a Go error chain goes.
  if (!TECHNICAL.test(t)) return t;
  return cause(t);
}

/** Why an update failed in a few words: the machine's own long reasons
 * (a rollback's) are cut to their first clause too. */
export function briefUpdate(s: string): string {
  const b = brief(s);
  return b === s.trim() && b.length > 60 ? cause(b) : b;
}

const TECHNICAL = /\b(dial|read|write) (tcp|udp)|: connect:|lookup \S+ on |\d+\.\d+\.\d+\.\d+:\d+|\[[0-9a-f:]+\]:\d+|x509:|tls:|context deadline|: EOF$/;

/** The first clause of a sentence, at most about 48 characters. */
function clip(s: string): string {
  let t = s.split(/: (?:dial|read|write|connect|Get|Post|Put) /)[0].split(' (')[0];
  if (t.length > 48) t = `${t.slice(0, 46).replace(/\s+\S*$/, '')}…`;
  return t;
}

/**
 * A reason in a table cell: the short phrase, and the whole text when it
 * says more (in a details element: a click, Enter or a hover shows it).
 */
export function reason(text?: string | null, cls = 'muted small', shorten: (s: string) => string = brief): Child {
  if (!text) return null;
  const short = shorten(text);
  if (short === text) return h('div', { class: `${cls} why` }, text);
  return h('details', { class: `why ${cls}` },
    h('summary', { title: text }, short),
    h('p', null, text));
}

/**
 * The database in words: "SQLite (/var/lib/tunnelsvc/tunnelsvc.db)" or
 * "PostgreSQL at db.example.com/tunnelsvc (TLS: verify-full)". The URL
 * comes redacted from the daemon; only its host, database and sslmode are
 * shown.
 */
export function describeDatabase(d?: DatabaseInfo): string {
  if (!d) return 'unknown';
  if (d.engine === 'sqlite') return d.path ? `SQLite (${d.path})` : 'SQLite';
  let u: URL;
  try { u = new URL(d.url); } catch { return 'PostgreSQL'; }
  const db = decodeURIComponent(u.pathname.replace(/^\//, ''));
  // No host: libpq's default, the local Unix socket.
  const where = u.host ? `${u.host}${db ? `/${db}` : ''}` : `the local socket${db ? `, database ${db}` : ''}`;
  // Without sslmode the driver uses "prefer": TLS if offered, unverified.
  const tls = u.searchParams.get('sslmode') ?? 'prefer, not verified';
  return `PostgreSQL at ${where} (TLS: ${tls})`;
}
