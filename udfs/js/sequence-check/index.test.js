// Unit tests of the JS sequence check against the SDK's in-process fake host:
// node --test udfs/js/sequence-check
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../../../sdk/js/testing.js';
import { codecs } from '../../../sdk/js/weir-sdk.js';
import { U64_MAX, operator, rustDebug, sequenceNumber } from './index.js';

/** The generator's records n (key n % keys, value n, timestamp n). */
const sequence = (ns, keys) => ns.map((n) => ({ key: String(n % keys), value: String(n), timestamp: BigInt(n) }));
const alerts = (out) => out.side('alerts').map((r) => [r.keyString(), r.valueString(), r.timestamp]);
const records = (out) => out.main.map((r) => ({ key: r.keyString(), value: r.valueString(), timestamp: r.timestamp }));

test('an unbroken sequence passes through without alerts', () => {
  const h = Harness.open(operator, { config: { step: '3' } });
  const input = sequence([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 3);
  const out = h.process(input.slice(0, 4));
  out.extend(h.process(input.slice(4)));
  assert.deepEqual(records(out), input, 'every record, unchanged');
  assert.deepEqual(out.sideRecords, []);
  assert.deepEqual(['0', '1', '2'].map((k) => h.valueState('last', k, codecs.u64)), [9n, 7n, 8n]);
});

test('lost and repeated records raise alerts', () => {
  const h = Harness.open(operator, { config: { step: 2 } }); // an integer, as TOML may give it
  const out = h.process(sequence([0, 1, 2, 5, 4, 4, 7, 9], 2));
  assert.deepEqual(alerts(out), [
    ['1', 'key 1: expected 3, got 5', 5n], // 3 lost
    ['0', 'key 0: expected 6, got 4', 4n], // 4 repeated
  ]);
  assert.equal(out.main.length, 8, 'alerted records pass through too');
  // The checker follows the sequence from the record it was given.
  assert.deepEqual([h.valueState('last', '0', codecs.u64), h.valueState('last', '1', codecs.u64)], [4n, 9n]);
});

test('padded values and keys that are no number', () => {
  const h = Harness.open(operator, { config: { step: '5' } });
  const out = h.process([
    { key: '3', value: '3....', timestamp: 1n },
    { key: '3', value: '8.', timestamp: 2n },
    { key: 'x', value: '0', timestamp: 3n },
  ]);
  assert.deepEqual(alerts(out), [['x', 'key x: expected 18446744073709551615, got 0', 3n]]);
  assert.equal(out.main[0].valueString(), '3....');
});

test('last is a u64 like the Rust one and wraps as its release build', () => {
  const h = Harness.open(operator, { config: { step: '2' } });
  h.process(sequence([1], 2));
  assert.deepEqual([...h.rawValueState('last', '1')], [1, 0, 0, 0, 0, 0, 0, 0]);
  h.setRawValueState('last', '1', codecs.u64.encode(U64_MAX));
  assert.deepEqual(alerts(h.process([{ key: '1', value: '1', timestamp: 7n }])), []); // u64::MAX + 2 wraps to 1
});

test('bad config and bad values are errors', () => {
  for (const step of ['0', '-3', 'x', '1_000']) {
    assert.throws(() => Harness.open(operator, { config: { step } }), {
      message: 'config `step`: expected a positive integer',
    });
  }
  assert.throws(() => Harness.open(operator), { message: 'config `step` is required but missing' });
  const h = Harness.open(operator, { config: { step: '1' } });
  assert.throws(() => h.process([{ key: '0', value: 'n\t"7"', timestamp: 1n }]), {
    message: 'not a sequence number: "n\\t\\"7\\""',
  });
});

test("numbers parse as Rust's u64", () => {
  assert.equal(sequenceNumber('42'), 42n);
  assert.equal(sequenceNumber('+42..'), 42n);
  assert.equal(sequenceNumber('18446744073709551615'), U64_MAX);
  for (const bad of ['', '.', '+', '-1', ' 1', '1_0', '18446744073709551616', '٣', '\ufffd']) {
    assert.equal(sequenceNumber(bad), null, bad);
  }
  assert.equal(rustDebug('a\0\x1b\x7fé'), '"a\\0\\u{1b}\\u{7f}é"');
});
