// sequence-check: the exactly-once checker of Weir's failure tests, as
// Flink's SemanticsCheckMapper. The JavaScript twin of udfs/sequence-check
// (Rust); both produce byte-identical output and alerts.
//
// Input: a keyed sequence generator's records (kind = "sequence", keys = K):
// record n has key n % K and value n (possibly padded with '.'). Each key's
// values must advance by exactly `step` (config, = K) starting at the key
// itself. The last value per key is the value state `last` (u64,
// little-endian: the shared encoding). A record that does not follow it
// (lost, duplicated or reordered by a failure) goes to the side output
// `alerts` as "key <k>: expected <e>, got <n>", keyed by the key, with the
// record's timestamp. Every record also passes through to the main output
// unchanged.

import { WeirError, codecs, keyed, state } from '../../../sdk/js/weir-sdk.js';

/**
 * The largest u64: what a key that is no number expects first (Rust's
 * `unwrap_or(u64::MAX)`), and where `last + step` wraps, as in the Rust
 * operator's release build.
 */
export const U64_MAX = 0xffffffffffffffffn;

export const operator = keyed({
  name: 'sequence-check-js',
  version: '0.1.0',
  states: [state.value('last')],

  open(ctx) {
    const step = parseU64(ctx.config.requireStr('step'));
    if (step === null || step === 0n) throw new WeirError('config `step`: expected a positive integer');
    this.step = step;
    this.last = ctx.valueState('last', codecs.u64);
  },

  processElement(record, ctx) {
    const n = sequenceNumber(record.valueString());
    if (n === null) throw new WeirError(`not a sequence number: ${rustDebug(record.valueString())}`);
    const last = this.last.get(ctx);
    // The first value of key k is k itself.
    const expected = last !== undefined ? (last + this.step) & U64_MAX : (parseU64(ctx.keyString()) ?? U64_MAX);
    if (n !== expected) {
      ctx.output('alerts', ctx.key, `key ${ctx.keyString()}: expected ${expected}, got ${n}`, record.timestamp);
    }
    this.last.set(ctx, n);
    ctx.collect(record.key, record.value, record.timestamp);
  },
});

/**
 * `text` as Rust's `str::parse::<u64>` reads it: ASCII digits after an
 * optional '+', at most u64::MAX; else null. (Invalid UTF-8, decoded as
 * U+FFFD, is no digit either.)
 */
export function parseU64(text) {
  if (!/^\+?[0-9]+$/.test(text)) return null;
  const n = BigInt(text.startsWith('+') ? text.slice(1) : text);
  return n <= U64_MAX ? n : null;
}

/** The sequence number of a record's value: the digits before the first '.'. */
export function sequenceNumber(value) {
  const dot = value.indexOf('.');
  return parseU64(dot < 0 ? value : value.slice(0, dot));
}

const ESCAPES = { '\0': '\\0', '\t': '\\t', '\r': '\\r', '\n': '\\n', '\\': '\\\\', '"': '\\"' };

/** `text` quoted as Rust's `{:?}` prints a str (its escapes of quotes, backslashes and control characters). */
export function rustDebug(text) {
  let out = '"';
  for (const c of text) {
    const code = c.codePointAt(0);
    if (ESCAPES[c] !== undefined) out += ESCAPES[c];
    else if (code < 0x20 || (code >= 0x7f && code < 0xa0)) out += `\\u{${code.toString(16)}}`;
    else out += c;
  }
  return out + '"';
}
