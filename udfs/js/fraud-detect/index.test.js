// Unit tests of the JS fraud detector against the SDK's in-process fake host:
// node --test udfs/js/fraud-detect
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../../../sdk/js/testing.js';
import { codecs } from '../../../sdk/js/weir-sdk.js';
import { operator, rustF64 } from './index.js';

const txn = (account, amount) => `{"account":"${account}","amount":${amount}}`;
const rec = (key, value, timestamp) => ({ key, value, timestamp: BigInt(timestamp) });

test('a small then a large transaction within a minute alerts', () => {
  const h = Harness.open(operator);
  const [small, large, medium] = [txn('a', 0.5), txn('a', 600.25), txn('a', 100.0)];
  let out = h.process([
    rec('acct-1', small, 1_000),
    rec('acct-2', large, 1_500), // other account: no flag
    rec('acct-1', large, 61_000), // exactly 60 s later: alert
  ]);
  assert.deepEqual(out.values(), ['{"account":"acct-1","small_ts":1000,"large_ts":61000,"amount":600.25}']);
  assert.equal(out.main[0].keyString(), 'acct-1');
  assert.equal(out.main[0].timestamp, 61_000n);
  assert.equal(h.valueState('small-ts', 'acct-1', codecs.i64), undefined, 'flag cleared');

  // Too late, or a medium transaction in between: no alert.
  out = h.process([
    rec('acct-1', small, 100_000),
    rec('acct-1', large, 160_001),
    rec('acct-1', small, 200_000),
    rec('acct-1', medium, 200_001),
    rec('acct-1', large, 200_002),
  ]);
  assert.ok(out.isEmpty());

  // A small transaction re-arms the flag; the amount prints shortest.
  out = h.process([
    rec('acct-1', small, 300_000),
    rec('acct-1', small, 300_001),
    rec('acct-1', txn('a', 501.0), 300_002),
  ]);
  assert.deepEqual(out.values(), ['{"account":"acct-1","small_ts":300001,"large_ts":300002,"amount":501}']);
});

test('the flag is stored as a little-endian i64, as the Rust detector stores it', () => {
  const h = Harness.open(operator);
  h.process([rec('acct-9', txn('x', 0.25), 258)]);
  assert.deepEqual([...h.rawValueState('small-ts', 'acct-9')], [2, 1, 0, 0, 0, 0, 0, 0]);
});

test('malformed JSON is an error carrying the record', () => {
  const h = Harness.open(operator);
  assert.throws(() => h.process([rec('a', 'not json', 1)]), (e) => e.message.startsWith('bad transaction "not json"'));
});

test('amounts print as Rust prints an f64', () => {
  assert.equal(rustF64(600.25), '600.25');
  assert.equal(rustF64(501), '501');
  assert.equal(rustF64(1e21), '1000000000000000000000');
  assert.equal(rustF64(1.5e-7), '0.00000015');
  assert.equal(rustF64(-0), '-0');
  assert.equal(rustF64(123456789012345680000), '123456789012345680000');
});
