// Unit test of {{name}}, natively: `node --test` in this folder.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '{{sdk}}/sdk/js/testing.js';
import { operator } from './index.js';

test('counts per key', () => {
  const h = Harness.open(operator);
  const out = h.process([
    { key: 'apple', value: 'apple', timestamp: 1n },
    { key: 'pear', value: 'pear', timestamp: 2n },
    { key: 'apple', value: 'apple', timestamp: 3n },
  ]);
  assert.deepEqual(out.values(), ['apple\t1', 'pear\t1', 'apple\t2']);
});
