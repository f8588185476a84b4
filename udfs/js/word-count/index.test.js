// Unit tests of the JS word count against the SDK's in-process fake host:
// node --test udfs/js/word-count
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, MAX_TIMESTAMP } from '../../../sdk/js/testing.js';
import { codecs } from '../../../sdk/js/weir-sdk.js';
import { operator } from './index.js';

const words = (ws) => ws.map((w, i) => ({ key: w, value: w, timestamp: BigInt(i) }));

test('final counts come with the final watermark', () => {
  const h = Harness.open(operator);
  assert.ok(h.process(words(['a', 'b', 'a'])).isEmpty());
  assert.ok(h.process(words(['a'])).isEmpty());
  assert.equal(h.timers().length, 2, 'one timer per key');
  const out = h.finish();
  assert.deepEqual(out.values(), ['a\t3', 'b\t1']);
  assert.equal(out.main[0].keyString(), 'a');
  assert.equal(out.main[0].timestamp, MAX_TIMESTAMP);
});

test('updates emit on every record', () => {
  const h = Harness.open(operator, { config: { emit: 'updates' } });
  const out = h.process(words(['a', 'b', 'a']));
  assert.deepEqual(out.values(), ['a\t1', 'b\t1', 'a\t2']);
  assert.equal(out.main[2].timestamp, 2n);
  assert.equal(h.timers().length, 0);
  assert.ok(h.finish().isEmpty());
});

test('the count is stored as a little-endian u64, as the Rust counter stores it', () => {
  const h = Harness.open(operator);
  h.process(words(['x', 'x', 'x']));
  assert.deepEqual([...h.rawValueState('count', 'x')], [3, 0, 0, 0, 0, 0, 0, 0]);
  assert.equal(h.valueState('count', 'x', codecs.u64), 3n);
});

test('non-UTF-8 keys are written back byte for byte', () => {
  const h = Harness.open(operator, { config: { emit: 'updates' } });
  const key = new Uint8Array([0xff, 0x61]);
  const out = h.process([{ key, value: key, timestamp: 0n }]);
  assert.deepEqual([...out.main[0].value], [0xff, 0x61, 0x09, 0x31]);
});

test('a bad emit mode fails open with the message', () => {
  assert.throws(() => Harness.open(operator, { config: { emit: 'sometimes' } }), {
    message: 'config `emit`: expected `final` or `updates`, got `sometimes`',
  });
});

test('an upgrade keeps the stored counts', () => {
  // `count` declares no migration: `weir upgrade` keeps its bytes as they are.
  const h = Harness.open(operator);
  const old = codecs.u64.encode(41n);
  assert.deepEqual(h.migrateState('count', '0.0.1', old), old);
});
