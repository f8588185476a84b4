// window-stats: an aggregate window function (Flink's AggregateFunction).
// The JavaScript twin of udfs/window-stats (Rust): per key and window, the
// count, sum, min and max of the values (decimal integers as text,
// surrounding whitespace allowed), emitted when the window fires as
// {"key":…,"start":S,"end":E,"count":C,"sum":X,"min":M,"max":N}.
//
// The accumulator is four i64s (bigints, exact over the whole 64-bit range),
// stored as 32 bytes: count, sum, min, max, each little-endian as
// codecs.i64 writes it. The sum wraps around at the i64 range, as the Rust
// twin's (wrapping_add).

import { MAX_TIMESTAMP, MIN_TIMESTAMP, WeirError, aggregate, codecs, utf8 } from '../../../sdk/js/weir-sdk.js';

/** A value as an i64 bigint; anything but a decimal integer is an error naming the value. */
function parseValue(record) {
  const text = record.valueString();
  const t = text.trim();
  const n = /^[+-]?[0-9]+$/.test(t) ? BigInt(t) : null;
  if (n === null || n < MIN_TIMESTAMP || n > MAX_TIMESTAMP) {
    throw new WeirError(`value ${JSON.stringify(text)} is not a decimal integer`);
  }
  return n;
}

/** Two's complement i64 addition. */
const add64 = (a, b) => BigInt.asIntN(64, a + b);

/** { count, sum, min, max } as 32 bytes. */
const stats = {
  name: 'window-stats',
  encode(a) {
    const out = new Uint8Array(32);
    [a.count, a.sum, a.min, a.max].forEach((v, i) => out.set(codecs.i64.encode(v), i * 8));
    return out;
  },
  decode(b) {
    if (b.length !== 32) throw new WeirError(`expected 32 bytes, got ${b.length}`);
    const [count, sum, min, max] = [0, 1, 2, 3].map((i) => codecs.i64.decode(b.subarray(i * 8, i * 8 + 8)));
    return { count, sum, min, max };
  },
};

export const operator = aggregate({
  name: 'window-stats-js',
  version: '0.1.0',
  accumulator: stats,

  createAccumulator() {
    return { count: 0n, sum: 0n, min: MAX_TIMESTAMP, max: MIN_TIMESTAMP };
  },

  add(acc, record) {
    const v = parseValue(record);
    acc.count += 1n;
    acc.sum = add64(acc.sum, v);
    if (v < acc.min) acc.min = v;
    if (v > acc.max) acc.max = v;
    return acc;
  },

  merge(a, b) {
    return {
      count: a.count + b.count,
      sum: add64(a.sum, b.sum),
      min: a.min < b.min ? a.min : b.min,
      max: a.max > b.max ? a.max : b.max,
    };
  },

  getResult(key, window, acc) {
    const k = JSON.stringify(utf8.decode(key));
    return (
      `{"key":${k},"start":${window.start},"end":${window.end},` +
      `"count":${acc.count},"sum":${acc.sum},"min":${acc.min},"max":${acc.max}}`
    );
  },
});
