// One summary line after node's spec output, e.g. for CI logs:
// "ui tests: 7 passed, 0 failed, 0 skipped in 5.7 s".
export default async function* summary(source) {
  let pass = 0, fail = 0, skip = 0;
  const start = Date.now();
  for await (const ev of source) {
    if (ev.type !== 'test:pass' && ev.type !== 'test:fail') continue;
    if (ev.data.details?.type === 'suite') continue;
    if (ev.data.skip || ev.data.todo) skip++;
    else if (ev.type === 'test:pass') pass++;
    else fail++;
  }
  yield `ui tests: ${pass} passed, ${fail} failed, ${skip} skipped in ${((Date.now() - start) / 1000).toFixed(1)} s\n`;
}
