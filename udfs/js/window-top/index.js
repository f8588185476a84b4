// window-top: a process-window function (Flink's ProcessWindowFunction).
// The JavaScript twin of udfs/window-top (Rust): when a key's window fires,
// one record with the window's key and the value
// {"key":…,"start":S,"end":E,"count":C,"top":[a,b,c]}: the count of its
// records and the up-to-3 largest values, largest first, duplicates kept.
// Values are decimal integers as text (surrounding whitespace allowed),
// compared as i64s (bigints, exact); anything else is an error naming it.
// The host gives the record the timestamp end - 1.

import { MAX_TIMESTAMP, MIN_TIMESTAMP, WeirError, processWindow, utf8 } from '../../../sdk/js/weir-sdk.js';

const TOP = 3;

function parseValue(record) {
  const text = record.valueString();
  const t = text.trim();
  const n = /^[+-]?[0-9]+$/.test(t) ? BigInt(t) : null;
  if (n === null || n < MIN_TIMESTAMP || n > MAX_TIMESTAMP) {
    throw new WeirError(`value ${JSON.stringify(text)} is not a decimal integer`);
  }
  return n;
}

export const operator = processWindow({
  name: 'window-top-js',
  version: '0.1.0',

  processWindow(key, window, records, out) {
    // The largest TOP so far, largest first: one insertion per record.
    const top = [];
    for (const r of records) {
      const v = parseValue(r);
      if (top.length === TOP && v <= top[TOP - 1]) continue;
      let i = top.length;
      while (i > 0 && top[i - 1] < v) i--;
      top.splice(i, 0, v);
      if (top.length > TOP) top.pop();
    }
    const k = JSON.stringify(utf8.decode(key));
    out.collect(
      key,
      `{"key":${k},"start":${window.start},"end":${window.end},"count":${records.length},"top":[${top.join(',')}]}`,
    );
  },
});
