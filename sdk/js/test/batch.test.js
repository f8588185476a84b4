// The batch cache of value states (contract 0.1.3: state.value-get-many and
// value-set-many), against testing.js's fake host: node --test sdk/js
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from '../testing.js';
import { codecs, explicitKey, keyed, keyedCo, state, utf8 } from '../weir-sdk.js';
import { operator as wordCount } from '../../../udfs/js/word-count/index.js';
import { operator as fraudDetect } from '../../../udfs/js/fraud-detect/index.js';
import { operator as pairJoin } from '../../../udfs/js/pair-join/index.js';

const rec = (key, value, timestamp = 1n) => ({ key, value, timestamp: BigInt(timestamp) });

/**
 * Counts per key (as sdk/src/testing.rs's test counter): "reset" clears,
 * "peek" reads the key `outside` (never in a batch), anything else counts,
 * emits the count and registers a timer at 100 that emits the final value.
 */
const Counter = {
  name: 'counter',
  states: [state.value('count')],
  open(ctx) {
    this.count = ctx.valueState('count', codecs.u64);
  },
  processElement(r, ctx) {
    const v = r.valueString();
    if (v === 'reset') return this.count.clear(ctx);
    if (v === 'peek') return ctx.collect(ctx.key, String(this.count.get(explicitKey('outside'))), 0n);
    if (v === 'boom') throw new Error('boom');
    const n = (this.count.get(ctx) ?? 0n) + 1n;
    this.count.set(ctx, n);
    ctx.registerEventTimeTimer(100n);
    ctx.collect(ctx.key, String(n), 0n);
  },
  onTimer(time, ctx) {
    ctx.collect(ctx.key, `final ${this.count.get(ctx)}`, 0n);
  },
};

test('several records of one key in one batch see each other; the batch costs one read and one write', () => {
  const h = Harness.open(keyed(Counter));
  const out = h.process([rec('a', 'x'), rec('b', 'x'), rec('a', 'x'), rec('a', 'x')]);
  assert.deepEqual(out.values(), ['1', '1', '2', '3']);
  assert.equal(h.batchedStateCalls(), 2, 'one value-get-many and one value-set-many');
  assert.equal(h.stateCalls(), 0, 'no value-get / value-set per record');
  assert.equal(h.valueState('count', 'a', codecs.u64), 3n);
  assert.equal(h.valueState('count', 'b', codecs.u64), 1n);

  // The next batch reads what this one wrote.
  assert.deepEqual(h.process([rec('b', 'x'), rec('a', 'x')]).values(), ['2', '4']);
  assert.equal(h.batchedStateCalls(), 4);
});

test('N records cost 2 batched calls instead of 2N single ones', () => {
  const records = Array.from({ length: 100 }, (_, i) => rec(`k${i % 10}`, 'x', i));
  const batched = Harness.open(keyed(Counter));
  const single = Harness.open(keyed(Counter), { batchedState: false });
  const a = batched.process(records);
  const b = single.process(records);
  assert.deepEqual(a.values(), b.values());
  assert.equal(batched.batchedStateCalls(), 2);
  assert.equal(batched.stateCalls(), 0);
  assert.equal(single.batchedStateCalls(), 0);
  assert.equal(single.stateCalls(), 200);
});

test('clear in a batch, an explicit key outside it, and timers after it', () => {
  const h = Harness.open(keyed(Counter));
  h.process([rec('a', 'x'), rec('b', 'x'), rec('a', 'x'), rec('a', 'x')]);
  h.setRawValueState('count', 'outside', codecs.u64.encode(7n));
  const before = h.stateCalls();
  const out = h.process([rec('a', 'reset'), rec('a', 'x'), rec('b', 'reset'), rec('c', 'peek')]);
  assert.deepEqual(out.values(), ['1', '7']);
  // `a`'s reset came before any read of the state in the batch: a direct
  // clear; the peek at a key outside the batch: a direct value-get.
  assert.equal(h.stateCalls() - before, 2);
  assert.equal(h.batchedStateCalls(), 4);
  assert.equal(h.valueState('count', 'a', codecs.u64), 1n);
  assert.equal(h.valueState('count', 'b', codecs.u64), undefined, 'cleared in the cache, written back');
  // Timers (later host calls, no cache) see what the batches wrote.
  assert.deepEqual(h.advanceWatermark(100n).values(), ['final 1', 'final undefined']);
  assert.equal(h.batchedStateCalls(), 4);
  // A clear before any read in a batch goes to the host at once.
  h.process([rec('a', 'reset', 2)]);
  assert.equal(h.batchedStateCalls(), 4);
  assert.equal(h.valueState('count', 'a', codecs.u64), undefined);
});

test('an explicit key of the batch is served from the cache', () => {
  const h = Harness.open(
    keyed({
      states: [state.value('v')],
      open(ctx) {
        this.v = ctx.valueState('v', codecs.string);
      },
      processElement(r, ctx) {
        const [cmd, arg] = r.valueString().split(' ');
        if (cmd === 'set') this.v.set(explicitKey(arg), `from ${ctx.keyString()}`);
        else ctx.collect(ctx.key, `${ctx.keyString()}=${this.v.get(ctx)}`, 0n);
      },
    }),
  );
  const out = h.process([rec('a', 'get'), rec('a', 'set b'), rec('b', 'get'), rec('b', 'set a'), rec('a', 'get')]);
  assert.deepEqual(out.values(), ['a=undefined', 'b=from a', 'a=from b']);
  assert.equal(h.batchedStateCalls(), 2);
  assert.equal(h.stateCalls(), 0);
  assert.equal(h.valueState('v', 'b', codecs.string), 'from a');
});

test('the batch is written back when the function throws, then the error is reported', () => {
  const h = Harness.open(keyed(Counter));
  assert.throws(() => h.process([rec('a', 'x'), rec('b', 'x'), rec('a', 'x'), rec('a', 'boom')]), {
    message: 'boom',
  });
  assert.equal(h.valueState('count', 'a', codecs.u64), 2n);
  assert.equal(h.valueState('count', 'b', codecs.u64), 1n);
  assert.equal(h.batchedStateCalls(), 2);
  // A record without a key fails the batch; the records before it count.
  assert.throws(() => h.process([rec('a', 'x'), { value: 'x' }]), {
    message: 'record 1 of the batch has no key, but this operator runs on a keyed stream',
  });
  assert.equal(h.valueState('count', 'a', codecs.u64), 3n);
});

test('host errors of the batched calls name the state; the function\'s own error wins', () => {
  const fail = (what) => () => {
    const e = new Error('state error');
    e.payload = { tag: 'backend', val: what };
    throw e;
  };
  let h = Harness.open(keyed(Counter));
  h.host.state.valueGetMany = fail('disk unreadable');
  assert.throws(() => h.process([rec('a', 'x')]), { message: 'state `count`: disk unreadable' });

  h = Harness.open(keyed(Counter));
  h.host.state.valueSetMany = fail('disk full');
  assert.throws(() => h.process([rec('a', 'x')]), { message: 'state `count`: disk full' });
  assert.throws(() => h.process([rec('a', 'x'), rec('a', 'boom')]), { message: 'boom' });

  // A malformed answer is an error, not a wrong value.
  h = Harness.open(keyed(Counter));
  h.host.state.valueGetMany = () => ({ lens: new Int32Array([4]), data: new Uint8Array(2) });
  assert.throws(() => h.process([rec('a', 'x')]), { message: 'state `count`: the host returned a malformed packed list' });
  h.host.state.valueGetMany = () => ({ lens: new Int32Array(0), data: new Uint8Array(0) });
  assert.throws(() => h.process([rec('a', 'x')]), { message: 'state `count`: the host returned 0 values for 1 keys' });
});

test('list and map state, and operators without value state, call the host directly', () => {
  const h = Harness.open(
    keyed({
      states: [state.value('n'), state.list('seen'), state.map('by')],
      open(ctx) {
        this.n = ctx.valueState('n', codecs.u32);
        this.seen = ctx.listState('seen', codecs.string);
        this.by = ctx.mapState('by', codecs.string, codecs.u32);
      },
      processElement(r, ctx) {
        const v = r.valueString();
        this.n.set(ctx, (this.n.get(ctx) ?? 0) + 1);
        this.seen.add(ctx, v);
        this.by.put(ctx, v, (this.by.get(ctx, v) ?? 0) + 1);
        if (v === 'reset') this.seen.clear(ctx);
      },
    }),
  );
  h.process([rec('a', 'x'), rec('a', 'y'), rec('a', 'x'), rec('a', 'reset')]);
  assert.equal(h.batchedStateCalls(), 2);
  assert.equal(h.stateCalls(), 4 * 3 + 1, 'list add, map get, map put per record, and the list clear');
  assert.equal(h.valueState('n', 'a', codecs.u32), 4);
  assert.deepEqual(h.listState('seen', 'a', codecs.string), []);
  assert.deepEqual(h.mapState('by', 'a', codecs.string, codecs.u32), [['reset', 1], ['x', 2], ['y', 1]]);

  const join = Harness.open(pairJoin);
  join.processInput(0, [rec('k', '1'), rec('k', '2')]);
  assert.equal(join.batchedStateCalls(), 0);
});

test('a keyed co-process function batches each input\'s batch', () => {
  const co = keyedCo({
    states: [state.value('last-left'), state.value('pairs')],
    open(ctx) {
      this.left = ctx.valueState('last-left', codecs.string);
      this.pairs = ctx.valueState('pairs', codecs.u32);
    },
    processElement1(r, ctx) {
      this.left.set(ctx, r.valueString());
    },
    processElement2(r, ctx) {
      const n = (this.pairs.get(ctx) ?? 0) + 1;
      this.pairs.set(ctx, n);
      ctx.collect(ctx.key, `${r.valueString()}+${this.left.get(ctx)}#${n}`, r.timestamp);
    },
  });
  const h = Harness.open(co);
  h.processInput(0, [rec('a', 'l1'), rec('b', 'l2'), rec('a', 'l3')]);
  assert.equal(h.batchedStateCalls(), 1, 'only sets: no read, one write');
  const out = h.processInput(1, [rec('a', 'r1'), rec('a', 'r2'), rec('b', 'r3'), rec('c', 'r4')]);
  assert.deepEqual(out.values(), ['r1+l3#1', 'r2+l3#2', 'r3+l2#1', 'r4+undefined#1']);
  assert.equal(h.batchedStateCalls(), 1 + 3, 'reads of both states, a write of one');
  assert.equal(h.stateCalls(), 0);
});

test('cached bytes are not shared with the caller', () => {
  const identity = { name: 'raw', encode: (v) => v, decode: (b) => b };
  const h = Harness.open(
    keyed({
      states: [state.value('raw'), state.value('bytes')],
      open(ctx) {
        this.raw = ctx.valueState('raw', identity);
        this.bytes = ctx.valueState('bytes', codecs.bytes);
      },
      processElement(r, ctx) {
        if (r.valueString() === 'set') {
          const mine = utf8.encode('abc');
          this.raw.set(ctx, mine);
          this.bytes.set(ctx, mine);
          mine[0] = 0x7a; // changing my array afterwards changes nothing stored
        } else {
          const got = this.raw.get(ctx);
          ctx.collect(ctx.key, [utf8.decode(got), '/', utf8.decode(this.bytes.get(ctx))], 0n);
          got[0] = 0x7a; // nor does changing what get returned
        }
      },
    }),
  );
  const out = h.process([rec('k', 'set'), rec('k', 'get'), rec('k', 'get')]);
  assert.deepEqual(out.values(), ['abc/abc', 'abc/abc']);
  assert.equal(h.valueState('raw', 'k', codecs.string), 'abc');
  assert.throws(
    () => Harness.open(keyed({ states: [state.value('v')], open(ctx) { this.v = ctx.valueState('v', { encode: () => 'no', decode: (b) => b }); }, processElement(r, ctx) { this.v.set(ctx, 1); } })).process([rec('k', 'x')]),
    { message: 'state `v`: the codec returned "no", not a Uint8Array' },
  );
});

test('keys are compared as bytes: empty, long and non-UTF-8 keys', () => {
  const long = (last) => {
    const k = new Uint8Array(3000).fill(0xff);
    k[2999] = last;
    return k;
  };
  const keys = [new Uint8Array(0), long(1), long(2), new Uint8Array([0x80]), new Uint8Array([0xc3, 0xa9]), utf8.encode('é')];
  const records = [];
  for (let round = 0; round < 3; round++) keys.forEach((k) => records.push(rec(k, 'x')));
  const batched = Harness.open(keyed(Counter));
  const single = Harness.open(keyed(Counter), { batchedState: false });
  const a = batched.process(records);
  const b = single.process(records);
  assert.deepEqual(a.values(), b.values());
  assert.deepEqual(a.values().slice(-6), ['3', '3', '3', '3', '5', '6'], 'é is the bytes c3 a9: two records per round');
  assert.equal(batched.batchedStateCalls(), 2);
});

/** A deterministic pseudo-random generator (xorshift32). */
function rng(seed) {
  let x = seed;
  return (n) => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) % n;
  };
}

/** Everything observable of a run: outputs (key, value, timestamp), side outputs, stored values. */
function observe(h, out, stateName, keys) {
  return {
    main: out.main.map((r) => [r.keyString(), r.valueString(), r.timestamp]),
    side: out.sideRecords.map((s) => [s.tag, s.record.valueString()]),
    stored: keys.map((k) => h.rawValueState(stateName, k)),
    timers: h.timers().map(([t, k]) => [t, utf8.decode(k)]),
  };
}

test('the examples emit the same bytes and store the same state with and without batching', () => {
  const next = rng(0x5eed);
  const words = ['the', 'a', 'and', 'lord', 'unto', 'é', ''];
  const accounts = ['acct-1', 'acct-2', 'acct-3'];
  const runs = [
    [wordCount, { emit: 'updates' }, 'count', words, () => words[next(words.length)]],
    [wordCount, { emit: 'final' }, 'count', words, () => words[next(words.length)]],
    [fraudDetect, {}, 'small-ts', accounts, () => accounts[next(accounts.length)]],
  ];
  for (const [op, config, stateName, keys, key] of runs) {
    const batched = Harness.open(op, { config });
    const single = Harness.open(op, { config, batchedState: false });
    let t = 0;
    for (let batch = 0; batch < 20; batch++) {
      const records = Array.from({ length: 1 + next(40) }, () => {
        t += next(20_000);
        const k = key();
        const amounts = [0.5, 600.25, 12.0, 0.99, 501];
        const value = op === fraudDetect ? `{"account":"${k}","amount":${amounts[next(amounts.length)]}}` : k;
        return rec(k, value, t);
      });
      assert.deepEqual(
        observe(batched, batched.process(records), stateName, keys),
        observe(single, single.process(records), stateName, keys),
      );
    }
    assert.deepEqual(observe(batched, batched.finish(), stateName, keys), observe(single, single.finish(), stateName, keys));
    assert.equal(batched.batchedStateCalls() <= 40, true);
    assert.equal(batched.stateCalls() < single.stateCalls(), true);
  }
});
