// One summary line after node's spec output, e.g. for CI logs:
// "ui tests: 7 passed, 0 failed, 0 skipped in 5.7 s", and one naming the
// slowest files by their tests' total time (test/order.mjs starts the
// longest first).
import { basename } from 'node:path';

export default async function* summary(source) {
  let pass = 0, fail = 0, skip = 0;
  const start = Date.now();
  const perFile = new Map();
  for await (const ev of source) {
    if (ev.type !== 'test:pass' && ev.type !== 'test:fail') continue;
    if (ev.data.details?.type === 'suite') continue;
    if (ev.data.skip || ev.data.todo) skip++;
    else if (ev.type === 'test:pass') pass++;
    else fail++;
    if (ev.data.file && ev.data.nesting === 0) {
      const f = basename(ev.data.file);
      perFile.set(f, (perFile.get(f) ?? 0) + (ev.data.details?.duration_ms ?? 0));
    }
  }
  yield `ui tests: ${pass} passed, ${fail} failed, ${skip} skipped in ${((Date.now() - start) / 1000).toFixed(1)} s\n`;
  const slowest = [...perFile].sort((a, b) => b[1] - a[1]).slice(0, 6);
  if (slowest.length) yield `ui tests, slowest files: ${slowest.map(([f, ms]) => `${f} ${(ms / 1000).toFixed(1)} s`).join(', ')}\n`;
}
