// A machine's speed test (issue 50): the last result, a small chart of the
// history (download and upload over time, inline SVG), and Test now, which
// starts one and shows its phase and progress, asking every second while
// it runs. The daemon runs one test at a time per machine: its refusal
// (409) is said as it words it.
import type { SpeedTest } from '../api';
import type { Ctx } from '../ctx';
import { busy, card, fmtTime, h, notice, refill, table, time, type Child } from '../dom';

const SVG = 'http://www.w3.org/2000/svg';

/** What each phase does, as the progress line says it. */
const PHASES: Record<string, string> = {
  download: 'download (server to machine)',
  upload: 'upload (machine to server)',
  rtt: 'round trip',
  mtu: 'largest unfragmented packet',
};

const mbps = (v?: number | null) => (v == null ? '—' : `${v.toFixed(1)} Mbit/s`);
const ms = (v?: number | null) => (v == null ? '—' : `${v.toFixed(1)} ms`);
const payload = (t: SpeedTest) => (t.payload == null ? '—' : `${t.payload} bytes (MTU ${t.mtu})`);

/** The line of a running test: "Testing the upload (machine to server)… 62 %". */
export function runningLine(t: SpeedTest): string {
  return `Testing the ${PHASES[t.phase] ?? 'link'}… ${t.progress} %`;
}

/**
 * Download (solid) and upload (dashed) of the finished tests, oldest on
 * the left, placed by when they ran and scaled from 0 to the fastest, and
 * its caption with that scale; null with fewer than two.
 */
export function speedChart(ts: SpeedTest[]): { svg: SVGSVGElement; caption: string } | null {
  const done = ts.filter((t) => t.state === 'done' && t.download_mbps != null && t.upload_mbps != null)
    .sort((a, b) => a.started_at.localeCompare(b.started_at));
  if (done.length < 2) return null;
  const w = 240, hgt = 60;
  const at = done.map((t) => new Date(t.started_at).getTime());
  const span = Math.max(1, at[at.length - 1] - at[0]);
  const peak = Math.max(1, ...done.map((t) => Math.max(t.download_mbps ?? 0, t.upload_mbps ?? 0)));
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${hgt}`);
  svg.setAttribute('class', 'speed-chart');
  svg.setAttribute('role', 'img');
  const last = done[done.length - 1];
  svg.setAttribute('aria-label', `${done.length} speed tests since ${fmtTime(done[0].started_at)}; ` +
    `fastest ${peak.toFixed(1)} Mbit/s; last: download ${mbps(last.download_mbps)}, upload ${mbps(last.upload_mbps)}`);
  const axis = document.createElementNS(SVG, 'polyline');
  axis.setAttribute('points', `0,${hgt - 0.5} ${w},${hgt - 0.5}`);
  axis.setAttribute('class', 'speed-axis');
  svg.appendChild(axis);
  for (const [key, cls] of [['download_mbps', 'speed-down'], ['upload_mbps', 'speed-up']] as const) {
    const pts = done.map((t, i) => `${(((at[i] - at[0]) / span) * (w - 2) + 1).toFixed(1)},${(hgt - 1 - ((t[key] ?? 0) / peak) * (hgt - 2)).toFixed(1)}`);
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', pts.join(' '));
    line.setAttribute('class', cls);
    svg.appendChild(line);
  }
  const day = (t: SpeedTest) => new Date(t.started_at).toLocaleDateString();
  return { svg, caption: `Download (solid) and upload (dashed), 0 to ${peak.toFixed(1)} Mbit/s, from ${day(done[0])} to ${day(last)}:` };
}

/** The last finished test, in words. */
function lastResult(t: SpeedTest | undefined): Child {
  if (!t) return h('p', { class: 'muted' }, 'No test yet. A test sends data both ways for up to 10 s each (at most 256 MB); it never runs by itself.');
  return h('div', null,
    t.state === 'failed' ? h('p', { class: 'bad-text why' }, `The last test failed: ${t.error || 'no reason given'}`) : null,
    h('dl', { class: 'kv', 'aria-label': 'Last speed test' },
      h('dt', null, 'Download'), h('dd', { 'data-speed': 'download' }, mbps(t.download_mbps)),
      h('dt', null, 'Upload'), h('dd', { 'data-speed': 'upload' }, mbps(t.upload_mbps)),
      h('dt', null, 'Round trip'), h('dd', { 'data-speed': 'rtt' }, ms(t.rtt_ms)),
      h('dt', null, 'Largest unfragmented payload'), h('dd', { 'data-speed': 'payload' }, payload(t)),
      h('dt', null, 'When'), h('dd', null, time(t.finished_at ?? t.started_at), ` (${fmtTime(t.finished_at ?? t.started_at)})`)));
}

/** The card, and stop (the page is left: no more asking). */
export function speedTestCard(ctx: Ctx, id: number): { el: HTMLElement; stop: () => void } {
  const n = notice();
  const body = h('div', null, h('p', { class: 'muted' }, 'Loading…'));
  const chart = h('div', { class: 'speed-history' });
  const meter = h('progress', { max: 100, value: 0, 'aria-label': 'Speed test progress' });
  const line = h('span');
  const running = h('div', { class: 'speed-running', hidden: true }, h('p', { role: 'status' }, line), meter);
  const button = h('button', { type: 'button' }, 'Test now');
  let timer = 0;
  let stopped = false;

  const show = (ts: SpeedTest[]) => {
    const run = ts[0]?.state === 'running' ? ts[0] : undefined;
    running.hidden = !run;
    button.disabled = !!run;
    if (run) {
      line.textContent = runningLine(run);
      meter.value = run.progress;
    }
    const finished = ts.filter((t) => t.state !== 'running');
    refill(body, lastResult(finished[0]));
    const c = speedChart(finished);
    refill(chart, c ? [h('p', { class: 'small muted' }, c.caption), c.svg] : null,
      finished.length > 0 ? h('details', null, h('summary', null, `All tests (${finished.length})`),
        table(['When', 'Download', 'Upload', 'Round trip', 'Payload', 'Result'], finished.slice(0, 50).map((t) => [
          time(t.started_at), mbps(t.download_mbps), mbps(t.upload_mbps), ms(t.rtt_ms), t.payload == null ? '—' : String(t.payload),
          t.state === 'done' ? 'done' : `failed: ${t.error}`]), 'No test yet.', 'Speed tests')) : null);
    return !!run;
  };

  // Asks for the history; while a test runs, again a second later.
  const load = async () => {
    window.clearTimeout(timer);
    if (stopped) return;
    const ts = await busy([], n, () => ctx.api.get<SpeedTest[]>(`/api/machines/${id}/speedtests`));
    if (ts && show(ts) && !stopped) timer = window.setTimeout(() => void load(), 1000);
  };

  button.addEventListener('click', () => void busy(button, n, async () => {
    const t = await ctx.api.post<SpeedTest>(`/api/machines/${id}/speedtest`, {}, { timeout: 30_000 });
    running.hidden = false;
    line.textContent = runningLine(t);
    meter.value = t.progress;
    window.clearTimeout(timer);
    timer = window.setTimeout(() => void load(), 1000);
  }).then(() => { if (!running.hidden) button.disabled = true; }));

  void load();
  const el = card('Speed test',
    h('p', { class: 'small muted' }, 'Measured through the machine\'s tunnel: what its tunnels can carry from this server and back.'),
    n.el, body, running, h('div', { class: 'actions' }, button), chart);
  return { el, stop: () => { stopped = true; window.clearTimeout(timer); } };
}
