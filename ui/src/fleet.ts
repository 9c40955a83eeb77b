// Fleet updates in words (issue 26): a machine's update state as a badge's
// text and tone, who an "Update all" picks, the daemon's downgrade answer
// and the last fleet update's summary. Pure: no DOM, so the unit tests run
// it in node (tsconfig.test.json).
import type { FleetUpdate, Machine } from './api';

export type Tone = 'good' | 'warn' | 'bad' | '';

/** Whether the daemon knows the machine's standing: it has an update
 * state, and a bundle to update to (a daemon without one calls every
 * machine outdated, to no version). */
export function known(m: Machine): boolean {
  const u = m.update;
  return !!u?.state && !(u.state === 'outdated' && !u.target_version);
}

/** The badge of a machine's update state, and why it failed (null when
 * the daemon predates fleet updates or has no bundle to update to). */
export function updateBadge(m: Machine): { text: string; tone: Tone; why: string } | null {
  const u = m.update;
  if (!u?.state || !known(m)) return null;
  const to = u.target_version || '';
  switch (u.state) {
    case 'current': return { text: 'up to date', tone: 'good', why: '' };
    case 'outdated': return { text: `outdated: ${to} is available`, tone: 'warn', why: '' };
    case 'unknown': return { text: 'version not reported yet', tone: '', why: '' };
    case 'updating': return { text: to ? `updating to ${to}` : 'updating', tone: '', why: '' };
    case 'failed': return { text: 'update failed', tone: 'bad', why: u.error || 'the daemon gave no reason' };
    case 'rolled_back': return { text: 'update rolled back', tone: 'bad', why: u.error || 'the daemon gave no reason' };
    case 'unsupported': return { text: 'agent too old to update itself', tone: 'warn', why: '' };
  }
  return { text: u.state, tone: '', why: u.error || '' };
}

/** Whether an Update button is shown (the machine lacks the server's
 * bundle, or may), and why it is disabled ('' when it can work). */
export function updateOffer(m: Machine): { show: boolean; blocked: string } {
  const u = m.update;
  const s = u?.state;
  if (!u || !known(m) || !(s === 'outdated' || s === 'failed' || s === 'rolled_back' || s === 'unknown')) return { show: false, blocked: '' };
  // A daemon that does not say can_update: the update is tried.
  if (u.can_update === undefined) return { show: s !== 'unknown', blocked: '' };
  return { show: true, blocked: u.can_update ? '' : (u.blocked || 'it cannot take an update now') };
}

/** "3 machines are left out: 2 because it is offline, …", or '' when none. */
export function skipsLine(skips: { reason: string; machines: number }[] | undefined): string {
  const xs = (skips ?? []).filter((x) => x.machines > 0);
  if (!xs.length) return '';
  const n = xs.reduce((a, x) => a + x.machines, 0);
  const plural = (k: number) => (k === 1 ? '1 machine' : `${k} machines`);
  return `${plural(n)} ${n === 1 ? 'is' : 'are'} left out: ${xs.map((x) => `${plural(x.machines)} because ${x.reason}`).join('; ')}.`;
}

/** "agent A · tunnel client 0.61.1 · bundle A", or '' when none is known. */
export function versionsLine(m: Machine): string {
  const parts: [string, string | undefined][] = [['bundle', m.bundle_version], ['agent', m.agent_version], ['tunnel client', m.client_version]];
  return parts.filter(([, v]) => v).map(([k, v]) => `${k} ${v}`).join(' · ');
}

/** The version a 409 downgrade answer says to send ({"version": "W"}), or
 * null when the answer is not about a downgrade. */
export function downgradeTo(message: string): string | null {
  const m = /newer than this server's \S+; to go back to \S+, send \{"version": "([^"]+)"\}/.exec(message);
  return m ? m[1] : null;
}

/** The last fleet update in words, or null when none ran. */
export function fleetSummary(f: FleetUpdate | null | undefined, names: Map<number, string>): { running: boolean; lines: string[]; failed: { name: string; why: string } | null } | null {
  if (!f || !f.started_at || !(f.machine_ids ?? []).length) return null;
  const n = (xs: number[] | undefined) => (xs ?? []).length;
  const plural = (k: number) => `${k} machine${k === 1 ? '' : 's'}`;
  const on = f.edge ? ` on edge ${f.edge}` : '';
  const lines = [f.running ? `Running${on}: ${plural(n(f.machine_ids))}, one first, then in groups.` : `Finished${on}: ${plural(n(f.machine_ids))}.`,
    `Updated: ${n(f.updated)}.`];
  const failed = f.failed ? { name: f.failed.name || names.get(f.failed.machine_id) || `#${f.failed.machine_id}`, why: f.failed.error || 'no reason given' } : null;
  if (n(f.untouched)) {
    const who = (f.untouched ?? []).map((id) => names.get(id) ?? `#${id}`);
    lines.push(`Untouched: ${n(f.untouched)} (${who.slice(0, 5).join(', ')}${who.length > 5 ? ', …' : ''}).`);
  } else lines.push('Untouched: 0.');
  return { running: f.running, lines, failed };
}

