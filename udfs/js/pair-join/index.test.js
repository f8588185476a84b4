import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../../../sdk/js/testing.js';
import { operator } from './index.js';

test('each pair once, by its later record', () => {
  const h = Harness.open(operator);
  assert.ok(h.processInput(0, [{ key: 'a', value: '{"i":1}', timestamp: 1n }]).isEmpty());
  const out = h.processInput(1, [
    { key: 'a', value: '{"i":2}', timestamp: 2n },
    { key: 'b', value: '{"i":3}', timestamp: 3n },
  ]);
  assert.deepEqual(out.values(), ['{"key":"a","left":{"i":1},"right":{"i":2}}']);
});
