// Runs the UI test files as `node --test` would, two at a time, but in the
// order test/order.mjs gives (node --test sorts the files it is given),
// with node's spec reporter and the summary lines on stdout. Exits 1 when
// a test failed. `node test/run.mjs test/a.test.mjs ...` runs those files,
// in that order.
import { run } from 'node:test';
import { spec } from 'node:test/reporters';
import { PassThrough, Readable } from 'node:stream';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ordered } from './order.mjs';
import summary from './summary-reporter.mjs';

const dir = dirname(fileURLToPath(import.meta.url));
const files = process.argv.length > 2 ? process.argv.slice(2).map((f) => resolve(f)) : ordered(dir).map((f) => join(dir, f));
const events = run({ files, concurrency: 2, timeout: 600_000 });
const toSpec = new PassThrough({ objectMode: true });
const toSummary = new PassThrough({ objectMode: true });
events.on('test:fail', (data) => {
  if (data.details?.type !== 'suite') process.exitCode = 1;
});
events.pipe(toSpec);
events.pipe(toSummary);
// The summary after the spec output: spec's stream ends first.
const specDone = new Promise((res) => toSpec.compose(spec).on('end', res).pipe(process.stdout, { end: false }));
const lines = [];
for await (const line of summary(toSummary)) lines.push(line);
await specDone;
for (const line of lines) process.stdout.write(line);
