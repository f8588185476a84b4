// The example operators of udfs/js give byte-identical results with and
// without the batch cache of value states (contract 0.1.3, issue 11):
// node --test sdk/js/test/examples.test.js
//
// Word count (both emit modes), fraud detection and the sequence checker
// each run twice over the same seeded input: once batched (value-get-many /
// value-set-many) and once with every state access its own host call
// (`Harness.open(op, { batchedState: false })`). Every run goes through the
// same scenario (`drive`):
//
//   1. batches of random sizes (with several records of one key in a
//      batch), the watermark advanced after each (none of the three
//      registers a timer that fires before the final watermark: word
//      count's fire at MAX_TIMESTAMP, the others use none);
//   2. a checkpoint (`h.snapshot()`) after CHECKPOINT_AFTER batches;
//   3. LOST more batches, and for word count the end of input (its timers
//      fire mid-run), which a failure then loses;
//   4. a new instance restored from the checkpoint replays from there; the
//      final watermark and `close` end the run.
//
// Both runs must agree on every output (the lost attempt's too), on every
// snapshot (all states' bytes and the timers) at the checkpoint, at the
// failure, before and after the end; the batched run must have made batched
// state calls and the per-call run none. The committed output (the lost
// attempt's left out, as a transactional sink does) and the final state
// must also equal an expectation computed here, without Weir.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, MAX_TIMESTAMP } from '../testing.js';
import { utf8 } from '../weir-sdk.js';
import { operator as wordCount } from '../../../udfs/js/word-count/index.js';
import { operator as fraudDetect } from '../../../udfs/js/fraud-detect/index.js';
import { operator as sequenceCheck } from '../../../udfs/js/sequence-check/index.js';

/** Batches per run, and how they split around the checkpoint and the failure. */
const BATCHES = 40;
const CHECKPOINT_AFTER = 15;
const LOST = 8;
/** Seeds per example: each one a different input. */
const SEEDS = [1, 2, 3, 4, 5];
const U64_MAX = 0xffffffffffffffffn;

/** A seeded generator (mulberry32): `next(n)` is an integer in [0, n). */
function random(seed) {
  let a = seed >>> 0;
  return (n) => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * n;
  };
}
const pick = (next, list) => list[Math.floor(next(list.length))];
const below = (next, n) => Math.floor(next(n));

const hex = (s) => Array.from(utf8.encode(s), (x) => x.toString(16).padStart(2, '0')).join('');
const le = (n, signed) => {
  const b = new Uint8Array(8);
  const view = new DataView(b.buffer);
  if (signed) view.setBigInt64(0, n, true);
  else view.setBigUint64(0, n, true);
  return b;
};
const byBytes = (a, b) => {
  const x = utf8.encode(a);
  const y = utf8.encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i] - y[i];
  return x.length - y.length;
};
const rec = (key, value, timestamp) => ({ key, value, timestamp: BigInt(timestamp) });

// -- the examples: input, and what they must emit and store -----------------

/**
 * udfs/js/word-count: `count` per word, emitted per record ("updates") or
 * once at the end of input ("final"). Expectations are [key, value,
 * timestamp] strings (main) and [tag, key, value, timestamp] (side).
 */
function wordCountExample(emit) {
  const words = ['the', 'and', 'lord', 'unto', 'é', '', 'a'];
  const counts = (records) => {
    const c = new Map();
    for (const r of records) c.set(r.key, (c.get(r.key) ?? 0) + 1);
    return c;
  };
  return {
    name: `word count, emit = ${emit}`,
    op: wordCount,
    config: { emit },
    // The lost attempt reaches the end of input: the timers ("final") fire mid-run.
    endsInLostAttempt: true,
    *records(next) {
      let ts = 0;
      for (;;) {
        ts += below(next, 3);
        const w = pick(next, words);
        yield rec(w, w, ts);
      }
    },
    expect(records) {
      if (emit !== 'updates') return { main: [], side: [] };
      const c = new Map();
      const main = records.map((r) => {
        c.set(r.key, (c.get(r.key) ?? 0) + 1);
        return [r.key, `${r.key}\t${c.get(r.key)}`, r.timestamp];
      });
      return { main, side: [] };
    },
    end(records) {
      if (emit === 'updates') return [];
      return [...counts(records)].sort((a, b) => byBytes(a[0], b[0])).map(([w, n]) => [w, `${w}\t${n}`, MAX_TIMESTAMP]);
    },
    state(records) {
      const entries = new Map([...counts(records)].map(([w, n]) => [hex(w), le(BigInt(n))]));
      return { count: { kind: 'value', entries } };
    },
  };
}

/**
 * udfs/js/fraud-detect: a small transaction then a large one within a
 * minute raises an alert; the flag `small-ts` per account.
 */
function fraudExample() {
  // Accounts (the record keys) and each as a JSON string, as alerts print it.
  const accounts = new Map([
    ['acct-1', '"acct-1"'],
    ['acct-2', '"acct-2"'],
    ['acct-3', '"acct-3"'],
    ['acct "7"', '"acct \\"7\\""'],
    ['compte-é', '"compte-é"'],
  ]);
  const small = ['0.5', '0.99', '0', '-3.5'];
  const medium = ['12', '100.0', '500', '1.00'];
  // Large amounts as written in the input, and as Rust prints them.
  const large = new Map([
    ['600.25', '600.25'],
    ['501.0', '501'],
    ['500.01', '500.01'],
    ['7e2', '700'],
    ['2.5E+3', '2500'],
    ['1234.5678', '1234.5678'],
    ['1e21', '1000000000000000000000'],
  ]);
  const amount = (r) => r.value.split('"amount":')[1].slice(0, -1);
  return {
    name: 'fraud detection',
    op: fraudDetect,
    config: {},
    endsInLostAttempt: false,
    *records(next) {
      const amounts = [...small, ...medium, ...large.keys()];
      let ts = 0;
      for (;;) {
        ts += below(next, 15_000);
        const account = pick(next, [...accounts.keys()]);
        yield rec(account, `{"account":${accounts.get(account)},"amount":${pick(next, amounts)}}`, ts);
      }
    },
    expect(records) {
      const flags = new Map();
      const main = [];
      for (const r of records) {
        const a = amount(r);
        if (flags.has(r.key)) {
          const t0 = flags.get(r.key);
          if (large.has(a) && r.timestamp - t0 <= 60_000n) {
            const account = accounts.get(r.key);
            const alert = `{"account":${account},"small_ts":${t0},"large_ts":${r.timestamp},"amount":${large.get(a)}}`;
            main.push([r.key, alert, r.timestamp]);
          }
          flags.delete(r.key);
        }
        if (small.includes(a)) flags.set(r.key, r.timestamp);
      }
      return { main, side: [] };
    },
    end: () => [],
    state(records) {
      const flags = new Map();
      for (const r of records) {
        flags.delete(hex(r.key));
        if (small.includes(amount(r))) flags.set(hex(r.key), le(r.timestamp, true));
      }
      return { 'small-ts': { kind: 'value', entries: flags } };
    },
  };
}

/**
 * udfs/js/sequence-check: per key, values advance by `step`; the others go
 * to the side output `alerts`. The input has records lost, repeated and
 * swapped, and a key that is no number.
 */
function sequenceExample() {
  const keys = 4;
  const number = (r) => BigInt(r.value.split('.')[0]);
  return {
    name: 'sequence check',
    op: sequenceCheck,
    config: { step: String(keys) },
    endsInLostAttempt: false,
    *records(next) {
      let n = 0;
      let x = 0;
      const pending = [];
      for (;;) {
        const fault = below(next, 40);
        if (fault === 0) n++; // lost
        const record = rec(String(n % keys), String(n) + '.'.repeat(below(next, 3)), n);
        if (fault === 1) pending.push(record); // repeated
        if (fault === 2) {
          // A key that expects u64::MAX first, then follows its sequence.
          pending.push(rec('x', String(x), n));
          x += keys;
        }
        pending.push(record);
        if (fault === 3 && pending.length >= 2) pending.push(...pending.splice(-2, 1)); // swapped
        n++;
        while (pending.length > 0) yield pending.shift();
      }
    },
    expect(records) {
      const last = new Map();
      const main = [];
      const side = [];
      for (const r of records) {
        const got = number(r);
        let expected;
        if (last.has(r.key)) expected = (last.get(r.key) + BigInt(keys)) & U64_MAX;
        else expected = /^[0-9]+$/.test(r.key) ? BigInt(r.key) : U64_MAX;
        if (got !== expected) {
          side.push(['alerts', r.key, `key ${r.key}: expected ${expected}, got ${got}`, r.timestamp]);
        }
        last.set(r.key, got);
        main.push([r.key, r.value, r.timestamp]);
      }
      return { main, side };
    },
    end: () => [],
    state(records) {
      const entries = new Map(records.map((r) => [hex(r.key), le(number(r))]));
      return { last: { kind: 'value', entries } };
    },
  };
}

// -- the scenario ------------------------------------------------------------

/**
 * A seeded input: `batches` of records, and the watermark after each (never
 * going back; behind the newest timestamp by a random lag).
 */
function stream(example, seed) {
  const next = random(seed);
  const records = example.records(next);
  const batches = [];
  const watermarks = [];
  let watermark = -1n;
  for (let i = 0; i < BATCHES; i++) {
    const batch = Array.from({ length: 1 + below(next, 29) }, () => records.next().value);
    batches.push(batch);
    const behind = batch[batch.length - 1].timestamp - BigInt(below(next, 20_000));
    if (behind > watermark) watermark = behind;
    watermarks.push(watermark);
  }
  return { batches, watermarks, records: (start, end) => batches.slice(start, end).flat() };
}

/** Runs `input` through the scenario of the file's header. */
function drive(example, input, batchedState) {
  const run = { committed: [], lost: [], snapshots: {}, batchedCalls: 0, singleCalls: 0 };
  const step = (h, i, outs) => {
    outs.push(h.process(input.batches[i]));
    outs.push(h.advanceWatermark(input.watermarks[i]));
  };
  const countCalls = (h) => {
    run.batchedCalls += h.batchedStateCalls();
    run.singleCalls += h.stateCalls();
  };

  let h = Harness.open(example.op, { config: example.config, batchedState });
  for (let i = 0; i < CHECKPOINT_AFTER; i++) step(h, i, run.committed);
  const checkpoint = (run.snapshots.checkpoint = h.snapshot());
  for (let i = CHECKPOINT_AFTER; i < CHECKPOINT_AFTER + LOST; i++) step(h, i, run.lost);
  if (example.endsInLostAttempt) run.lost.push(h.advanceWatermark(MAX_TIMESTAMP));
  run.snapshots.failure = h.snapshot();
  countCalls(h);

  h = Harness.open(example.op, { config: example.config, batchedState, restore: checkpoint });
  for (let i = CHECKPOINT_AFTER; i < BATCHES; i++) step(h, i, run.committed);
  run.snapshots['before the end'] = h.snapshot();
  run.committed.push(h.finish());
  run.snapshots['after the end'] = h.snapshot();
  countCalls(h);
  return run;
}

/** The main output of `outs` as bytes: [key, value, timestamp]. */
const mainBytes = (outs) => outs.flatMap((o) => o.main.map((r) => [r.key, r.value, r.timestamp]));
/** The side outputs of `outs` as bytes: [tag, key, value, timestamp]. */
const sideBytes = (outs) =>
  outs.flatMap((o) => o.sideRecords.map(({ tag, record: r }) => [tag, r.key, r.value, r.timestamp]));
/** The main output as strings, to compare with an expectation. */
const main = (outs) => outs.flatMap((o) => o.main.map((r) => [r.keyString(), r.valueString(), r.timestamp]));
const side = (outs) =>
  outs.flatMap((o) => o.sideRecords.map(({ tag, record: r }) => [tag, r.keyString(), r.valueString(), r.timestamp]));

/** What `example` emits for `records.slice(start)`, having seen `records.slice(0, start)`. */
function after(example, records, start) {
  const all = example.expect(records);
  const before = example.expect(records.slice(0, start));
  return { main: all.main.slice(before.main.length), side: all.side.slice(before.side.length) };
}

function check(example) {
  for (const seed of SEEDS) {
    const what = `${example.name}, seed ${seed}`;
    const input = stream(example, seed);
    assert.ok(
      input.batches.some((b) => new Set(b.map((r) => r.key)).size < b.length),
      `${what}: some batch has several records of one key`,
    );
    const batched = drive(example, input, true);
    const perCall = drive(example, input, false);

    // The two paths: the same bytes everywhere.
    for (const out of ['committed', 'lost']) {
      assert.deepEqual(mainBytes(batched[out]), mainBytes(perCall[out]), `${what}: ${out} main output`);
      assert.deepEqual(sideBytes(batched[out]), sideBytes(perCall[out]), `${what}: ${out} side outputs`);
    }
    for (const [at, snapshot] of Object.entries(batched.snapshots)) {
      assert.deepEqual(snapshot, perCall.snapshots[at], `${what}: state and timers ${at}`);
    }
    assert.ok(batched.batchedCalls > 0, `${what}: the batched run made batched calls`);
    assert.equal(perCall.batchedCalls, 0, `${what}: the per-call run made none`);
    assert.ok(perCall.singleCalls > batched.singleCalls, `${what}: the per-call run made more single calls`);
    // The failure lost work: the restore has something to undo.
    const { failure, checkpoint } = batched.snapshots;
    assert.notDeepEqual(failure, checkpoint, `${what}: the lost attempt changed state`);

    // And what they agree on is right.
    const everything = input.records(0, BATCHES);
    const expected = example.expect(everything);
    const expectedMain = [...expected.main, ...example.end(everything)];
    assert.deepEqual(main(batched.committed), expectedMain, `${what}: committed main output`);
    assert.deepEqual(side(batched.committed), expected.side, `${what}: committed side outputs`);
    assert.ok(main(batched.committed).length + side(batched.committed).length > 0, `${what}: the run emits something`);
    const attempt = input.records(0, CHECKPOINT_AFTER + LOST);
    const lost = after(example, attempt, input.records(0, CHECKPOINT_AFTER).length);
    if (example.endsInLostAttempt) lost.main.push(...example.end(attempt));
    assert.deepEqual(main(batched.lost), lost.main, `${what}: the lost attempt's main output`);
    assert.deepEqual(side(batched.lost), lost.side, `${what}: the lost attempt's side outputs`);
    const final = batched.snapshots['after the end'];
    assert.deepEqual(final.states, example.state(everything), `${what}: the final state`);
    assert.deepEqual(final.timers, [], `${what}: the final watermark fired every timer`);
  }
}

test('word count emitting updates: batched = per call, across a checkpoint and a restore', () => {
  check(wordCountExample('updates'));
});

test('word count emitting final counts on timers: batched = per call, across a checkpoint and a restore', () => {
  const example = wordCountExample('final');
  check(example);
  // Its timers are state too: one per word at MAX_TIMESTAMP, restored.
  const input = stream(example, SEEDS[0]);
  const beforeEnd = drive(example, input, true).snapshots['before the end'];
  const words = [...new Set(input.records(0, BATCHES).map((r) => r.key))].sort(byBytes);
  assert.deepEqual(
    beforeEnd.timers.map(([t, k]) => [t, utf8.decode(k)]),
    words.map((w) => [MAX_TIMESTAMP, w]),
  );
});

test('fraud detection: batched = per call, across a checkpoint and a restore', () => {
  check(fraudExample());
});

test('sequence check: batched = per call, across a checkpoint and a restore', () => {
  check(sequenceExample());
});
