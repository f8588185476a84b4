// Unit tests of the JS SDK itself, against testing.js's fake host:
// node --test sdk/js
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../testing.js';
import {
  Config,
  MAX_TIMESTAMP,
  WeirError,
  codecs,
  filter,
  flatMap,
  keyed,
  keyedCo,
  log,
  map,
  metrics,
  state,
  utf8,
} from '../weir-sdk.js';

const b = (...xs) => new Uint8Array(xs);

function roundTrip(codec, value, bytes) {
  assert.deepEqual(codec.encode(value), bytes, `encoding of ${codec.name} ${value}`);
  assert.deepEqual(codec.decode(bytes), value);
}

test('codecs match the shared table of wit/README.md and sdk/src/codec.rs', () => {
  roundTrip(codecs.u8, 0x12, b(0x12));
  roundTrip(codecs.u16, 0x1234, b(0x34, 0x12));
  roundTrip(codecs.u32, 0x12345678, b(0x78, 0x56, 0x34, 0x12));
  roundTrip(codecs.u64, 1n, b(1, 0, 0, 0, 0, 0, 0, 0));
  roundTrip(codecs.u64, 0xffffffffffffffffn, b(255, 255, 255, 255, 255, 255, 255, 255));
  roundTrip(codecs.i8, -1, b(0xff));
  roundTrip(codecs.i16, -2, b(0xfe, 0xff));
  roundTrip(codecs.i32, -1, b(0xff, 0xff, 0xff, 0xff));
  roundTrip(codecs.i64, -9223372036854775808n, b(0, 0, 0, 0, 0, 0, 0, 0x80));
  roundTrip(codecs.f32, 1.0, b(0, 0, 0x80, 0x3f));
  roundTrip(codecs.f64, 1.0, b(0, 0, 0, 0, 0, 0, 0xf0, 0x3f));
  roundTrip(codecs.bool, true, b(1));
  roundTrip(codecs.bool, false, b(0));
  roundTrip(codecs.string, 'héllo', b(0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f));
  roundTrip(codecs.bytes, b(0, 255), b(0, 255));
  roundTrip(codecs.unit, null, b());
  assert.deepEqual(codecs.u64.encode(3), b(3, 0, 0, 0, 0, 0, 0, 0), 'numbers are accepted for u64');
});

test('bad bytes are errors, not crashes', () => {
  assert.throws(() => codecs.u64.decode(b(1, 2, 3)), { message: 'cannot decode u64: expected 8 bytes, got 3' });
  assert.throws(() => codecs.bool.decode(b(2)), { message: 'cannot decode bool: invalid byte 2' });
  assert.throws(() => codecs.bool.decode(b()));
  assert.throws(() => codecs.string.decode(b(0xff, 0xfe)));
  assert.throws(() => codecs.unit.decode(b(0)));
  assert.throws(() => codecs.f64.decode(b(0, 0, 0, 0)));
  assert.throws(() => codecs.u8.encode(256), /out of range/);
  assert.throws(() => codecs.u64.encode(-1n), /out of range/);
});

test('the UTF-8 fallback (QuickJS has no TextEncoder) agrees with TextEncoder', () => {
  const samples = ['', 'abc', 'héllo wörld', '日本語', '😀 emoji', 'a'.repeat(40) + '€', '\u{10ffff}'];
  for (const s of samples) {
    assert.deepEqual(utf8.encode(s), new TextEncoder().encode(s), s);
    assert.equal(utf8.decode(new TextEncoder().encode(s)), s);
  }
  assert.equal(utf8.decode(b(0x61, 0xff, 0x62)), 'a\ufffdb');
});

test('config getters parse TOML scalars and explain bad values', () => {
  const c = new Config([
    ['b', 'true'],
    ['n', '1_000'],
    ['h', '0xff'],
    ['neg', '-5'],
    ['f', '2.5'],
    ['s', 'hello'],
    ['t', '{"a":1}'],
  ]);
  assert.equal(c.getBool('b'), true);
  assert.equal(c.getU64('n'), 1000n);
  assert.equal(c.getU64('h'), 255n);
  assert.equal(c.getI64('neg'), -5n);
  assert.equal(c.getInt('n'), 1000);
  assert.equal(c.getF64('f'), 2.5);
  assert.equal(c.getStr('s'), 'hello');
  assert.deepEqual(c.getJson('t'), { a: 1 });
  assert.equal(c.getBool('missing'), undefined);
  assert.throws(() => new Config([['b', 'yes']]).getBool('b'), {
    message: 'config `b`: expected a bool (true or false), got `yes`',
  });
  assert.throws(() => c.requireStr('contains'), { message: 'config `contains` is required but missing' });
});

test('map, filter and flatMap see every record of a batch and emit in bulk', () => {
  const upper = map({ map: (r) => r.withValue(r.valueString().toUpperCase()) });
  let h = Harness.open(upper);
  let out = h.process([{ value: 'a', timestamp: 1n }, { key: 'k', value: 'bc', timestamp: 2n }]);
  assert.deepEqual(out.values(), ['A', 'BC']);
  assert.equal(out.main[0].key, null);
  assert.equal(out.main[1].keyString(), 'k');
  assert.equal(out.main[1].timestamp, 2n);

  const keep = filter({
    open(ctx) {
      this.needle = ctx.config.requireStr('contains');
    },
    filter(r) {
      return r.valueString().includes(this.needle);
    },
  });
  h = Harness.open(keep, { config: { contains: 'x' } });
  out = h.process([{ key: 'k1', value: 'axe', timestamp: 5n }, { value: 'no' }, { value: 'x' }]);
  assert.deepEqual(out.values(), ['axe', 'x']);
  assert.equal(out.main[0].keyString(), 'k1');
  assert.equal(out.main[0].timestamp, 5n);

  const words = flatMap({
    flatMap(r, out) {
      for (const w of r.valueString().split(' ')) out.collect(w, w, r.timestamp);
    },
  });
  h = Harness.open(words);
  assert.deepEqual(h.process([{ value: 'a b' }, { value: 'c' }]).values(), ['a', 'b', 'c']);
});

test('a big batch grows the output buffers', () => {
  const h = Harness.open(map({ map: (r) => r.withValue('é'.repeat(100)) }));
  const records = Array.from({ length: 1000 }, (_, i) => ({ value: String(i), timestamp: BigInt(i) }));
  const out = h.process(records);
  assert.equal(out.main.length, 1000);
  assert.equal(out.main[999].valueString(), 'é'.repeat(100));
});

class Sessions {
  static states = [state.list('seen'), state.map('per-value'), state.value('total')];
  open(ctx) {
    this.seen = ctx.listState('seen', codecs.string);
    this.perValue = ctx.mapState('per-value', codecs.string, codecs.u32);
    this.total = ctx.valueState('total', codecs.u64);
  }
  processElement(record, ctx) {
    const v = record.valueString();
    this.seen.add(ctx, v);
    this.perValue.put(ctx, v, (this.perValue.get(ctx, v) ?? 0) + 1);
    this.total.set(ctx, (this.total.get(ctx) ?? 0n) + 1n);
    if (v === 'late') ctx.output('late', ctx.key, v, record.timestamp);
    ctx.registerEventTimeTimer(record.timestamp + 10n);
    log.info('saw', v);
    metrics.counterAdd('records');
  }
  onTimer(time, ctx) {
    const entries = this.perValue.entries(ctx).map(([k, n]) => `${k}=${n}`);
    ctx.collect(ctx.key, `${ctx.keyString()}@${time}: ${this.seen.get(ctx).join(',')} | ${entries.join(',')}`, time);
    this.seen.clear(ctx);
  }
}

test('list, map and value state are scoped to the current key; timers fire in order', () => {
  const h = Harness.open(keyed(Sessions));
  const out = h.process([
    { key: 'a', value: 'x', timestamp: 1n },
    { key: 'b', value: 'late', timestamp: 2n },
    { key: 'a', value: 'y', timestamp: 3n },
    { key: 'a', value: 'x', timestamp: 3n },
  ]);
  assert.deepEqual(
    out.side('late').map((r) => r.valueString()),
    ['late'],
  );
  assert.equal(h.timers().length, 3);
  const fired = h.advanceWatermark(12n);
  assert.deepEqual(fired.values(), ['a@11: x,y,x | x=2,y=1', 'b@12: late | late=1']);
  assert.equal(h.valueState('total', 'a', codecs.u64), 3n);
  assert.equal(h.counter('records'), 4n);
  assert.equal(h.logs()[0][1], 'saw x');
  assert.deepEqual(h.finish().values(), ['a@13:  | x=2,y=1'], 'the list was cleared, the map was not');
});

test('a snapshot restores state, timers and the watermark on a new instance, which goes on as the old one', () => {
  const first = keyed(Sessions);
  const h = Harness.open(first);
  const rec = (key, value, timestamp) => ({ key, value, timestamp });
  h.process([rec('a', 'x', 1n), rec('b', 'y', 2n), rec('a', 'x', 3n)]);
  h.advanceWatermark(11n); // fires a's timer at 11
  const checkpoint = h.snapshot();
  assert.equal(checkpoint.watermark, 11n);
  assert.deepEqual(
    checkpoint.timers.map(([t, k]) => [t, utf8.decode(k)]),
    [[12n, 'b'], [13n, 'a']],
  );
  assert.deepEqual(checkpoint.states.total.entries.get('61'), codecs.u64.encode(2n)); // key 'a' as hex

  const goOn = (harness) => {
    const out = harness.process([rec('a', 'z', 20n), rec('c', 'late', 21n)]);
    out.extend(harness.finish());
    return { out: [out.values(), out.side('late').map((r) => r.valueString())], state: harness.snapshot() };
  };
  const restored = Harness.open(keyed(Sessions), { restore: checkpoint });
  assert.deepEqual(restored.snapshot(), checkpoint);
  assert.deepEqual(goOn(restored), goOn(h));
  assert.deepEqual(restored.listState('seen', 'c', codecs.string), []);
  // A deep copy: going on changed nothing in it.
  assert.deepEqual(checkpoint.states.seen.entries.get('62'), [utf8.encode('y')]);
  assert.equal(checkpoint.states['per-value'].entries.get('61').size, 1);

  const other = keyed({ states: [state.list('total')], processElement() {} });
  assert.throws(() => Harness.open(other, { restore: checkpoint }), {
    message: /^restore: the snapshot's list state `seen` is not declared by .* \(declared: total \(list\)\)$/,
  });
  assert.throws(() => Harness.open(first, { restore: { total: 1 } }), TypeError);
});

test('a thrown exception fails the call with its message; records without a key fail keyed operators', () => {
  const h = Harness.open(
    keyed({
      processElement(r) {
        if (r.valueString() === 'boom') throw new WeirError('boom: refused');
        if (r.valueString() === 'bug') null.x;
      },
    }),
  );
  assert.throws(() => h.process([{ key: 'k', value: 'boom' }]), { message: 'boom: refused' });
  assert.throws(() => h.process([{ key: 'k', value: 'bug' }]), { message: /^TypeError: / });
  assert.throws(() => h.process([{ value: 'x' }]), {
    message: 'record 0 of the batch has no key, but this operator runs on a keyed stream',
  });
});

test('undeclared state and malformed batches are clear errors', () => {
  assert.throws(
    () => Harness.open(keyed({ states: [state.value('count')], open: (ctx) => ctx.valueState('nope', codecs.u64), processElement() {} })),
    { message: 'state `nope` is not declared (declared: ["count"])' },
  );
  assert.throws(
    () => Harness.open(keyed({ states: [state.value('count')], open: (ctx) => ctx.mapState('count', codecs.u8, codecs.u8), processElement() {} })),
    { message: 'state `count` is declared as value state, not map state' },
  );
  const h = Harness.open(map({ map: (r) => r }));
  assert.throws(
    () => h.processBatch({ timestamps: new BigInt64Array(1), keyLens: new Int32Array(1), valueLens: new Uint32Array([5]), data: b(1) }),
    { message: 'malformed batch: record lengths add up to 5 bytes but data holds 1' },
  );
});

test('describe reports name, version, keyed and the declared states', () => {
  const op = keyed({ name: 'n', version: '1.2.3', states: [state.value('a'), state.list('b', { ttlMs: 1000 })], processElement() {} });
  const h = Harness.open(op);
  assert.deepEqual(h.info, {
    name: 'n',
    version: '1.2.3',
    keyed: true,
    states: [
      { name: 'a', kind: 'value', ttlMs: undefined },
      { name: 'b', kind: 'list', ttlMs: 1000n },
    ],
  });
  assert.equal(h.finish().isEmpty(), true);
  assert.equal(h.currentWatermark(), MAX_TIMESTAMP);
});

/** Version 2 of an operator: every state kind, with and without a migration. */
const upgraded = keyed({
  name: 'upgraded',
  version: '2.0.0',
  states: [
    // 1.x stored `total` as a u32; 2.x stores a u64.
    state.value('total', {
      migrate: (fromVersion, old) =>
        fromVersion.startsWith('1.') ? codecs.u64.encode(BigInt(codecs.u32.decode(old))) : old,
    }),
    state.list('tags', { migrate: (fromVersion, old) => utf8.encode(utf8.decode(old).toUpperCase()) }),
    state.map('per-tag', { migrate: (fromVersion, old) => utf8.encode(`${utf8.decode(old)}@${fromVersion}`) }),
    state.value('untouched'),
    state.value('broken', {
      migrate(fromVersion, old) {
        throw new RangeError(`cannot read ${old.length} bytes`);
      },
    }),
    state.value('wrong', { migrate: () => 'not bytes' }),
  ],
  open(ctx) {
    this.total = ctx.valueState('total', codecs.u64);
    this.tags = ctx.listState('tags', codecs.string);
    this.perTag = ctx.mapState('per-tag', codecs.string, codecs.string);
    this.untouched = ctx.valueState('untouched', codecs.string);
  },
  processElement(record, ctx) {
    const tag = record.valueString();
    this.total.set(ctx, (this.total.get(ctx) ?? 0n) + 1n);
    this.tags.add(ctx, tag);
    this.perTag.put(ctx, tag, tag);
    this.untouched.set(ctx, tag);
  },
});

test('migrate-state: a state with a migration gets its result', () => {
  const h = Harness.open(upgraded);
  assert.deepEqual(h.migrateState('total', '1.4.0', codecs.u32.encode(41)), codecs.u64.encode(41n));
  assert.deepEqual(h.migrateState('tags', '1.0.0', 'red'), utf8.encode('RED'));
  assert.deepEqual(h.migrateState('per-tag', '1.0.0', 'v'), utf8.encode('v@1.0.0'));
  // The function sees the version: one already in the new encoding stays.
  assert.deepEqual(h.migrateState('total', '2.0.0-rc1', codecs.u64.encode(7n)), codecs.u64.encode(7n));
});

test('migrate-state: states without a migration, and unknown ones, keep their bytes', () => {
  const h = Harness.open(upgraded);
  const old = b(0xff, 0x00, 0x61);
  assert.deepEqual(h.migrateState('untouched', '1.0.0', old), old);
  assert.deepEqual(h.migrateState('no-such-state', '1.0.0', old), old);
  const plain = Harness.open(map({ map: (r) => r }));
  assert.deepEqual(plain.migrateState('anything', '0.0.1', old), old);
});

test('migrate-state: a failing migration is an error naming the state and the version', () => {
  const h = Harness.open(upgraded);
  assert.throws(() => h.migrateState('broken', '1.2.3', b(1, 2)), {
    message: 'migrating state `broken` from version 1.2.3: RangeError: cannot read 2 bytes',
  });
  assert.throws(() => h.migrateState('total', '1.0.0', b(1, 2)), {
    message: 'migrating state `total` from version 1.0.0: cannot decode u32: expected 4 bytes, got 2',
  });
  assert.throws(() => h.migrateState('wrong', '1.0.0', b()), {
    message: 'migrating state `wrong` from version 1.0.0: the migration returned string, not a Uint8Array',
  });
  assert.throws(() => state.value('x', { migrate: 'not a function' }), /migrate must be a function/);
});

test('migrate-state needs no open, and is what the component exports as `migration`', () => {
  let opened = false;
  const op = keyed({
    states: [state.list('tags', { migrate: (v, old) => old.subarray(1) })],
    open() {
      opened = true;
    },
    processElement() {},
  });
  globalThis.__weirHost = { backend: 'test' }; // what build.sh's wrapper binds before any call
  assert.deepEqual(op.migrateState('tags', '1.0.0', b(1, 2, 3)), b(2, 3));
  assert.equal(opened, false);
  // Errors are thrown as strings: the bindings map them to the contract's err.
  assert.throws(() => op.migrateState('tags', '1.0.0', null), (e) => typeof e === 'string');
});

/** A harness whose state an operator 1.x left: `total` still a u32. */
function seeded() {
  const h = Harness.open(upgraded);
  h.process([
    { key: 'k', value: 'red' },
    { key: 'k', value: 'blue' },
  ]);
  h.setRawValueState('total', 'k', codecs.u32.encode(5));
  return h;
}

test('migrating stored state rewrites values, list elements and map values (not user keys)', () => {
  const h = seeded();
  h.migrateStoredState('1.0.0');
  assert.equal(h.valueState('total', 'k', codecs.u64), 5n);
  assert.deepEqual(h.listState('tags', 'k', codecs.string), ['RED', 'BLUE']);
  assert.deepEqual(h.mapState('per-tag', 'k', codecs.string, codecs.string), [
    ['blue', 'blue@1.0.0'],
    ['red', 'red@1.0.0'],
  ]);
  assert.equal(h.valueState('untouched', 'k', codecs.string), 'blue');
});

test('a failed migration leaves stored state as it was; the same version migrates nothing', () => {
  const h = seeded();
  h.setRawValueState('broken', 'k', b(1));
  assert.throws(() => h.migrateStoredState('1.0.0'), { message: /^migrating state `broken` from version 1.0.0: / });
  assert.deepEqual(h.rawValueState('total', 'k'), codecs.u32.encode(5));
  assert.deepEqual(h.listState('tags', 'k', codecs.string), ['red', 'blue']);
  const same = seeded();
  same.migrateStoredState('2.0.0');
  assert.deepEqual(same.rawValueState('total', 'k'), codecs.u32.encode(5));
});

test('keyedCo pairs both inputs; a one-input operator refuses input 1', () => {
  const pairs = keyedCo({
    states: [state.list('left'), state.list('right')],
    open(ctx) {
      this.left = ctx.listState('left', codecs.bytes);
      this.right = ctx.listState('right', codecs.bytes);
    },
    arrive(record, ctx, mine, other, isLeft) {
      for (const o of other.get(ctx)) {
        const [l, r] = isLeft ? [record.value, o] : [o, record.value];
        ctx.collect(ctx.key, new Uint8Array([...l, 124, ...r]), record.timestamp);
      }
      mine.add(ctx, record.value);
    },
    processElement1(record, ctx) {
      this.arrive(record, ctx, this.left, this.right, true);
    },
    processElement2(record, ctx) {
      this.arrive(record, ctx, this.right, this.left, false);
    },
  });
  const h = Harness.open(pairs);
  assert.ok(h.processInput(0, [{ key: 'a', value: 'l1', timestamp: 1n }]).isEmpty());
  const out = h.processInput(1, [
    { key: 'a', value: 'r1', timestamp: 2n },
    { key: 'b', value: 'r2', timestamp: 3n },
  ]);
  assert.deepEqual(out.values(), ['l1|r1']);
  assert.deepEqual(h.process([{ key: 'a', value: 'l2', timestamp: 4n }]).values(), ['l2|r1']);

  const one = Harness.open(keyed({ processElement() {} }));
  assert.throws(() => one.processInput(1, [{ key: 'a', value: 'x' }]), /one input/);
});

test('processing-time timers fire on the harness clock', () => {
  const idle = keyed({
    states: [state.value('deadline')],
    open(ctx) {
      this.deadline = ctx.valueState('deadline', codecs.i64);
    },
    processElement(record, ctx) {
      const old = this.deadline.get(ctx);
      if (old !== undefined && old !== null) ctx.deleteProcessingTimeTimer(old);
      const at = ctx.currentProcessingTime() + 1000n;
      ctx.registerProcessingTimeTimer(at);
      this.deadline.set(ctx, at);
    },
    onProcessingTimer(time, ctx) {
      if (this.deadline.get(ctx) === time) {
        this.deadline.clear(ctx);
        ctx.collect(ctx.key, `${ctx.keyString()}\tidle`, time);
      }
    },
  });
  const h = Harness.open(idle);
  h.process([
    { key: 'a', value: 'x', timestamp: 1n },
    { key: 'b', value: 'x', timestamp: 1n },
  ]);
  assert.ok(h.advanceProcessingTime(500).isEmpty());
  h.process([{ key: 'a', value: 'x', timestamp: 2n }]);
  assert.deepEqual(h.advanceProcessingTime(600).values(), ['b\tidle']);
  assert.deepEqual(h.advanceProcessingTime(400).values(), ['a\tidle']);
  assert.ok(h.advanceProcessingTime(10000).isEmpty());
});
