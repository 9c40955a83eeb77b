// Prints the UI test files in the order node --test starts them: the
// longest first, so that with two at a time the run does not end on one
// long file alone while the other processor idles (the order of a fresh
// clone's run: each file's time is its tests' total, as the summary line
// reports it). Files not named here follow, in the alphabet's order, so a
// new file always runs.
import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const longestFirst = ['layout', 'browser', 'trial-d', 'trial-a', 'trial-b', 'machines-pages', 'trial-c',
  'sso', 'edges', 'update', 'trial-e', 'gate', 'disk', 'monitoring', 'speedtest', 'passkeys'];

export function ordered(dir) {
  const all = readdirSync(dir).filter((f) => f.endsWith('.test.mjs')).sort();
  const known = longestFirst.map((n) => `${n}.test.mjs`).filter((f) => all.includes(f));
  return [...known, ...all.filter((f) => !known.includes(f))];
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const dir = dirname(fileURLToPath(import.meta.url));
  console.log(ordered(dir).map((f) => `test/${f}`).join(' '));
}
