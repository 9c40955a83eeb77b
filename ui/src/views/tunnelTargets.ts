// One HTTP tunnel served by several machines: the form's part (more
// machines, how to balance, the health check) and the table's (each
// machine, its part's state and what its last health check found).

import type { Machine, Tunnel, TunnelTarget } from '../api';
import { badge, field, h, select, type Child } from '../dom';

export interface TargetsControl {
  rows: HTMLElement[];
  /** Shows the part for HTTP tunnels only. */
  sync: (http: boolean) => void;
  /** The API's fields: targets (own machine first), balance, health. */
  body: (own: { machine_id: number; local_port: number }) => Record<string, unknown>;
  reset: () => void;
  setMachines: (ms: Machine[]) => void;
}

/** The form's part. editing: the tunnel is saved already (its list of
 * targets is always sent, so removing the last other machine removes it). */
export function targetsControl(t: Partial<Tunnel>, editing: boolean): TargetsControl {
  let machines: Machine[] = [];
  const list = h('div', { class: 'targets' });
  const add = h('button', { type: 'button', class: 'secondary small' }, 'Add a machine');
  const more = h('fieldset', { class: 'more-targets' },
    h('legend', null, 'Also served by'),
    h('p', { class: 'muted small' }, 'Other machines running the same service. The web proxy sends visitors to the first one that answers (failover) or to each in turn, and passes over one that fails.'),
    list, add);
  const balance = select('Balance', [['failover', 'Failover: the first machine that answers, in order'], ['round_robin', 'Round robin: each machine in turn']],
    { name: 'balance' });
  const path = field('Health check path', { type: 'text', name: 'health.path', autocomplete: 'off', spellcheck: 'false', placeholder: '/healthz',
    // Chrome compiles patterns with the v flag: / and - are escaped in the class.
    pattern: '/[A-Za-z0-9._~%\\/=&?\\-]{0,199}', value: t.health?.path },
  { hint: 'Optional: a path every machine answers when well. Without one, a machine is passed over only after a visitor\'s request to it failed.',
    invalid: 'A path starting with /.' });
  const interval = field('Check every (seconds)', { type: 'number', name: 'health.interval_s', min: 1, max: 3600, value: t.health?.interval_s ?? 10 });
  const expect = field('Healthy status', { type: 'number', name: 'health.expect_status', min: 100, max: 599, placeholder: 'any 2xx',
    value: t.health?.expect_status || undefined }, 'Optional: the one status that means healthy (default: any 2xx).');
  if (t.balance) balance.input.value = t.balance;

  const rowOf = (machineID?: number, port?: number) => {
    const m = h('select', { 'aria-label': 'Machine', name: 'target_machine' },
      machines.map((x) => h('option', { value: x.id }, x.name))) as HTMLSelectElement;
    if (machineID) {
      m.dataset.want = String(machineID);
      m.value = String(machineID);
    }
    const p = h('input', { type: 'number', min: 1, max: 65535, required: true, 'aria-label': 'Its local port', name: 'target_port', value: port }) as HTMLInputElement;
    const row = h('div', { class: 'target-row' }, m, p);
    const rm = h('button', { type: 'button', class: 'secondary small', 'aria-label': 'Remove this machine', onclick: () => row.remove() }, 'Remove');
    row.append(rm);
    list.append(row);
  };
  add.addEventListener('click', () => rowOf(undefined, undefined));
  const initial = (t.targets ?? []).slice(1);
  const fill = () => {
    list.replaceChildren();
    for (const tg of initial) rowOf(tg.machine_id, tg.local_port);
  };
  fill();
  const syncHealth = () => {
    const on = path.input.value.trim() !== '';
    interval.row.hidden = !on;
    expect.row.hidden = !on;
  };
  path.input.addEventListener('input', syncHealth);
  syncHealth();
  const rows = [more, balance.row, path.row, interval.row, expect.row];
  return {
    rows,
    sync: (http) => {
      for (const r of rows) r.hidden = !http;
      if (http) syncHealth();
    },
    body: (own) => {
      const others = [...list.querySelectorAll('.target-row')].map((r) => ({
        machine_id: Number((r.querySelector('select') as HTMLSelectElement).value),
        local_port: Number((r.querySelector('input') as HTMLInputElement).value),
      }));
      const out: Record<string, unknown> = { balance: balance.input.value };
      if (editing || others.length) out.targets = [own, ...others];
      const p = path.input.value.trim();
      if (p) out.health = { path: p, interval_s: Number(interval.input.value) || 10, expect_status: Number(expect.input.value) || 0 };
      else if (editing && t.health) out.health = { path: '' };
      return out;
    },
    reset: () => {
      list.replaceChildren();
      path.input.value = '';
      expect.input.value = '';
      interval.input.value = '10';
      balance.input.value = 'failover';
      syncHealth();
    },
    setMachines: (ms) => {
      machines = ms;
      for (const s of list.querySelectorAll('select')) {
        const cur = (s as HTMLSelectElement).value || (s as HTMLSelectElement).dataset.want || '';
        s.replaceChildren(...ms.map((x) => h('option', { value: x.id }, x.name)));
        (s as HTMLSelectElement).value = cur;
      }
      if (!list.childElementCount) fill();
    },
  };
}

const tone = (s: string): 'good' | 'warn' | 'bad' | '' => (s === 'up' || s === 'active' ? 'good' : s === 'down' || s === 'error' || s === 'offline' ? 'bad' : s === 'pending' ? 'warn' : '');

/** The table's part: every machine serving t, when there is more than
 * one or a health check; null otherwise. */
export function targetsList(t: Tunnel): Child {
  const ts = t.targets ?? [];
  if (ts.length < 2 && !t.health) return null;
  const how = t.balance === 'round_robin' ? 'each in turn' : 'failover, in this order';
  return h('div', { class: 'targets-state small' },
    h('div', { class: 'muted' }, `Served by ${ts.length} machine${ts.length === 1 ? '' : 's'} (${how})`,
      t.health ? `, checked every ${t.health.interval_s} s at ${t.health.path}` : ''),
    h('ul', { class: 'plain' }, ts.map((tg: TunnelTarget) => h('li', { 'data-target': tg.machine_name },
      h('span', null, `${tg.machine_name} :${tg.local_port} `),
      tg.status !== 'active' ? badge(tg.status, tone(tg.status)) : null, ' ',
      tg.health.state !== 'unknown' ? badge(tg.health.state, tone(tg.health.state)) : null,
      h('span', { class: 'muted' }, ` ${tg.health.message}`)))));
}
