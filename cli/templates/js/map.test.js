// Unit test of {{name}}, natively: `node --test` in this folder.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '{{sdk}}/sdk/js/testing.js';
import { operator } from './index.js';

test('uppercases values', () => {
  const h = Harness.open(operator);
  const out = h.process([
    { value: 'hello weir', timestamp: 1n },
    { key: 'k', value: 'straße', timestamp: 2n },
  ]);
  assert.deepEqual(out.values(), ['HELLO WEIR', 'STRASSE']);
});
