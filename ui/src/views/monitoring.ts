// Monitoring: the /metrics token, webhook notifications, and the small
// 24-hour traffic charts of machines and tunnels. Self-contained: the
// other views only call monitoringCard, loadTraffic and trafficCell.
import { ask } from '../dialog';
import type { Message } from '../api';
import type { Ctx } from '../ctx';
import { busy, card, clear, copyBox, field, fmtTime, form, h, notice, select } from '../dom';
import { dismiss, getSecret, keep } from '../secrets';

export interface TrafficSeries {
  in: number[]; out: number[]; bytes_in: number; bytes_out: number; connections: number; bucket_minutes: number;
}
export interface TrafficHistory { since: string; machines: Record<string, TrafficSeries>; tunnels: Record<string, TrafficSeries> }
interface TokenStatus { exists: boolean; created_at?: string; token?: string }
interface NotifySettings { url: string; preset: 'ntfy' | 'json'; offline_minutes: number }

const SVG = 'http://www.w3.org/2000/svg';

/** A byte count for people: 1.5 MB. */
export function fmtBytes(n: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}

/**
 * A sparkline of in (solid) and out (dashed) per point, drawn as inline
 * SVG without a chart library: two polylines scaled to the larger peak.
 */
export function sparkline(s: TrafficSeries): SVGSVGElement {
  const w = 120, hgt = 28;
  const peak = Math.max(1, ...s.in, ...s.out);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${hgt}`);
  svg.setAttribute('class', 'spark');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', `last 24 h: ${fmtBytes(s.bytes_in)} in, ${fmtBytes(s.bytes_out)} out`);
  for (const [values, cls] of [[s.in, 'spark-in'], [s.out, 'spark-out']] as const) {
    const step = values.length > 1 ? w / (values.length - 1) : w;
    const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(hgt - 1 - (v / peak) * (hgt - 2)).toFixed(1)}`).join(' ');
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', pts);
    line.setAttribute('class', cls);
    svg.appendChild(line);
  }
  return svg;
}

/** The traffic history, or null when the daemon has none to give. */
export async function loadTraffic(ctx: Ctx): Promise<TrafficHistory | null> {
  try {
    return await ctx.api.get<TrafficHistory>('/api/monitoring/traffic');
  } catch {
    return null;
  }
}

/** A table cell: the chart, the 24 h totals and the open connections.
 * known is false when the history could not be loaded: then nothing is
 * claimed about the traffic. */
export function trafficCell(s: TrafficSeries | undefined, known = true): HTMLElement {
  if (!s) return h('span', { class: 'muted' }, known ? 'no traffic yet' : '—');
  return h('div', { class: 'traffic' }, sparkline(s),
    h('small', null, `in ${fmtBytes(s.bytes_in)} · out ${fmtBytes(s.bytes_out)} · ${s.connections} conn.`));
}

export function monitoringCard(ctx: Ctx): HTMLElement {
  const api = ctx.api;
  // The /metrics bearer token.
  const tokenNotice = notice();
  const tokenBody = h('div');
  const shown = h('div');
  // The new token, shown once by the daemon: kept until dismissed.
  const showToken = (token: string) => {
    const done = h('button', { type: 'button', class: 'secondary small' }, 'I have saved it');
    done.addEventListener('click', () => { dismiss('metrics-token'); clear(shown); });
    clear(shown, h('div', { class: 'callout' },
      h('p', null, h('strong', null, 'Metrics token — shown only now.'), ' Send it as ', h('code', null, 'Authorization: Bearer <token>'), ' to /metrics.'),
      copyBox(token, 'Copy the metrics token', 'cmd token'), h('div', { class: 'actions' }, done)));
  };
  const kept = getSecret('metrics-token');
  if (kept) showToken(kept.data.token as string);
  const loadToken = () => busy([], tokenNotice, async () => {
    const st = await api.get<TokenStatus>('/api/monitoring/metrics-token');
    const create = h('button', { type: 'button' }, st.exists ? 'Replace token' : 'Create token');
    const revoke = h('button', { type: 'button', class: 'danger', hidden: !st.exists }, 'Revoke');
    create.addEventListener('click', async () => {
      if (st.exists && !await ask({ title: 'Replace the metrics token?', body: h('p', null, 'Scrapers using the old one get 401.'), confirm: 'Replace the token', danger: true })) return;
      void busy([create, revoke], tokenNotice, async () => {
        const t = await api.post<TokenStatus>('/api/monitoring/metrics-token');
        keep({ key: 'metrics-token', route: 'security/monitoring', what: 'the new metrics token', data: { token: t.token ?? '' } });
        showToken(t.token ?? '');
        await loadToken();
      });
    });
    revoke.addEventListener('click', async () => {
      if (!await ask({ title: 'Revoke the metrics token?', body: h('p', null, '/metrics answers 401 until you create a new one.'), confirm: 'Revoke the token', danger: true })) return;
      void busy([create, revoke], tokenNotice, async () => {
        tokenNotice.ok((await api.del<Message>('/api/monitoring/metrics-token')).message);
        clear(shown);
        dismiss('metrics-token');
        await loadToken();
      });
    });
    clear(tokenBody,
      h('p', null, st.exists ? `A token exists (created ${fmtTime(st.created_at)}).` : 'No token: /metrics answers 401.'),
      h('div', { class: 'actions' }, create, revoke));
  });

  // Webhook notifications.
  // The names are the API's, so its errors land at the right field (and
  // go as soon as the field is edited).
  const url = field('Webhook URL', { type: 'text', name: 'url', inputmode: 'url', autocomplete: 'off', spellcheck: 'false', placeholder: 'https://ntfy.sh/your-secret-topic', maxlength: 2048 },
    'Empty turns notifications off.');
  const preset = select('Preset', [['ntfy', 'ntfy (text, Title header)'], ['json', 'JSON webhook']], { name: 'preset' });
  const delay = field('Offline delay (minutes)', { type: 'number', name: 'offline_minutes', min: 1, max: 1440, required: true },
    'A machine offline longer than this is reported, and again when it is back.');
  const notifyForm = form({ label: 'Notification settings', submit: 'Save notifications' }, [url.row, preset.row, delay.row], async (n) => {
    const s = await api.put<NotifySettings>('/api/monitoring/notifications', {
      url: url.input.value.trim(), preset: preset.input.value, offline_minutes: Number(delay.input.value),
    });
    n.ok(s.url ? 'Saved.' : 'Saved: notifications are off.');
  });
  const test = h('button', { type: 'button', class: 'secondary' }, 'Send test');
  test.addEventListener('click', () => void busy(test, notifyForm.notice, async () => {
    const r = await api.post<{ delivered: boolean; message: string }>('/api/monitoring/notifications/test');
    if (r.delivered) notifyForm.notice.ok(r.message);
    else notifyForm.notice.error(new Error(r.message));
  }));
  notifyForm.submit.after(test);
  // Until the settings are loaded the form cannot be sent: blank fields
  // would turn notifications off.
  notifyForm.submit.disabled = true;
  test.disabled = true;
  void busy([], notifyForm.notice, async () => {
    const s = await api.get<NotifySettings>('/api/monitoring/notifications');
    url.input.value = s.url;
    preset.input.value = s.preset;
    delay.input.value = String(s.offline_minutes);
    notifyForm.submit.disabled = false;
    test.disabled = false;
  });
  void loadToken();

  // Where Prometheus scrapes: this dashboard's own address, as the
  // browser reaches it, with the token read from a file.
  const metricsURL = `${location.origin}/metrics`;
  const scrape = [
    'scrape_configs:',
    '  - job_name: tunnelsvc',
    `    scheme: ${location.protocol.replace(':', '')}`,
    '    metrics_path: /metrics',
    '    authorization:',
    '      credentials_file: /etc/prometheus/tunnelsvc-token',
    '    static_configs:',
    `      - targets: ['${location.host}']`,
  ].join('\n');
  return h('div', null,
    card('Prometheus metrics',
      h('p', null, 'Prometheus scrapes ', h('code', null, metricsURL), ' with a bearer token (only its hash is kept here).'),
      tokenNotice.el, tokenBody, shown,
      h('h3', null, 'Scrape configuration'),
      h('p', null, 'For prometheus.yml, with the token in ', h('code', null, '/etc/prometheus/tunnelsvc-token'), ' (readable by Prometheus only):'),
      copyBox(scrape, 'Copy the scrape configuration', 'yaml')),
    card('Notifications',
      h('p', null, 'Sent when a machine is offline too long or back, an address is banned, a certificate expires within 14 days, or logins fail in bursts. Each delivery appears in the activity feed.'),
      notifyForm.form));
}
