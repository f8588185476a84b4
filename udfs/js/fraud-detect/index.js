// fraud-detect: Flink's fraud-detection walkthrough. The JavaScript twin of
// udfs/fraud-detect (Rust); both produce byte-identical alerts.
//
// Input: keyed by account (the host puts the account in the record key),
// value {"account":"acct-17","amount":12.34}, timestamp = event time in ms.
// Per account, in stream order: if a previous *small* transaction (amount <
// 1.00) at t0 set the flag, this transaction's amount is above 500.00 and
// ts - t0 <= 60 000, emit an alert. Then clear the flag. Then, if this
// transaction is small, set the flag to ts. The flag is the value state
// `small-ts` (i64, little-endian: the shared encoding).
//
// Alert: key = account, timestamp = ts, value
// {"account":"…","small_ts":…,"large_ts":…,"amount":…} with the amount
// printed as Rust prints an f64 (shortest round-trip, never an exponent).

import { WeirError, codecs, keyed, state } from '../../../sdk/js/weir-sdk.js';

/** Below this a transaction is small. */
const SMALL_AMOUNT = 1.0;
/** Above this a transaction is large. */
const LARGE_AMOUNT = 500.0;
/** How long after a small transaction a large one raises an alert. */
const WINDOW_MS = 60_000n;

export const operator = keyed({
  name: 'fraud-detect-js',
  version: '0.1.0',
  states: [state.value('small-ts')],

  open(ctx) {
    this.smallTs = ctx.valueState('small-ts', codecs.i64);
  },

  processElement(record, ctx) {
    const amount = parseAmount(record);
    const ts = record.timestamp;
    const smallTs = this.smallTs.get(ctx);
    if (smallTs !== undefined) {
      if (amount > LARGE_AMOUNT && ts - smallTs <= WINDOW_MS) {
        const account = JSON.stringify(ctx.keyString());
        const alert = `{"account":${account},"small_ts":${smallTs},"large_ts":${ts},"amount":${rustF64(amount)}}`;
        ctx.collect(ctx.key, alert, ts);
      }
      this.smallTs.clear(ctx);
    }
    if (amount < SMALL_AMOUNT) this.smallTs.set(ctx, ts);
  },
});

/** The transaction's `amount`; the account comes from the record key. */
function parseAmount(record) {
  const text = record.valueString();
  let txn;
  try {
    txn = JSON.parse(text);
  } catch (e) {
    throw new WeirError(`bad transaction ${JSON.stringify(text)}: ${e.message}`);
  }
  if (txn === null || typeof txn !== 'object' || typeof txn.amount !== 'number') {
    throw new WeirError(`bad transaction ${JSON.stringify(text)}: missing numeric field \`amount\``);
  }
  return txn.amount;
}

/**
 * `x` as Rust's `{}` prints an f64: the shortest round-trip digits (as JS),
 * but in plain decimal notation where JS would use an exponent, and `-0`.
 */
export function rustF64(x) {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'inf' : '-inf';
  if (Object.is(x, -0)) return '-0';
  const s = String(x);
  const e = s.indexOf('e');
  if (e < 0) return s;
  const sign = s.startsWith('-') ? '-' : '';
  const mantissa = s.slice(sign.length, e);
  const exp = Number(s.slice(e + 1));
  const dot = mantissa.indexOf('.');
  const digits = mantissa.replace('.', '');
  const point = (dot < 0 ? mantissa.length : dot) + exp; // position of the decimal point in `digits`
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return sign + digits + '0'.repeat(point - digits.length);
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}
