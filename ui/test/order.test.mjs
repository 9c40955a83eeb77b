// test/order.mjs: every UI test file runs once, the named long ones first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { longestFirst, ordered } from './order.mjs';

const dir = dirname(fileURLToPath(import.meta.url));

test('the run order names every test file once, and only files that exist', () => {
  const files = readdirSync(dir).filter((f) => f.endsWith('.test.mjs')).sort();
  const order = ordered(dir);
  assert.deepEqual([...order].sort(), files);
  for (const n of longestFirst) assert.ok(files.includes(`${n}.test.mjs`), `test/order.mjs names ${n}, which is not a test file`);
  assert.deepEqual(order.slice(0, longestFirst.length), longestFirst.map((n) => `${n}.test.mjs`));
});
