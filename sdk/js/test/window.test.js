// Window functions (contract 0.1.3): the `window-function` export of
// aggregate() / processWindow(), and of every other operator (kind none).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, packBatch } from '../testing.js';
import { Window, aggregate, codecs, keyed, map, processWindow, state, utf8 } from '../weir-sdk.js';

const W = { start: 0n, end: 100n };
const text = (b) => utf8.decode(b);

/** Concatenates values, the accumulator a JSON string (the default codec). */
const concat = aggregate({
  name: 'concat',
  version: '1.2.3',
  open(ctx) {
    this.sep = ctx.config.getStr('sep') ?? ',';
  },
  createAccumulator() {
    return [];
  },
  add(acc, record) {
    acc.push(record.valueString());
  },
  merge(a, b) {
    return a.concat(b);
  },
  getResult(key, window, acc) {
    return `${utf8.decode(key)}@${window.start}-${window.end}:${acc.join(this.sep)}`;
  },
});

test('every other operator exports a window function of kind none, which refuses the calls', () => {
  const op = map({ map: (r) => r.withValue('x') });
  const h = Harness.open(op);
  assert.equal(h.windowKind(), 'none');
  assert.throws(() => h.windowAdd([null], [0], [{ value: '1' }]), /window-function.add: this module is not a window function/);
  assert.throws(() => h.windowMerge([['a', 'b']]), /window-function.merge: this module is not a window function/);
  assert.throws(
    () => h.windowGetResult([{ key: 'k', window: W, accumulator: 'a' }]),
    /window-function.get-result: this module is not a window function/,
  );
  assert.throws(() => h.windowProcess('k', W, ['1']), /window-function.process-window: this module is not a window function/);
  const k = Harness.open(keyed({ states: [state.value('n')], processElement() {} }));
  assert.equal(k.windowKind(), 'none');
  assert.throws(() => Harness.aggregate(op, 'k', W, ['1']), /expected a window function of kind aggregate, but its kind is none/);
});

test('an aggregate: describe, open with config, add / merge / get-result through the wire', () => {
  const h = Harness.open(concat, { config: { sep: '+' } });
  assert.deepEqual(h.info, { name: 'concat', version: '1.2.3', keyed: false, states: [] });
  assert.equal(h.windowKind(), 'aggregate');
  // Three windows; the second already has an accumulator, the third gets no record.
  const before = codecs.json.encode(['x']);
  const accs = h.windowAdd(
    [null, before, null],
    [1, 0, 1, 0],
    [{ value: 'a' }, { value: 'b' }, { value: 'c' }, { value: 'd' }],
  );
  assert.deepEqual(accs.map((a) => codecs.json.decode(a)), [['b', 'd'], ['x', 'a', 'c'], []]);
  const untouched = h.windowAdd([accs[0], accs[1]], [1], [{ value: 'e' }]);
  assert.deepEqual(untouched[0], accs[0]);
  const [merged] = h.windowMerge([[untouched[0], untouched[1]]]);
  assert.deepEqual(codecs.json.decode(merged), ['b', 'd', 'x', 'a', 'c', 'e']);
  const results = h.windowGetResult([
    { key: 'k1', window: W, accumulator: merged },
    { key: 'k2', window: { start: -5n, end: 5n }, accumulator: accs[2] },
  ]);
  assert.deepEqual(results.map(text), ['k1@0-100:b+d+x+a+c+e', 'k2@-5-5:']);
});

test('the harness runs an aggregate in chunks, and merged', () => {
  const values = ['1', '2', '3', '4', '5'];
  for (const chunk of [1, 2, 5, 9]) {
    const r = Harness.aggregate(concat, 'k', W, values, chunk);
    assert.equal(r.valueString(), 'k@0-100:1,2,3,4,5');
    assert.equal(r.keyString(), 'k');
    assert.equal(r.timestamp, 99n);
  }
  assert.equal(Harness.aggregate(concat, 'k', W, []).valueString(), 'k@0-100:');
  assert.equal(Harness.mergedAggregate(concat, 'k', W, ['1', '2'], ['3']).valueString(), 'k@0-100:1,2,3');
  assert.equal(
    Harness.aggregate(concat, 'k', W, ['1'], 1, { config: { sep: ';' } }).valueString(),
    'k@0-100:1',
  );
  assert.throws(() => Harness.aggregate(concat, 'k', W, ['1'], 0), /chunk must be a positive integer/);
});

test('add checks its targets; bad accumulators and results are errors, not crashes', () => {
  const h = Harness.open(concat);
  assert.throws(
    () => h.windowAdd([null, null], [0, 2], [{ value: 'a' }, { value: 'b' }]),
    { message: 'window-function.add: record 1 goes to accumulator 2, but 2 accumulators were given' },
  );
  assert.throws(() => h.windowAdd([], [0], [{ value: 'a' }]), /record 0 goes to accumulator 0, but 0 accumulators were given/);
  assert.throws(() => h.windowAdd([null], [0, 0], [{ value: 'a' }]), /2 targets for 1 records/);
  assert.throws(() => h.windowAdd(['not json'], [0], [{ value: 'a' }]), /cannot decode an accumulator \(codec json\)/);
  // A malformed batch is refused as in `process`.
  const batch = packBatch([{ value: 'a' }]);
  batch.valueLens[0] = 7;
  assert.throws(() => h._guest(() => concat.windowFunction.add([undefined], new Uint32Array([0]), batch)), /malformed batch/);

  const bad = Harness.open(
    aggregate({ createAccumulator: () => 0, add: (a) => a + 1, getResult: () => 42 }),
  );
  const [acc] = bad.windowAdd([null], [0], [{ value: 'a' }]);
  assert.deepEqual(codecs.json.decode(acc), 1);
  assert.throws(
    () => bad.windowGetResult([{ key: 'k', window: W, accumulator: acc }]),
    /getResult must return a Uint8Array or a string, got 42/,
  );
  assert.throws(() => bad.windowMerge([[acc, acc]]), /this aggregate has no `merge` \(session windows need one\)/);
  const throwing = Harness.open(
    aggregate({
      createAccumulator: () => 0,
      add() {
        throw new RangeError('too big');
      },
      getResult: () => '',
    }),
  );
  assert.throws(() => throwing.windowAdd([null], [0], [{ value: 'a' }]), { message: 'RangeError: too big' });
});

test('a class definition with a custom accumulator codec', () => {
  class Sum {
    static name = 'sum';
    static version = '2.0.0';
    static accumulator = codecs.i64;
    createAccumulator() {
      return 0n;
    }
    add(acc, record) {
      return acc + BigInt(record.valueString());
    }
    merge(a, b) {
      return a + b;
    }
    getResult(key, window, acc) {
      assert.ok(window instanceof Window);
      assert.equal(window.maxTimestamp(), 99n);
      return codecs.i64.encode(acc);
    }
  }
  const fn = aggregate(Sum);
  const h = Harness.open(fn);
  assert.equal(h.info.name, 'sum');
  const [acc] = h.windowAdd([null], [0, 0], [{ value: '20' }, { value: '22' }]);
  assert.deepEqual(acc, codecs.i64.encode(42n));
  const r = Harness.mergedAggregate(fn, 'k', W, ['1', '2'], ['3']);
  assert.equal(codecs.i64.decode(r.value), 6n);
});

test('definitions are checked when they are made', () => {
  assert.throws(() => aggregate({ add() {}, getResult() {} }), /needs a `createAccumulator` method/);
  assert.throws(() => processWindow({}), /needs a `processWindow` method/);
  assert.throws(
    () => aggregate({ states: [state.value('x')], createAccumulator() {}, add() {}, getResult() {} }),
    /a window function has no keyed state/,
  );
  assert.throws(
    () => aggregate({ accumulator: 'json', createAccumulator() {}, add() {}, getResult() {} }),
    /expected a codec/,
  );
});

/** Emits every record with its position, a side output per window, and a record with its own timestamp. */
const echo = processWindow({
  name: 'echo',
  processWindow(key, window, records, out) {
    records.forEach((r, i) => out.collect(key, `${i}:${r.valueString()}@${r.timestamp}`));
    out.output('sizes', null, String(records.length));
    out.collect('explicit', `${window.start}..${window.end}`, 5n);
  },
});

test('a process-window function gets the whole window and emits through the collector', () => {
  const h = Harness.open(echo);
  assert.equal(h.windowKind(), 'process-window');
  assert.deepEqual(h.info, { name: 'echo', version: '0.0.0', keyed: false, states: [] });
  // The raw export: records emitted without a timestamp get end - 1.
  const batch = packBatch([
    { key: 'k', value: 'a', timestamp: 3n },
    { key: 'k', value: 'b', timestamp: 1n },
  ]);
  const raw = h._guest(() => echo.windowFunction.processWindow(utf8.encode('k'), W, batch));
  assert.deepEqual(Array.from(raw.main.timestamps), [99n, 99n, 5n]);
  assert.deepEqual(Array.from(raw.side[0].records.timestamps), [99n]);
  // Through the harness, as the host emits: every timestamp end - 1.
  const out = h.windowProcess('k', W, [
    { value: 'a', timestamp: 3n },
    { value: 'b', timestamp: 1n },
  ]);
  assert.deepEqual(out.values(), ['0:a@3', '1:b@1', '0..100']);
  assert.deepEqual(
    out.main.map((r) => [r.keyString(), r.timestamp]),
    [['k', 99n], ['k', 99n], ['explicit', 99n]],
  );
  assert.deepEqual(out.side('sizes').map((r) => [r.keyString(), r.valueString(), r.timestamp]), [[null, '2', 99n]]);
  // A second call starts from empty outputs.
  assert.deepEqual(Harness.processWindow(echo, 'z', W, []).values(), ['0..100']);
  assert.deepEqual(Harness.processWindow(echo, 'z', W, []).side('sizes').map((r) => r.valueString()), ['0']);
});

test('a window function is not a plain operator; describe and open still work', () => {
  for (const fn of [concat, echo]) {
    const h = Harness.open(fn);
    const kind = h.windowKind() === 'aggregate' ? 'aggregate' : 'process-window';
    const plain = new RegExp(`is a window function \\(${kind}\\): use it in an \\[\\[operator\\]\\] with a \`window\` table`);
    assert.throws(() => h.process([{ key: 'k', value: '1' }]), plain);
    assert.throws(() => h.processInput(1, [{ key: 'k', value: '1' }]), plain);
    assert.ok(h.advanceWatermark(5n).isEmpty(), 'a watermark does nothing');
    assert.throws(() => h._guest(() => fn.onTimer(utf8.encode('k'), 5n)), plain);
    assert.throws(() => h._guest(() => fn.onProcessingTimer(utf8.encode('k'), 5n)), plain);
    assert.ok(h.close().isEmpty(), 'close has nothing to flush');
    assert.deepEqual(h.migrateState('x', '0.1.0', 'old'), utf8.encode('old'));
  }
  assert.throws(() => Harness.open(echo).windowGetResult([{ key: 'k', window: W, accumulator: '' }]), {
    message: 'window-function.get-result: `echo` is a process-window function, not an aggregate function',
  });
  assert.throws(() => Harness.open(concat).windowProcess('k', W, []), {
    message: 'window-function.process-window: `concat` is an aggregate function, not a process-window function',
  });
});

test('window calls before open are refused', () => {
  Harness.open(map({ map: (r) => r })); // binds a host
  const fresh = aggregate({ createAccumulator: () => 0, add: (a) => a, getResult: () => '' });
  assert.throws(() => fresh.windowFunction.add([undefined], new Uint32Array(0), packBatch([])), (e) =>
    String(e).includes('before a successful `open`'),
  );
  assert.equal(fresh.windowFunction.kind(), 'aggregate');
});
