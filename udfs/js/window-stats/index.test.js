import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../../../sdk/js/testing.js';
import { operator } from './index.js';

const W = { start: 1000n, end: 2000n };

/** The expected result, computed independently (numbers, sorted copies). */
function expected(key, window, values) {
  const ns = values.map((v) => Number(v.trim()));
  const sorted = [...ns].sort((a, b) => a - b);
  return JSON.stringify({
    key,
    start: Number(window.start),
    end: Number(window.end),
    count: ns.length,
    sum: ns.reduce((a, b) => a + b, 0),
    min: sorted[0],
    max: sorted[sorted.length - 1],
  });
}

const VALUES = ['5', ' 17 ', '-3', '17', '0', '\t42\n', '-100', '8'];

test('count, sum, min and max of one window, one record per add', () => {
  const r = Harness.aggregate(operator, 'sensor-1', W, VALUES);
  assert.equal(r.valueString(), expected('sensor-1', W, VALUES));
  assert.equal(r.valueString(), '{"key":"sensor-1","start":1000,"end":2000,"count":8,"sum":-14,"min":-100,"max":42}');
  assert.equal(r.keyString(), 'sensor-1');
  assert.equal(r.timestamp, 1999n);
});

test('several records per add call give the same result', () => {
  for (const chunk of [2, 3, 8, 100]) {
    const r = Harness.aggregate(operator, 'sensor-1', W, VALUES, chunk);
    assert.equal(r.valueString(), expected('sensor-1', W, VALUES), `chunk ${chunk}`);
  }
});

test('two accumulators merged (session windows) give the result of one', () => {
  const a = VALUES.slice(0, 3);
  const b = VALUES.slice(3);
  const r = Harness.mergedAggregate(operator, 'sensor-1', W, a, b);
  assert.equal(r.valueString(), expected('sensor-1', W, VALUES));
  const onlyB = Harness.mergedAggregate(operator, 'k', W, [], ['4']);
  assert.equal(onlyB.valueString(), expected('k', W, ['4']));
});

test('keys are JSON-escaped; a count window prints the whole time line', () => {
  const global = { start: -9223372036854775808n, end: 9223372036854775807n };
  const r = Harness.aggregate(operator, 'a "quoted"\\ key\n', global, ['1', '2'], 2);
  assert.equal(
    r.valueString(),
    '{"key":"a \\"quoted\\"\\\\ key\\n","start":-9223372036854775808,"end":9223372036854775807,' +
      '"count":2,"sum":3,"min":1,"max":2}',
  );
});

test('64-bit values stay exact', () => {
  const big = '9223372036854775000';
  const r = Harness.aggregate(operator, 'k', W, [big, '-9223372036854775808', '7']);
  assert.equal(
    r.valueString(),
    '{"key":"k","start":1000,"end":2000,"count":3,"sum":-801,"min":-9223372036854775808,"max":9223372036854775000}',
  );
});

test('the sum wraps around at the i64 range, as in the Rust twin', () => {
  const r = Harness.aggregate(operator, 'k', W, ['9223372036854775807', '2']);
  assert.match(r.valueString(), /"sum":-9223372036854775807,/);
});

test('many windows in one add call, as the host batches them', () => {
  const h = Harness.open(operator);
  const [a, b] = h.windowAdd(
    [null, null],
    [0, 1, 0],
    [
      { key: 'a', value: '1' },
      { key: 'b', value: '10' },
      { key: 'a', value: '2' },
    ],
  );
  const [a2, b2, c] = h.windowAdd([a, b, null], [0], [{ key: 'a', value: '3' }]);
  assert.deepEqual(b2, b, 'an accumulator no record went to comes back as it was');
  const results = h.windowGetResult([
    { key: 'a', window: W, accumulator: a2 },
    { key: 'b', window: W, accumulator: b2 },
  ]);
  assert.deepEqual(
    results.map((v) => new TextDecoder().decode(v)),
    [expected('a', W, ['1', '2', '3']), expected('b', W, ['10'])],
  );
  assert.equal(c.length, 32, 'a new window no record went to still gets an accumulator');
});

test('a value that is not an integer is an error naming it', () => {
  assert.throws(() => Harness.aggregate(operator, 'k', W, ['1', 'twelve']), /"twelve"/);
  assert.throws(() => Harness.aggregate(operator, 'k', W, ['1.5']), /"1\.5"/);
  assert.throws(() => Harness.aggregate(operator, 'k', W, ['']), /""/);
  assert.throws(() => Harness.aggregate(operator, 'k', W, ['9223372036854775808']), /9223372036854775808/);
});

test('it is a window function, not a plain operator', () => {
  const h = Harness.open(operator);
  assert.equal(h.windowKind(), 'aggregate');
  assert.equal(h.info.name, 'window-stats-js');
  assert.equal(h.info.keyed, false);
  assert.throws(() => h.process([{ key: 'k', value: '1' }]), /is a window function .*\[\[operator\]\] with a `window` table/);
});
