import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../../../sdk/js/testing.js';
import { operator } from './index.js';

const W = { start: 0n, end: 60000n };

/** The expected value, computed independently (a full sort). */
function expected(key, window, values) {
  const ns = values.map((v) => Number(v.trim())).sort((a, b) => b - a);
  return JSON.stringify({
    key,
    start: Number(window.start),
    end: Number(window.end),
    count: values.length,
    top: ns.slice(0, 3),
  });
}

test('one record per window: the count and the three largest values', () => {
  const values = ['4', ' 9', '1', '9 ', '-2', '7', '3'];
  const out = Harness.processWindow(operator, 'user-7', W, values);
  assert.equal(out.main.length, 1);
  const [r] = out.main;
  assert.equal(r.valueString(), expected('user-7', W, values));
  assert.equal(r.valueString(), '{"key":"user-7","start":0,"end":60000,"count":7,"top":[9,9,7]}');
  assert.equal(r.keyString(), 'user-7');
  assert.equal(r.timestamp, 59999n);
});

test('duplicates are kept, and fewer than three values are all shown', () => {
  const five = ['5', '3', '5', '1'];
  assert.deepEqual(Harness.processWindow(operator, 'k', W, five).values(), [expected('k', W, five)]);
  assert.deepEqual(Harness.processWindow(operator, 'k', W, five).values(), ['{"key":"k","start":0,"end":60000,"count":4,"top":[5,5,3]}']);
  assert.deepEqual(Harness.processWindow(operator, 'k', W, ['-8']).values(), [
    '{"key":"k","start":0,"end":60000,"count":1,"top":[-8]}',
  ]);
  const rising = Array.from({ length: 50 }, (_, i) => String(i * 7 % 31));
  assert.deepEqual(Harness.processWindow(operator, 'k', W, rising).values(), [expected('k', W, rising)]);
});

test('the key is JSON-escaped; 64-bit values stay exact', () => {
  const out = Harness.processWindow(operator, 'é"\t', W, ['9223372036854775807', '-9223372036854775808']);
  assert.deepEqual(out.values(), [
    '{"key":"é\\"\\t","start":0,"end":60000,"count":2,"top":[9223372036854775807,-9223372036854775808]}',
  ]);
});

test('a value that is not an integer is an error naming it', () => {
  assert.throws(() => Harness.processWindow(operator, 'k', W, ['1', '2x']), /"2x"/);
});

test('it is a process-window function, not an aggregate', () => {
  const h = Harness.open(operator);
  assert.equal(h.windowKind(), 'process-window');
  assert.throws(() => h.windowAdd([null], [0], [{ key: 'k', value: '1' }]), /is a process-window function, not an aggregate function/);
  assert.throws(() => h.process([{ key: 'k', value: '1' }]), /is a window function/);
});
