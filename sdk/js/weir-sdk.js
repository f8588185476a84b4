// weir-sdk.js: write Weir stream operators in JavaScript (or TypeScript).
//
// A Weir operator is a WebAssembly component implementing the contract in
// wit/operator.wit (package weir:operator@0.1.3). This module hides the
// contract behind Flink's functions -- map, flatMap, filter, a keyed
// process function, and window functions (an aggregate function or a
// process-window function) -- with typed keyed state, event-time timers,
// side outputs, logging, metrics and config. It mirrors the Rust SDK (sdk/src).
//
// Layout of this file:
//   - host binding: how calls reach the host (bound by the build wrapper,
//     or by testing.js in unit tests), and the two backends' value shapes.
//   - errors: WeirError and how any thrown value becomes the contract's
//     `err(string)`.
//   - utf8: encode/decode without relying on TextEncoder (QuickJS lacks it).
//   - codecs: the byte encoding of state, shared by every Weir SDK
//     (wit/README.md, sdk/src/codec.rs).
//   - records and batches: Record (a view into the input batch), the batch
//     reader, BatchBuilder and Collector (output columns built in bulk).
//   - config and OpenContext; state descriptors and typed state handles.
//   - the adapters map / flatMap / filter / keyed / operator, each returning
//     the object a component exports as `operator`; its `migrateState` is
//     what the build wrapper exports as `migration` (state migration on
//     `weir upgrade`: see `state`'s `migrate` option).
//
// Invariants: one export call per batch; the input batch is decoded once
// with plain integer loops over the typed columns, records are views into
// its `data` buffer (no copies), and outputs are appended to reusable typed
// arrays that are handed to the host as views. The only per-record host
// calls are the state and timer calls the contract requires, and a keyed
// batch reads and writes its value state in one call per state (the batch
// cache: `value-get-many` / `value-set-many`, contract 0.1.3). Any exception
// thrown by user code fails the call with the contract's `err(message)`.
// `migrateState` needs no `open` (the host calls it on a fresh instance,
// before `open`): it runs the state's `migrate` function, or returns the old
// bytes as they are for a state without one (or one not declared).
//
// This file must not import anything: the build wraps it (see build.sh),
// and unit tests run it under plain Node with the fake host of testing.js.

// ---------------------------------------------------------------------------
// Host binding
// ---------------------------------------------------------------------------

/** Where the build wrapper (or testing.js) puts the host interfaces. */
const HOST_KEY = '__weirHost';

/**
 * The bound host: { backend, state, timers, log, metrics, package }.
 * Re-read at the start of every export call (one property read per batch),
 * so tests can swap hosts between harnesses.
 */
let H = null;
/**
 * True on the QuickJS backend (componentize-qjs), whose bindings pass s64
 * and u64 as JS numbers and integer lists as plain Arrays; StarlingMonkey
 * (componentize-js) and the test host use BigInt and typed arrays.
 */
let QJS = false;

function bindHost() {
  const h = globalThis[HOST_KEY];
  if (h === undefined || h === null) {
    throw new WeirError(
      'weir-sdk: no host is bound; build with sdk/js/build.sh, or use testing.js in tests',
    );
  }
  H = h;
  QJS = h.backend === 'qjs';
}

/** The largest timestamp: i64::MAX, the host's final watermark at the end of bounded input. */
export const MAX_TIMESTAMP = 9223372036854775807n;
/** The smallest timestamp: i64::MIN, the watermark before the first one. */
export const MIN_TIMESTAMP = -9223372036854775808n;

/** A timestamp from the host as a bigint (QuickJS passes numbers; 2^63 is i64::MAX rounded). */
function timeIn(t) {
  if (typeof t === 'bigint') return t;
  if (t >= 9223372036854775807) return MAX_TIMESTAMP;
  if (t <= -9223372036854775808) return MIN_TIMESTAMP;
  return BigInt(t);
}

/** A user's timestamp (bigint or integer number) as an exact, range-checked bigint. */
function timeArg(t, what) {
  if (typeof t === 'bigint') {
    if (t > MAX_TIMESTAMP || t < MIN_TIMESTAMP) throw new WeirError(`${what}: ${t} is not an i64`);
    return t;
  }
  if (typeof t === 'number' && Number.isInteger(t)) return timeIn(t);
  throw new WeirError(`${what}: expected a bigint or integer timestamp, got ${describeValue(t)}`);
}

/** A bigint timestamp in the shape the bound backend's bindings take. */
function timeOut(t) {
  return QJS ? Number(t) : t;
}

/** A u64 argument (bigint or non-negative integer) for the bound backend. */
function u64Out(v, what) {
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || v < 0) throw new WeirError(`${what}: expected a u64, got ${v}`);
    return QJS ? v : BigInt(v);
  }
  if (typeof v === 'bigint') {
    if (v < 0n || v > 0xffffffffffffffffn) throw new WeirError(`${what}: expected a u64, got ${v}`);
    return QJS ? Number(v) : v;
  }
  throw new WeirError(`${what}: expected a u64, got ${describeValue(v)}`);
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/**
 * An operator error: its message is what the host reports (with the
 * operator uid) when it fails the task. Throw it, or anything else: every
 * thrown value fails the call the same way.
 */
export class WeirError extends Error {
  constructor(message) {
    super(message);
    this.name = 'WeirError';
  }
}

/**
 * The message the host gets for a thrown value: a WeirError's or Error's
 * message; other Error subclasses keep their name ("TypeError: ..."),
 * so a bug reads as one.
 */
export function errorMessage(e) {
  if (e !== null && typeof e === 'object' && typeof e.message === 'string') {
    const name = e.name;
    if (name === 'Error' || name === 'WeirError' || !name) return String(e.message);
    return `${name}: ${e.message}`;
  }
  if (typeof e === 'string') return e;
  return describeValue(e);
}

/**
 * True for a Uint8Array from any realm: StarlingMonkey's bindings hand out
 * Uint8Arrays for which `instanceof Uint8Array` is false.
 */
function isBytes(v) {
  return v !== null && typeof v === 'object' && v[Symbol.toStringTag] === 'Uint8Array';
}

function describeValue(v) {
  if (typeof v === 'string') return JSON.stringify(v);
  if (typeof v === 'bigint') return `${v}n`;
  try {
    return String(v);
  } catch {
    return Object.prototype.toString.call(v);
  }
}

/**
 * Runs an export: binds the host, and turns any exception into the thrown
 * string the component bindings map to the contract's `err(string)` (both
 * backends trap if an Error object is thrown for a `result<_, string>`).
 */
function guarded(f) {
  return function (...args) {
    try {
      bindHost();
      return f.apply(this, args);
    } catch (e) {
      throw errorMessage(e);
    }
  };
}

/** Says what a host state (or timer) error means; as the Rust SDK's `explain`. */
function explain(e) {
  const p = e !== null && typeof e === 'object' && 'payload' in e ? e.payload : e;
  if (p !== null && typeof p === 'object' && typeof p.tag === 'string') {
    switch (p.tag) {
      case 'unknown-state':
        return `the host knows no state with id ${p.val}`;
      case 'wrong-kind':
        return `state id ${p.val} is of another kind on the host`;
      case 'key-out-of-range':
        return 'the key belongs to a key group this subtask does not own';
      case 'backend':
        return String(p.val);
    }
  }
  return errorMessage(e);
}

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------

const TE = typeof TextEncoder === 'function' ? new TextEncoder() : null;
const TD = typeof TextDecoder === 'function' ? new TextDecoder() : null;

/**
 * Writes `s` as UTF-8 into `buf` at `pos` (the caller guarantees
 * `s.length * 3` free bytes); returns the new position. Lone surrogates
 * become U+FFFD, as TextEncoder does.
 */
function writeUtf8(s, buf, pos) {
  const n = s.length;
  if (TE !== null && n > 16) {
    return pos + TE.encodeInto(s, buf.subarray(pos)).written;
  }
  for (let i = 0; i < n; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      buf[pos++] = c;
    } else if (c < 0x800) {
      buf[pos++] = 0xc0 | (c >> 6);
      buf[pos++] = 0x80 | (c & 63);
    } else {
      if (c >= 0xd800 && c <= 0xdfff) {
        const d = i + 1 < n ? s.charCodeAt(i + 1) : 0;
        if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
          i++;
          buf[pos++] = 0xf0 | (c >> 18);
          buf[pos++] = 0x80 | ((c >> 12) & 63);
          buf[pos++] = 0x80 | ((c >> 6) & 63);
          buf[pos++] = 0x80 | (c & 63);
          continue;
        }
        c = 0xfffd;
      }
      buf[pos++] = 0xe0 | (c >> 12);
      buf[pos++] = 0x80 | ((c >> 6) & 63);
      buf[pos++] = 0x80 | (c & 63);
    }
  }
  return pos;
}

/** Decodes UTF-8, replacing invalid sequences with U+FFFD (like Rust's from_utf8_lossy). */
function readUtf8(b, start, end, fatal) {
  if (TD !== null && !fatal) return TD.decode(b.subarray(start, end));
  let out = '';
  let chunk = [];
  let i = start;
  while (i < end) {
    const c = b[i];
    let cp = -1;
    let len = 1;
    if (c < 0x80) {
      cp = c;
    } else if (c >= 0xc2 && c <= 0xdf) {
      if (i + 1 < end && (b[i + 1] & 0xc0) === 0x80) {
        cp = ((c & 31) << 6) | (b[i + 1] & 63);
        len = 2;
      }
    } else if (c >= 0xe0 && c <= 0xef) {
      const lo = c === 0xe0 ? 0xa0 : 0x80;
      const hi = c === 0xed ? 0x9f : 0xbf;
      if (i + 1 < end && b[i + 1] >= lo && b[i + 1] <= hi) {
        len = 2;
        if (i + 2 < end && (b[i + 2] & 0xc0) === 0x80) {
          cp = ((c & 15) << 12) | ((b[i + 1] & 63) << 6) | (b[i + 2] & 63);
          len = 3;
        }
      }
    } else if (c >= 0xf0 && c <= 0xf4) {
      const lo = c === 0xf0 ? 0x90 : 0x80;
      const hi = c === 0xf4 ? 0x8f : 0xbf;
      if (i + 1 < end && b[i + 1] >= lo && b[i + 1] <= hi) {
        len = 2;
        if (i + 2 < end && (b[i + 2] & 0xc0) === 0x80) {
          len = 3;
          if (i + 3 < end && (b[i + 3] & 0xc0) === 0x80) {
            cp = ((c & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63);
            len = 4;
          }
        }
      }
    }
    if (cp < 0) {
      if (fatal) throw new WeirError(`invalid UTF-8 at byte ${i - start}`);
      cp = 0xfffd;
    }
    if (cp >= 0x10000) {
      cp -= 0x10000;
      chunk.push(0xd800 + (cp >> 10), 0xdc00 + (cp & 1023));
    } else {
      chunk.push(cp);
    }
    if (chunk.length >= 4096) {
      out += String.fromCharCode.apply(null, chunk);
      chunk = [];
    }
    i += len;
  }
  return out + String.fromCharCode.apply(null, chunk);
}

/** UTF-8 helpers that work on every backend (QuickJS has no TextEncoder). */
export const utf8 = {
  /** `s` as UTF-8 bytes. */
  encode(s) {
    const buf = new Uint8Array(s.length * 3);
    return buf.slice(0, writeUtf8(s, buf, 0));
  },
  /** `bytes` as a string; invalid UTF-8 becomes U+FFFD unless `fatal`, which throws. */
  decode(bytes, fatal = false) {
    return readUtf8(bytes, 0, bytes.length, fatal);
  },
};

// ---------------------------------------------------------------------------
// Codecs: the byte encoding of state values (shared by every Weir SDK)
// ---------------------------------------------------------------------------

/** A scratch 8-byte buffer with typed views over it, for fixed-width codecs. */
const SCRATCH = new ArrayBuffer(8);
const S8 = new Uint8Array(SCRATCH);
const SDV = new DataView(SCRATCH);

function wrongLength(type, expected, got) {
  return new WeirError(`cannot decode ${type}: expected ${expected} bytes, got ${got}`);
}

function fixed(type, width, set, get, check) {
  return Object.freeze({
    name: type,
    encode(v) {
      check(v);
      set(v);
      return S8.slice(0, width);
    },
    decode(b) {
      if (b.length !== width) throw wrongLength(type, width, b.length);
      S8.set(b);
      return get();
    },
  });
}

function intCheck(type, min, max) {
  return (v) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new WeirError(`cannot encode ${type}: ${describeValue(v)} is out of range`);
    }
  };
}

function bigCheck(type, min, max) {
  return (v) => {
    const ok =
      (typeof v === 'bigint' && v >= min && v <= max) ||
      (typeof v === 'number' && Number.isSafeInteger(v) && BigInt(v) >= min && BigInt(v) <= max);
    if (!ok) throw new WeirError(`cannot encode ${type}: ${describeValue(v)} is out of range`);
  };
}

const numCheck = (type) => (v) => {
  if (typeof v !== 'number') throw new WeirError(`cannot encode ${type}: ${describeValue(v)} is not a number`);
};

/**
 * The codecs of wit/README.md "State value encoding" (sdk/src/codec.rs is
 * the reference): integers little-endian fixed width (u64/i64 as bigint,
 * the others as number), floats IEEE 754 little-endian, bool one byte 0/1,
 * string UTF-8 without a length prefix, bytes as they are, unit empty.
 * `json` is a JS convenience (JSON text as a UTF-8 string), not a shared type.
 */
export const codecs = Object.freeze({
  u8: fixed('u8', 1, (v) => SDV.setUint8(0, v), () => SDV.getUint8(0), intCheck('u8', 0, 0xff)),
  u16: fixed('u16', 2, (v) => SDV.setUint16(0, v, true), () => SDV.getUint16(0, true), intCheck('u16', 0, 0xffff)),
  u32: fixed('u32', 4, (v) => SDV.setUint32(0, v, true), () => SDV.getUint32(0, true), intCheck('u32', 0, 0xffffffff)),
  u64: fixed(
    'u64',
    8,
    (v) => SDV.setBigUint64(0, BigInt(v), true),
    () => SDV.getBigUint64(0, true),
    bigCheck('u64', 0n, 0xffffffffffffffffn),
  ),
  i8: fixed('i8', 1, (v) => SDV.setInt8(0, v), () => SDV.getInt8(0), intCheck('i8', -0x80, 0x7f)),
  i16: fixed('i16', 2, (v) => SDV.setInt16(0, v, true), () => SDV.getInt16(0, true), intCheck('i16', -0x8000, 0x7fff)),
  i32: fixed(
    'i32',
    4,
    (v) => SDV.setInt32(0, v, true),
    () => SDV.getInt32(0, true),
    intCheck('i32', -0x80000000, 0x7fffffff),
  ),
  i64: fixed(
    'i64',
    8,
    (v) => SDV.setBigInt64(0, BigInt(v), true),
    () => SDV.getBigInt64(0, true),
    bigCheck('i64', MIN_TIMESTAMP, MAX_TIMESTAMP),
  ),
  f32: fixed('f32', 4, (v) => SDV.setFloat32(0, v, true), () => SDV.getFloat32(0, true), numCheck('f32')),
  f64: fixed('f64', 8, (v) => SDV.setFloat64(0, v, true), () => SDV.getFloat64(0, true), numCheck('f64')),
  bool: Object.freeze({
    name: 'bool',
    encode(v) {
      if (typeof v !== 'boolean') throw new WeirError(`cannot encode bool: ${describeValue(v)} is not a boolean`);
      return new Uint8Array([v ? 1 : 0]);
    },
    decode(b) {
      if (b.length !== 1) throw wrongLength('bool', 1, b.length);
      if (b[0] > 1) throw new WeirError(`cannot decode bool: invalid byte ${b[0]}`);
      return b[0] === 1;
    },
  }),
  string: Object.freeze({
    name: 'string',
    encode(v) {
      if (typeof v !== 'string') throw new WeirError(`cannot encode string: ${describeValue(v)} is not a string`);
      return utf8.encode(v);
    },
    decode(b) {
      try {
        return readUtf8(b, 0, b.length, true);
      } catch (e) {
        throw new WeirError(`cannot decode string: ${e.message}`);
      }
    },
  }),
  bytes: Object.freeze({
    name: 'bytes',
    encode(v) {
      if (!isBytes(v)) throw new WeirError(`cannot encode bytes: expected a Uint8Array`);
      return v;
    },
    decode(b) {
      return b.slice();
    },
  }),
  unit: Object.freeze({
    name: 'unit',
    encode() {
      return new Uint8Array(0);
    },
    decode(b) {
      if (b.length !== 0) throw wrongLength('unit', 0, b.length);
      return null;
    },
  }),
  json: Object.freeze({
    name: 'json',
    encode(v) {
      return utf8.encode(JSON.stringify(v));
    },
    decode(b) {
      return JSON.parse(readUtf8(b, 0, b.length, true));
    },
  }),
});

// ---------------------------------------------------------------------------
// Records and batches
// ---------------------------------------------------------------------------

/**
 * One input record: a view into the batch's `data` buffer. `key` and
 * `value` are created on first access and share the batch's memory, which
 * the next call reuses: copy (`.slice()`) what you keep across calls.
 */
export class Record {
  constructor(data, keyStart, keyLen, valueStart, valueLen, timestamp) {
    this._d = data;
    this._ks = keyStart;
    this._kl = keyLen;
    this._vs = valueStart;
    this._vl = valueLen;
    this._t = timestamp;
  }
  /** The key bytes, or null when the record has none. */
  get key() {
    return this._kl < 0 ? null : this._d.subarray(this._ks, this._ks + this._kl);
  }
  /** The value bytes. */
  get value() {
    return this._d.subarray(this._vs, this._vs + this._vl);
  }
  /** Event time in ms since the Unix epoch (bigint, as the contract's s64). */
  get timestamp() {
    return timeIn(this._t);
  }
  /** The key as a string (invalid UTF-8 becomes U+FFFD), or null. */
  keyString() {
    return this._kl < 0 ? null : readUtf8(this._d, this._ks, this._ks + this._kl, false);
  }
  /** The value as a string (invalid UTF-8 becomes U+FFFD). */
  valueString() {
    return readUtf8(this._d, this._vs, this._vs + this._vl, false);
  }
  /** A plain record with this key and timestamp and another value. */
  withValue(value) {
    return { key: this.key, value, timestamp: this.timestamp };
  }
  /** A plain record with this value and timestamp and another key (null for none). */
  withKey(key) {
    return { key, value: this.value, timestamp: this.timestamp };
  }
}

/**
 * Checks an input batch once (as the Rust SDK's `Batch::records`) and
 * calls `each(record, index)` for every record, in order.
 */
function forEachRecord(input, each) {
  checkBatch(input);
  eachRecord(input, each);
}

/** Throws a WeirError if the batch's columns do not fit together. */
function checkBatch(input) {
  const kl = input.keyLens;
  const vl = input.valueLens;
  const data = input.data;
  const n = input.timestamps.length;
  if (kl.length !== n || vl.length !== n) {
    throw new WeirError(
      `malformed batch: ${n} timestamps, ${kl.length} key lengths and ${vl.length} value lengths`,
    );
  }
  let total = 0;
  for (let i = 0; i < n; i++) {
    const k = kl[i];
    if (k < -1) throw new WeirError(`malformed batch: record ${i} has key length ${k}`);
    total += (k > 0 ? k : 0) + vl[i];
  }
  if (total !== data.length) {
    throw new WeirError(
      `malformed batch: record lengths add up to ${total} bytes but data holds ${data.length}`,
    );
  }
}

/** Calls `each(record, index)` for every record of a checked batch, in order. */
function eachRecord(input, each) {
  const ts = input.timestamps;
  const kl = input.keyLens;
  const vl = input.valueLens;
  const data = input.data;
  const n = ts.length;
  let pos = 0;
  for (let i = 0; i < n; i++) {
    const k = kl[i];
    const ks = pos;
    if (k > 0) pos += k;
    const v = vl[i];
    each(new Record(data, ks, k, pos, v, ts[i]), i);
    pos += v;
  }
}

const INITIAL_RECORDS = 64;
const INITIAL_BYTES = 4096;

/**
 * Appends records into one packed batch: growable typed columns plus one
 * data buffer, reused from call to call. `finish()` hands views of them to
 * the host, which copies them when the export returns.
 */
export class BatchBuilder {
  constructor() {
    this.length = 0;
    this._bytes = 0;
    this._ts = new BigInt64Array(INITIAL_RECORDS);
    this._kl = new Int32Array(INITIAL_RECORDS);
    this._vl = new Uint32Array(INITIAL_RECORDS);
    this._data = new Uint8Array(INITIAL_BYTES);
  }

  /** Drops every record, keeping the buffers. */
  clear() {
    this.length = 0;
    this._bytes = 0;
  }

  _reserveRecord() {
    if (this.length === this._ts.length) {
      const cap = this._ts.length * 2;
      const ts = new BigInt64Array(cap);
      ts.set(this._ts);
      this._ts = ts;
      const kl = new Int32Array(cap);
      kl.set(this._kl);
      this._kl = kl;
      const vl = new Uint32Array(cap);
      vl.set(this._vl);
      this._vl = vl;
    }
  }

  _reserveBytes(extra) {
    const need = this._bytes + extra;
    if (need > this._data.length) {
      let cap = this._data.length * 2;
      while (cap < need) cap *= 2;
      const d = new Uint8Array(cap);
      d.set(this._data.subarray(0, this._bytes));
      this._data = d;
    }
  }

  /** Appends bytes, a string (as UTF-8) or an array of those; returns the byte count. */
  _append(part, what) {
    const start = this._bytes;
    if (isBytes(part)) {
      this._reserveBytes(part.length);
      this._data.set(part, start);
      this._bytes = start + part.length;
    } else if (typeof part === 'string') {
      this._reserveBytes(part.length * 3);
      this._bytes = writeUtf8(part, this._data, start);
    } else if (Array.isArray(part)) {
      for (let i = 0; i < part.length; i++) this._append(part[i], what);
    } else if (typeof part === 'number' || typeof part === 'bigint') {
      this._append(String(part), what);
    } else {
      throw new WeirError(`${what}: expected a Uint8Array, a string or an array of them, got ${describeValue(part)}`);
    }
    return this._bytes - start;
  }

  /**
   * Appends one record. `key`: Uint8Array | string | null (no key);
   * `value`: Uint8Array | string | an array of those (written back to back);
   * `timestamp`: bigint (or an integer number).
   */
  push(key, value, timestamp) {
    const t = timeArg(timestamp, 'output record timestamp');
    this._reserveRecord();
    const i = this.length;
    const mark = this._bytes;
    try {
      this._kl[i] = key === null || key === undefined ? -1 : this._append(key, 'output record key');
      this._vl[i] = this._append(value, 'output record value');
    } catch (e) {
      this._bytes = mark;
      throw e;
    }
    this._ts[i] = t;
    this.length = i + 1;
  }

  /** Appends a record object `{ key?, value, timestamp }` (e.g. an input Record). */
  pushRecord(r) {
    this.push(r.key ?? null, r.value, r.timestamp);
  }

  /** The records as the contract's `batch`, shaped for the bound backend. */
  finish() {
    const n = this.length;
    if (QJS) {
      // componentize-qjs lowers integer lists from plain Arrays of numbers.
      const ts = new Array(n);
      for (let i = 0; i < n; i++) ts[i] = Number(this._ts[i]);
      return {
        timestamps: ts,
        keyLens: Array.from(this._kl.subarray(0, n)),
        valueLens: Array.from(this._vl.subarray(0, n)),
        data: this._data.subarray(0, this._bytes),
      };
    }
    return {
      timestamps: this._ts.subarray(0, n),
      keyLens: this._kl.subarray(0, n),
      valueLens: this._vl.subarray(0, n),
      data: this._data.subarray(0, this._bytes),
    };
  }
}

/** Everything one call emits: the main output and side outputs by tag (Flink's Collector + ctx.output). */
export class Collector {
  constructor() {
    this.main = new BatchBuilder();
    /** @type {Map<string, BatchBuilder>} */
    this._side = new Map();
    /** The timestamp of records emitted without one (process-window: the window's end - 1). */
    this._defaultTs = undefined;
  }

  /**
   * Emits a record on the main output (see BatchBuilder.push for the
   * argument types). In a process-window function the timestamp may be
   * left out: the host gives every record it emits the window's `end - 1`.
   */
  collect(key, value, timestamp) {
    this.main.push(key, value, timestamp === undefined ? this._defaultTs : timestamp);
  }

  /** Emits a record on the side output `tag` (edges `from = "<op>:<tag>"`). */
  output(tag, key, value, timestamp) {
    if (timestamp === undefined) timestamp = this._defaultTs;
    let b = this._side.get(tag);
    if (b === undefined) {
      if (typeof tag !== 'string') throw new WeirError(`side output tag must be a string, got ${describeValue(tag)}`);
      b = new BatchBuilder();
      this._side.set(tag, b);
    }
    b.push(key, value, timestamp);
  }

  _clear() {
    this.main.clear();
    for (const b of this._side.values()) b.clear();
  }

  _emitted() {
    const side = [];
    for (const [tag, b] of this._side) {
      if (b.length > 0) side.push({ tag, records: b.finish() });
    }
    return { main: this.main.finish(), side };
  }
}

// ---------------------------------------------------------------------------
// Config and OpenContext
// ---------------------------------------------------------------------------

function parseU64Text(v) {
  let s = v.startsWith('+') ? v.slice(1) : v;
  let radix = 10;
  const p = s.slice(0, 2);
  if (p === '0x') radix = 16;
  else if (p === '0o') radix = 8;
  else if (p === '0b') radix = 2;
  if (radix !== 10) s = s.slice(2);
  if (s === '' || s.startsWith('_') || s.endsWith('_')) return null;
  s = s.replace(/_/g, '');
  const digits = { 2: /^[01]+$/, 8: /^[0-7]+$/, 10: /^[0-9]+$/, 16: /^[0-9a-fA-F]+$/ }[radix];
  if (!digits.test(s)) return null;
  const prefix = { 2: '0b', 8: '0o', 10: '', 16: '0x' }[radix];
  const n = BigInt(prefix + s);
  return n <= 0xffffffffffffffffn ? n : null;
}

/**
 * The operator's `config` table from the job spec, as the host flattens it:
 * strings as they are, other scalars in TOML syntax, tables and arrays as JSON.
 * Getters return undefined for a missing key and throw for a malformed one.
 */
export class Config {
  constructor(entries = []) {
    /** @type {Array<[string, string]>} */
    this._entries = entries.map(([k, v]) => [String(k), String(v)]);
  }
  /** The raw string value of `key`, or undefined. */
  getStr(key) {
    for (const [k, v] of this._entries) if (k === key) return v;
    return undefined;
  }
  /** The value of `key`, which must be present. */
  requireStr(key) {
    const v = this.getStr(key);
    if (v === undefined) throw new WeirError(`config \`${key}\` is required but missing`);
    return v;
  }
  _parse(key, expected, parse) {
    const raw = this.getStr(key);
    if (raw === undefined) return undefined;
    const v = parse(raw.trim());
    if (v === null || v === undefined) throw new WeirError(`config \`${key}\`: expected ${expected}, got \`${raw}\``);
    return v;
  }
  /** `key` as a boolean (`true` / `false`). */
  getBool(key) {
    return this._parse(key, 'a bool (true or false)', (v) => (v === 'true' ? true : v === 'false' ? false : null));
  }
  /** `key` as a u64 bigint (TOML syntax: `1_000`, `0x10`, `0o7`, `0b1`). */
  getU64(key) {
    return this._parse(key, 'an unsigned integer', parseU64Text);
  }
  /** `key` as an i64 bigint (TOML syntax). */
  getI64(key) {
    return this._parse(key, 'an integer', (v) => {
      const neg = v.startsWith('-');
      const m = parseU64Text(neg || v.startsWith('+') ? v.slice(1) : v);
      if (m === null) return null;
      const n = neg ? -m : m;
      return n >= MIN_TIMESTAMP && n <= MAX_TIMESTAMP ? n : null;
    });
  }
  /** `key` as a safe-integer number (TOML syntax). */
  getInt(key) {
    return this._parse(key, 'an integer', (v) => {
      const neg = v.startsWith('-');
      const m = parseU64Text(neg || v.startsWith('+') ? v.slice(1) : v);
      if (m === null) return null;
      const n = Number(neg ? -m : m);
      return Number.isSafeInteger(n) ? n : null;
    });
  }
  /** `key` as a number (TOML syntax: `1.5`, `1e3`, `1_000.0`, `inf`, `nan`; integers accepted). */
  getF64(key) {
    return this._parse(key, 'a number', (v) => {
      const s = v.replace(/_/g, '');
      if (/^[+-]?inf$/.test(s)) return s.startsWith('-') ? -Infinity : Infinity;
      if (/^[+-]?nan$/.test(s)) return NaN;
      if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) return null;
      return Number(s);
    });
  }
  /** `key` parsed as JSON (tables and arrays arrive as JSON). */
  getJson(key) {
    return this._parse(key, 'JSON', (v) => {
      try {
        return JSON.parse(v);
      } catch {
        return null;
      }
    });
  }
  /** All entries as [key, value], in the order the host sent them. */
  entries() {
    return this._entries.map(([k, v]) => [k, v]);
  }
}

const KIND_NAMES = { value: 'value', list: 'list', map: 'map' };

/** What the host tells an operator instance when it opens; where state handles come from. */
export class OpenContext {
  constructor(ctx, states) {
    /** The operator's stable uid from the job spec. */
    this.operatorId = ctx.operatorId;
    /** This instance's index among the operator's parallel instances (0-based). */
    this.subtaskIndex = Number(ctx.subtaskIndex);
    /** How many parallel instances the operator has. */
    this.parallelism = Number(ctx.parallelism);
    /** The number of key groups (`max_parallelism` in the job spec). */
    this.maxParallelism = Number(ctx.maxParallelism);
    /** The operator's `config` table. */
    this.config = new Config(ctx.config);
    /** The declared states. */
    this.states = states;
  }
  _lookup(name, kind) {
    const i = this.states.findIndex((s) => s.name === name);
    if (i < 0) {
      const declared = this.states.map((s) => JSON.stringify(s.name)).join(', ');
      throw new WeirError(`state \`${name}\` is not declared (declared: [${declared}])`);
    }
    if (this.states[i].kind !== kind) {
      throw new WeirError(
        `state \`${name}\` is declared as ${KIND_NAMES[this.states[i].kind]} state, not ${kind} state`,
      );
    }
    return i;
  }
  /** A handle on the declared value state `name`, whose values use `codec`. */
  valueState(name, codec) {
    return new ValueState(this._lookup(name, 'value'), name, checkCodec(codec, name));
  }
  /** A handle on the declared list state `name`. */
  listState(name, codec) {
    return new ListState(this._lookup(name, 'list'), name, checkCodec(codec, name));
  }
  /** A handle on the declared map state `name`, with codecs for user keys and values. */
  mapState(name, keyCodec, valueCodec) {
    const id = this._lookup(name, 'map');
    return new MapState(id, name, checkCodec(keyCodec, name), checkCodec(valueCodec, name));
  }
}

function checkCodec(codec, name) {
  if (!codec || typeof codec.encode !== 'function' || typeof codec.decode !== 'function') {
    throw new WeirError(`state \`${name}\`: expected a codec (e.g. codecs.u64), got ${describeValue(codec)}`);
  }
  return codec;
}

// ---------------------------------------------------------------------------
// Keyed state
// ---------------------------------------------------------------------------

function descriptor(kind) {
  return (name, options = {}) => {
    if (typeof name !== 'string' || name === '') throw new WeirError('a state needs a non-empty name');
    const ttlMs = options.ttlMs;
    const migrate = options.migrate ?? undefined;
    if (migrate !== undefined && typeof migrate !== 'function') {
      throw new WeirError(`state \`${name}\`: migrate must be a function (fromVersion, old) => Uint8Array`);
    }
    return Object.freeze({ name, kind, ttlMs: ttlMs === undefined || ttlMs === null ? undefined : ttlMs, migrate });
  };
}

/**
 * State descriptors, declared up front in `states` (a state's id is its
 * index there): `state.value('count')`, `state.list('seen', { ttlMs: 60_000 })`.
 *
 * Option `migrate: (fromVersion, old) => Uint8Array` rewrites one stored
 * value (a value, a list element, a map value; never a map's user key)
 * written by operator version `fromVersion` when `weir upgrade` replaces
 * the operator in place: it gets the bytes as the old version encoded them
 * and returns the bytes this version reads (decode and encode with
 * `codecs`). It runs before `open`, without `this`; a throw aborts the
 * upgrade. A state without it keeps its bytes.
 */
export const state = Object.freeze({
  value: descriptor('value'),
  list: descriptor('list'),
  map: descriptor('map'),
});

/** The current key for an access: a KeyedContext, or `explicitKey(bytes)`. */
function keyOf(scope) {
  const k = scope !== null && typeof scope === 'object' ? scope.key : undefined;
  if (!isBytes(k)) {
    throw new WeirError('state access needs a keyed context (or explicitKey(bytes)) with a current key');
  }
  return k;
}

/** A key scope given explicitly, for operators that walk a batch themselves. */
export function explicitKey(key) {
  return { key: typeof key === 'string' ? utf8.encode(key) : key };
}

// ---------------------------------------------------------------------------
// The batch cache of value states (contract 0.1.3: state.value-get-many and
// value-set-many); the design of sdk/src/cache.rs
// ---------------------------------------------------------------------------
//
// `keyed` and `keyedCo` open a cache for a batch with its distinct keys
// when the operator declares a value state (and the host has the batched
// calls). The first `get` of a value state in the batch reads that state
// for every key of the batch in one `value-get-many`; `get`, `set` and
// `clear` of the batch's keys are then served from memory (set and clear
// mark the entry changed; a read never overwrites an entry set in the
// batch). At the end of the batch, also when the user's code threw, every
// changed entry is written back with one `value-set-many` per state (an
// absent value clears), before the export returns: timers, watermarks and
// close are later host calls and see them. Semantics stay Flink's per
// record: a record sees the updates of the records before it, also for its
// own key. A key outside the batch (an explicit key), list and map state,
// and a `clear` of a state not yet cached in the batch (the cache does not
// know its kind) go to the host directly.

/** The open batch cache, or null (outside `keyed`/`keyedCo` process calls). */
let CACHE = null;

/** The built-in codecs: their decode keeps nothing of its input, so cached bytes can be handed to it. */
const OWN_DECODE = new Set(Object.values(codecs));
/** The built-in codecs whose encode returns fresh bytes (bytes' returns the caller's array). */
const FRESH_ENCODE = new Set(Object.values(codecs).filter((c) => c !== codecs.bytes));

/** A Map key for key bytes: one char per byte. */
function byteString(b) {
  const n = b.length;
  if (n <= 1024) return String.fromCharCode.apply(null, b);
  let s = '';
  for (let i = 0; i < n; i += 1024) s += String.fromCharCode.apply(null, b.subarray(i, Math.min(n, i + 1024)));
  return s;
}

/** True if the bound host has the batched value-state calls (contract 0.1.3). */
function hostBatches() {
  const st = H.state;
  return typeof st.valueGetMany === 'function' && typeof st.valueSetMany === 'function';
}

/**
 * Opens the cache for a checked batch: its distinct keys (views into the
 * batch's data) and, per record, its key's index (-1: no key).
 */
function cacheBegin(input) {
  const kl = input.keyLens;
  const vl = input.valueLens;
  const data = input.data;
  const n = kl.length;
  const recordKey = new Int32Array(n);
  const index = new Map();
  const keys = [];
  let pos = 0;
  for (let i = 0; i < n; i++) {
    const k = kl[i];
    if (k < 0) {
      recordKey[i] = -1;
    } else {
      const key = data.subarray(pos, pos + k);
      const s = byteString(key);
      let at = index.get(s);
      if (at === undefined) {
        at = keys.length;
        index.set(s, at);
        keys.push(key);
      }
      recordKey[i] = at;
      pos += k;
    }
    pos += vl[i];
  }
  CACHE = { keys, index, recordKey, packed: null, states: [], byId: [] };
  return CACHE;
}

/**
 * The index of `key` among the open cache's keys, or -1 (no cache, or a key
 * outside the batch). A keyed context knows its record's index.
 */
function cacheIndex(scope, key) {
  const c = CACHE;
  if (scope._kc === c && scope._kk === key) return scope._ki;
  const at = c.index.get(byteString(key));
  return at === undefined ? -1 : at;
}

/** Entries as the contract's `packed`, shaped for the bound backend (QuickJS: lens as an Array). */
function packed(entries, count) {
  const lens = new Int32Array(count);
  let total = 0;
  for (let i = 0; i < count; i++) {
    const e = entries[i];
    if (e !== null) total += e.length;
  }
  const data = new Uint8Array(total);
  let pos = 0;
  for (let i = 0; i < count; i++) {
    const e = entries[i];
    if (e === null) {
      lens[i] = -1;
    } else {
      lens[i] = e.length;
      data.set(e, pos);
      pos += e.length;
    }
  }
  return { lens: QJS ? Array.from(lens) : lens, data };
}

/** The cache of state `handle` (created empty: every entry unknown). */
function cacheState(handle) {
  const c = CACHE;
  let s = c.byId[handle.id];
  if (s === undefined) {
    const n = c.keys.length;
    s = { id: handle.id, name: handle.name, values: new Array(n).fill(undefined), changed: new Uint8Array(n) };
    c.byId[handle.id] = s;
    c.states.push(s);
  }
  return s;
}

/**
 * Reads state `s` for every key of the batch in one call; entries already
 * set in this batch keep their new values. Throws the host's error.
 */
function cacheFetch(s) {
  const c = CACHE;
  const n = c.keys.length;
  if (c.packed === null) c.packed = packed(c.keys, n);
  const got = H.state.valueGetMany(s.id, c.packed);
  const lens = got.lens;
  const data = bytesIn(got.data);
  if (lens.length !== n) throw new WeirError(`the host returned ${lens.length} values for ${n} keys`);
  const values = new Array(n);
  let pos = 0;
  for (let i = 0; i < n; i++) {
    const len = lens[i];
    if (len === -1) {
      values[i] = null;
      continue;
    }
    if (!(len >= 0 && pos + len <= data.length)) {
      throw new WeirError('the host returned a malformed packed list');
    }
    values[i] = data.subarray(pos, pos + len);
    pos += len;
  }
  if (pos !== data.length) throw new WeirError('the host returned a malformed packed list');
  for (let i = 0; i < n; i++) if (s.values[i] === undefined) s.values[i] = values[i];
}

/**
 * Closes the cache, writing every changed entry back with one
 * `value-set-many` per state. Throws the first failure (a WeirError naming
 * the state).
 */
function cacheEnd() {
  const c = CACHE;
  CACHE = null;
  if (c === null) return;
  for (const s of c.states) {
    const keys = [];
    const values = [];
    for (let i = 0; i < s.changed.length; i++) {
      if (s.changed[i] === 1) {
        keys.push(c.keys[i]);
        values.push(s.values[i]);
      }
    }
    if (keys.length === 0) continue;
    try {
      H.state.valueSetMany(s.id, packed(keys, keys.length), packed(values, values.length));
    } catch (e) {
      throw new WeirError(`state \`${s.name}\`: ${explain(e)}`);
    }
  }
}

/**
 * Runs `f` (the records of a checked batch) with the cache open when
 * `batched`, then writes back what changed, also when `f` threw (as single
 * calls would have written it); `f`'s error wins over a write-back error.
 */
function withBatchCache(batched, input, f) {
  if (!batched || !hostBatches()) return f(null);
  const c = cacheBegin(input);
  try {
    f(c);
  } catch (e) {
    try {
      cacheEnd();
    } catch {
      // The user's error is the one to report.
    }
    throw e;
  }
  cacheEnd();
}

class StateHandle {
  constructor(id, name) {
    /** The state's id: its index in the declared states. */
    this.id = id;
    /** The state's declared name. */
    this.name = name;
  }
  _fail(e) {
    return new WeirError(`state \`${this.name}\`: ${e instanceof WeirError ? e.message : explain(e)}`);
  }
  _decode(codec, bytes) {
    try {
      return codec.decode(bytes);
    } catch (e) {
      throw new WeirError(`state \`${this.name}\`: ${errorMessage(e)}`);
    }
  }
  _encode(codec, v) {
    try {
      return codec.encode(v);
    } catch (e) {
      throw new WeirError(`state \`${this.name}\`: ${errorMessage(e)}`);
    }
  }
  /** Removes everything this state holds for the current key. */
  clear(scope) {
    const key = keyOf(scope);
    if (CACHE !== null) {
      // A value state cached in this batch: cleared in the cache.
      const s = CACHE.byId[this.id];
      const i = s === undefined ? -1 : cacheIndex(scope, key);
      if (i >= 0) {
        s.values[i] = null;
        s.changed[i] = 1;
        return;
      }
    }
    try {
      H.state.clear(this.id, key);
    } catch (e) {
      throw this._fail(e);
    }
  }
}

/** One value per key (Flink's ValueState). */
export class ValueState extends StateHandle {
  constructor(id, name, codec) {
    super(id, name);
    this._c = codec;
  }
  /**
   * The current key's value, or undefined. In a keyed process call, the
   * batch's first get of this state reads it for all the batch's keys at
   * once (see "The batch cache of value states").
   */
  get(scope) {
    const key = keyOf(scope);
    let b;
    try {
      const i = CACHE === null ? -1 : cacheIndex(scope, key);
      if (i >= 0) {
        const s = cacheState(this);
        if (s.values[i] === undefined) cacheFetch(s);
        b = s.values[i];
        // A codec of the user's might keep (and change) the bytes it decodes.
        if (b !== null && !OWN_DECODE.has(this._c)) b = b.slice();
      } else {
        b = H.state.valueGet(this.id, key);
      }
    } catch (e) {
      throw this._fail(e);
    }
    return b === undefined || b === null ? undefined : this._decode(this._c, b);
  }
  /** Sets the current key's value. */
  set(scope, value) {
    const key = keyOf(scope);
    let b = this._encode(this._c, value);
    if (!isBytes(b)) {
      throw new WeirError(`state \`${this.name}\`: the codec returned ${describeValue(b)}, not a Uint8Array`);
    }
    const i = CACHE === null ? -1 : cacheIndex(scope, key);
    if (i >= 0) {
      // Kept until the end of the batch: a copy unless the codec made it.
      if (!FRESH_ENCODE.has(this._c)) b = b.slice();
      const s = cacheState(this);
      s.values[i] = b;
      s.changed[i] = 1;
      return;
    }
    try {
      H.state.valueSet(this.id, key, b);
    } catch (e) {
      throw this._fail(e);
    }
  }
}

/** A list of values per key (Flink's ListState). */
export class ListState extends StateHandle {
  constructor(id, name, codec) {
    super(id, name);
    this._c = codec;
  }
  /** The current key's list, oldest first (empty if none). */
  get(scope) {
    let items;
    try {
      items = H.state.listGet(this.id, keyOf(scope));
    } catch (e) {
      throw this._fail(e);
    }
    return Array.from(items, (b) => this._decode(this._c, b));
  }
  /** Appends `element` to the current key's list. */
  add(scope, element) {
    const b = this._encode(this._c, element);
    try {
      H.state.listAdd(this.id, keyOf(scope), b);
    } catch (e) {
      throw this._fail(e);
    }
  }
  /** Replaces the current key's list with `elements` (clear, then add each). */
  update(scope, elements) {
    this.clear(scope);
    for (const e of elements) this.add(scope, e);
  }
}

/** A map from user keys to values per key (Flink's MapState). */
export class MapState extends StateHandle {
  constructor(id, name, keyCodec, valueCodec) {
    super(id, name);
    this._k = keyCodec;
    this._v = valueCodec;
  }
  /** The value under `userKey` in the current key's map, or undefined. */
  get(scope, userKey) {
    const uk = this._encode(this._k, userKey);
    let b;
    try {
      b = H.state.mapGet(this.id, keyOf(scope), uk);
    } catch (e) {
      throw this._fail(e);
    }
    return b === undefined || b === null ? undefined : this._decode(this._v, b);
  }
  /** True if the current key's map has `userKey`. */
  contains(scope, userKey) {
    const uk = this._encode(this._k, userKey);
    try {
      const b = H.state.mapGet(this.id, keyOf(scope), uk);
      return b !== undefined && b !== null;
    } catch (e) {
      throw this._fail(e);
    }
  }
  /** Puts `value` under `userKey` in the current key's map. */
  put(scope, userKey, value) {
    const uk = this._encode(this._k, userKey);
    const v = this._encode(this._v, value);
    try {
      H.state.mapPut(this.id, keyOf(scope), uk, v);
    } catch (e) {
      throw this._fail(e);
    }
  }
  /** Removes `userKey` from the current key's map. */
  remove(scope, userKey) {
    const uk = this._encode(this._k, userKey);
    try {
      H.state.mapRemove(this.id, keyOf(scope), uk);
    } catch (e) {
      throw this._fail(e);
    }
  }
  /** All entries as [userKey, value], ordered by the user keys' encoded bytes. */
  entries(scope) {
    let es;
    try {
      es = H.state.mapEntries(this.id, keyOf(scope));
    } catch (e) {
      throw this._fail(e);
    }
    return Array.from(es, ([k, v]) => [this._decode(this._k, k), this._decode(this._v, v)]);
  }
  /** True if the current key's map has no entries. */
  isEmpty(scope) {
    try {
      return H.state.mapEntries(this.id, keyOf(scope)).length === 0;
    } catch (e) {
      throw this._fail(e);
    }
  }
}

// ---------------------------------------------------------------------------
// Logging, metrics, watermark
// ---------------------------------------------------------------------------

function writeLog(level, parts) {
  if (H === null) bindHost();
  H.log.log(level, parts.map((p) => (typeof p === 'string' ? p : describeValue(p))).join(' '));
}

/** The host's log, tagged with the operator uid and subtask (`weir -v` shows info and up). */
export const log = Object.freeze({
  trace: (...m) => writeLog('trace', m),
  debug: (...m) => writeLog('debug', m),
  info: (...m) => writeLog('info', m),
  warn: (...m) => writeLog('warn', m),
  error: (...m) => writeLog('error', m),
});

/** Operator metrics, reported beside the host's own. */
export const metrics = Object.freeze({
  /** Adds `delta` (a u64: bigint or non-negative integer) to the counter `name`. */
  counterAdd(name, delta = 1) {
    if (H === null) bindHost();
    H.metrics.counterAdd(name, u64Out(delta, `counter \`${name}\``));
  },
  /** Sets the gauge `name`. */
  gaugeSet(name, value) {
    if (H === null) bindHost();
    H.metrics.gaugeSet(name, Number(value));
  },
});

/** The current event-time watermark of this subtask (MIN_TIMESTAMP before the first). */
export function currentWatermark() {
  if (H === null) bindHost();
  return timeIn(H.timers.currentWatermark());
}

// ---------------------------------------------------------------------------
// Adapters: a function definition -> the exported `operator` interface
// ---------------------------------------------------------------------------

/**
 * A definition is a plain object or a class. Metadata (`name`, `version`,
 * `states`) are read from the object, or from the class's static fields;
 * the instance is the object itself, or `new Class()` at `open`.
 */
function instantiate(def) {
  return typeof def === 'function' ? new def() : def;
}

function metaOf(def, field, fallback) {
  const v = def[field];
  return v === undefined || v === null || v === '' ? fallback : v;
}

function checkStates(states) {
  if (!Array.isArray(states)) throw new WeirError('`states` must be an array of state descriptors');
  states.forEach((s, i) => {
    if (!s || typeof s.name !== 'string' || !(s.kind in KIND_NAMES)) {
      throw new WeirError(`states[${i}] is not a state descriptor (use state.value/list/map)`);
    }
    if (states.slice(0, i).some((o) => o.name === s.name)) {
      throw new WeirError(`state \`${s.name}\` is declared twice`);
    }
  });
  return states;
}

function describeOf(def, keyed) {
  const pkg = (H && H.package) || {};
  const states = checkStates(metaOf(def, 'states', []));
  return {
    name: String(metaOf(def, 'operatorName', metaOf(def, 'name', pkg.name || 'js-operator'))),
    version: String(metaOf(def, 'version', pkg.version || '0.0.0')),
    keyed,
    states: states.map((s) => ({
      name: s.name,
      kind: s.kind,
      ttlMs: s.ttlMs === undefined ? undefined : u64Out(s.ttlMs, `state \`${s.name}\` ttlMs`),
    })),
  };
}

/**
 * The contract's `migrate-state` for `def`: the new bytes of one stored
 * value of state `name` written by operator version `fromVersion`; `old`
 * as it is for a state without `migrate` (or one not declared).
 */
function migrateState(def, name, fromVersion, old) {
  const s = checkStates(metaOf(def, 'states', [])).find((d) => d.name === name);
  if (s === undefined || typeof s.migrate !== 'function') return old;
  const what = `migrating state \`${name}\` from version ${fromVersion}`;
  let migrated;
  try {
    // QuickJS's bindings may pass a list<u8> as a plain Array.
    migrated = s.migrate(fromVersion, isBytes(old) ? old : Uint8Array.from(old));
  } catch (e) {
    throw new WeirError(`${what}: ${errorMessage(e)}`);
  }
  if (!isBytes(migrated)) {
    const got = migrated === null ? 'null' : Array.isArray(migrated) ? 'an Array' : typeof migrated;
    throw new WeirError(`${what}: the migration returned ${got}, not a Uint8Array`);
  }
  return migrated;
}

/**
 * Builds the exported `operator` object. `hooks.process(inst, input, out)`
 * handles a batch; optional `hooks.onTimer(inst, key, time, out)`,
 * `onWatermark(inst, wm, out)` and `close(inst, out)`. Its `migrateState`
 * is the contract's `migration` interface (build.sh exports it).
 */
function makeOperator(def, keyed, hooks) {
  if (def === null || (typeof def !== 'object' && typeof def !== 'function')) {
    throw new TypeError('weir-sdk: expected an operator definition (an object or a class)');
  }
  const out = new Collector();
  let inst = null;
  const call = (f) =>
    guarded(function (...args) {
      if (inst === null) throw new WeirError('operator called before a successful `open`');
      out._clear();
      f(inst, out, ...args);
      return out._emitted();
    });
  return {
    describe: guarded(() => describeOf(def, keyed)),
    open: guarded((ctx) => {
      const states = checkStates(metaOf(def, 'states', []));
      const created = instantiate(def);
      if (typeof created.open === 'function') created.open(new OpenContext(ctx, states));
      if (hooks.open) hooks.open(states);
      inst = created;
    }),
    process: call((i, o, input) => hooks.process(i, input, o)),
    processInput: call((i, o, input, records) => {
      if (input === 0) return hooks.process(i, records, o);
      if (input !== 1 || !hooks.processInput) {
        throw new WeirError(
          `this operator has one input, but a batch arrived on input ${input} ` +
            '(`input = "right"` in the job spec needs keyedCo)',
        );
      }
      return hooks.processInput(i, records, o);
    }),
    onTimer: call((i, o, key, time) => hooks.onTimer && hooks.onTimer(i, key, timeIn(time), o)),
    onProcessingTimer: call(
      (i, o, key, time) => hooks.onProcessingTimer && hooks.onProcessingTimer(i, key, timeIn(time), o),
    ),
    onWatermark: call((i, o, wm) => {
      if (typeof i.onWatermark === 'function') i.onWatermark(timeIn(wm), o);
    }),
    close: call((i, o) => {
      if (typeof i.close === 'function') i.close(o);
    }),
    migrateState: guarded((name, fromVersion, old) => migrateState(def, name, fromVersion, old)),
    windowFunction: NO_WINDOW_FUNCTION,
  };
}

function requireMethod(def, name) {
  const f = typeof def === 'function' ? def.prototype[name] : def[name];
  if (typeof f !== 'function') throw new TypeError(`weir-sdk: the operator definition needs a \`${name}\` method`);
}

/**
 * One record in, one record out (Flink's MapFunction). `map(record)`
 * returns `{ key?, value, timestamp? }` (a missing timestamp keeps the
 * input's; `record.withValue(v)` keeps key and timestamp).
 */
export function map(def) {
  requireMethod(def, 'map');
  return makeOperator(def, false, {
    process(inst, input, out) {
      forEachRecord(input, (r) => {
        const m = inst.map(r);
        if (m === null || typeof m !== 'object') throw new WeirError('map must return a record { key?, value, timestamp? }');
        out.main.push(m.key ?? null, m.value, m.timestamp === undefined ? r._t : m.timestamp);
      });
    },
  });
}

/** One record in, zero or more out (Flink's FlatMapFunction): `flatMap(record, out)`. */
export function flatMap(def) {
  requireMethod(def, 'flatMap');
  return makeOperator(def, false, {
    process(inst, input, out) {
      forEachRecord(input, (r) => inst.flatMap(r, out));
    },
  });
}

/** Keeps the records for which `filter(record)` returns true (Flink's FilterFunction). */
export function filter(def) {
  requireMethod(def, 'filter');
  return makeOperator(def, false, {
    process(inst, input, out) {
      const b = out.main;
      forEachRecord(input, (r) => {
        if (inst.filter(r)) {
          b._reserveRecord();
          const i = b.length;
          b._kl[i] = r._kl;
          const start = r._kl > 0 ? r._ks : r._vs;
          const len = r._vs + r._vl - start;
          b._reserveBytes(len);
          b._data.set(r._d.subarray(start, start + len), b._bytes);
          b._bytes += len;
          b._vl[i] = r._vl;
          b._ts[i] = timeIn(r._t);
          b.length = i + 1;
        }
      });
    },
  });
}

/**
 * The current key, time, timers and outputs of a keyed call (Flink's
 * Context / OnTimerContext). One object is reused for every record of a
 * call: read from it during the call, do not keep it.
 */
export class KeyedContext {
  constructor(out) {
    /** The current key: the record's, or the firing timer's. */
    this.key = null;
    this._t = 0n;
    // The batch cache this context's record belongs to (null outside a
    // batch), the record's key (as handed out) and its index in the cache.
    this._kc = null;
    this._kk = null;
    this._ki = -1;
    /** The collector (main and side outputs). */
    this.out = out;
  }
  /** The record's timestamp, or the firing timer's time (bigint). */
  get timestamp() {
    return timeIn(this._t);
  }
  /** The current key as a string (invalid UTF-8 becomes U+FFFD). */
  keyString() {
    return readUtf8(this.key, 0, this.key.length, false);
  }
  /** The current event-time watermark of this subtask. */
  currentWatermark() {
    return timeIn(H.timers.currentWatermark());
  }
  /** Registers an event-time timer for the current key; registering it twice is a no-op. */
  registerEventTimeTimer(time) {
    const t = timeArg(time, 'register timer');
    try {
      H.timers.registerEventTimer(this.key, timeOut(t));
    } catch (e) {
      throw new WeirError(`register timer at ${t}: ${explain(e)}`);
    }
  }
  /** Deletes the current key's timer at `time`, if registered. */
  deleteEventTimeTimer(time) {
    const t = timeArg(time, 'delete timer');
    try {
      H.timers.deleteEventTimer(this.key, timeOut(t));
    } catch (e) {
      throw new WeirError(`delete timer at ${t}: ${explain(e)}`);
    }
  }
  /** The subtask's wall clock, ms since the epoch (bigint; the harness's clock in tests). */
  currentProcessingTime() {
    return timeIn(H.timers.currentProcessingTime());
  }
  /**
   * Registers a processing-time timer for the current key: it fires through
   * `onProcessingTimer` once the wall clock reaches `time`; checkpointed.
   */
  registerProcessingTimeTimer(time) {
    const t = timeArg(time, 'register processing-time timer');
    try {
      H.timers.registerProcessingTimer(this.key, timeOut(t));
    } catch (e) {
      throw new WeirError(`register processing-time timer at ${t}: ${explain(e)}`);
    }
  }
  /** Deletes the current key's processing-time timer at `time`, if registered. */
  deleteProcessingTimeTimer(time) {
    const t = timeArg(time, 'delete processing-time timer');
    try {
      H.timers.deleteProcessingTimer(this.key, timeOut(t));
    } catch (e) {
      throw new WeirError(`delete processing-time timer at ${t}: ${explain(e)}`);
    }
  }
  /** Emits a record on the main output: collect(key, value, timestamp). */
  collect(key, value, timestamp) {
    this.out.main.push(key, value, timestamp);
  }
  /** Emits a record on the side output `tag` (Flink's ctx.output). */
  output(tag, key, value, timestamp) {
    this.out.output(tag, key, value, timestamp);
  }
}

/**
 * Per-key logic with keyed state and event-time timers (Flink's
 * KeyedProcessFunction). The definition has `states` and the methods
 * `open(ctx)`, `processElement(record, ctx)`, and optionally
 * `onTimer(time, ctx)`, `onWatermark(watermark, out)`, `close(out)`.
 */
export function keyed(def) {
  requireMethod(def, 'processElement');
  return makeOperator(def, true, keyedHooks((inst) => inst.processElement.bind(inst)));
}

/**
 * Per-key logic over two keyed inputs with shared state and timers (Flink's
 * KeyedCoProcessFunction): `processElement1(record, ctx)` for the edges with
 * `input = "left"`, `processElement2(record, ctx)` for `input = "right"`;
 * otherwise as `keyed`.
 */
export function keyedCo(def) {
  requireMethod(def, 'processElement1');
  requireMethod(def, 'processElement2');
  return makeOperator(
    def,
    true,
    keyedHooks(
      (inst) => inst.processElement1.bind(inst),
      (inst) => inst.processElement2.bind(inst),
    ),
  );
}

/**
 * The hooks of `keyed` and `keyedCo`: per-record calls with the key current;
 * a batch runs with the batch cache of value states open when the operator
 * declares any.
 */
function keyedHooks(element, element2) {
  let ctx = null;
  let batched = false;
  const context = (out) => {
    if (ctx === null || ctx.out !== out) ctx = new KeyedContext(out);
    return ctx;
  };
  const records = (process) => (inst, input, out) => {
    const c = context(out);
    const f = process(inst);
    checkBatch(input);
    try {
      withBatchCache(batched, input, (cache) => {
        c._kc = cache;
        const keyIndex = cache === null ? null : cache.recordKey;
        eachRecord(input, (r, i) => {
          if (r._kl < 0) {
            throw new WeirError(`record ${i} of the batch has no key, but this operator runs on a keyed stream`);
          }
          const key = r.key;
          c.key = key;
          c._t = r._t;
          if (keyIndex !== null) {
            c._kk = key;
            c._ki = keyIndex[i];
          }
          f(r, c);
        });
      });
    } finally {
      c._kc = null;
      c._kk = null;
    }
  };
  const timer = (name) => (inst, key, time, out) => {
    if (typeof inst[name] !== 'function') return;
    const c = context(out);
    c.key = key;
    c._t = time;
    inst[name](time, c);
  };
  return {
    open(states) {
      batched = states.some((s) => s.kind === 'value');
    },
    process: records(element),
    processInput: element2 ? records(element2) : undefined,
    onTimer: timer('onTimer'),
    onProcessingTimer: timer('onProcessingTimer'),
  };
}

/**
 * The low-level interface: `process(records, out)` gets the whole batch as
 * an array-like of Records (Rust's `Operator`). `keyed: true` in the
 * definition declares a keyed operator; `onTimer(key, time, out)` then
 * receives timers.
 */
export function operator(def) {
  requireMethod(def, 'process');
  return makeOperator(def, !!def.keyed, {
    process(inst, input, out) {
      const records = [];
      forEachRecord(input, (r) => records.push(r));
      inst.process(records, out);
    },
    onTimer(inst, key, time, out) {
      if (typeof inst.onTimer === 'function') inst.onTimer(key, time, out);
    },
  });
}

// ---------------------------------------------------------------------------
// Window functions (contract 0.1.3): the `window-function` export
// ---------------------------------------------------------------------------
//
// The host's window operator (an [[operator]] with a `window` table and a
// `module`) assigns records to windows, keeps the window state in its keyed
// backend and fires windows on the watermark; the component only computes.
// `aggregate(def)` and `processWindow(def)` return the same kind of object
// as the adapters above, with `windowFunction` set: build.sh exports it as
// `window-function`. Every other operator answers `kind` with `none`.

/** A window `[start, end)` in ms of event time (bigints), as the host fired it. */
export class Window {
  constructor(start, end) {
    /** The first millisecond in the window. */
    this.start = start;
    /** The first millisecond after it. */
    this.end = end;
    Object.freeze(this);
  }
  /** The window's last millisecond, `end - 1`: the timestamp the host gives its output (Flink's maxTimestamp). */
  maxTimestamp() {
    return this.end > MIN_TIMESTAMP ? this.end - 1n : this.end;
  }
  /** True for a count window's (`type = "global"`): the whole time line. */
  isGlobal() {
    return this.start === MIN_TIMESTAMP && this.end === MAX_TIMESTAMP;
  }
}

function windowIn(w) {
  if (w === null || typeof w !== 'object') throw new WeirError(`expected a window { start, end }, got ${describeValue(w)}`);
  return new Window(timeIn(w.start), timeIn(w.end));
}

/** A list<u8> from the host as a Uint8Array (QuickJS's bindings may pass an Array). */
function bytesIn(b) {
  return isBytes(b) ? b : Uint8Array.from(b);
}

/** Throws the contract's err(message) without a host (the wrapper's default export has none bound). */
function refuse(message) {
  return () => {
    throw message;
  };
}

const NOT_A_WINDOW_FUNCTION =
  'this module is not a window function (its window-function kind is `none`); ' +
  'a window operator needs one built with the SDK\'s aggregate() or processWindow()';

/** What every operator that is not a window function exports as `window-function`. */
const NO_WINDOW_FUNCTION = Object.freeze({
  kind: () => 'none',
  add: refuse(`window-function.add: ${NOT_A_WINDOW_FUNCTION}`),
  merge: refuse(`window-function.merge: ${NOT_A_WINDOW_FUNCTION}`),
  getResult: refuse(`window-function.get-result: ${NOT_A_WINDOW_FUNCTION}`),
  processWindow: refuse(`window-function.process-window: ${NOT_A_WINDOW_FUNCTION}`),
});

/**
 * The exported object of a window function of `kind` ('aggregate' or
 * 'process-window'). `calls(opened)` builds its window-function calls;
 * `operator`'s describe and open work as usual (keyed = false, no state);
 * records and timers arriving through `operator` are errors (the module
 * belongs in an [[operator]] with a `window` table); watermarks and close
 * emit nothing.
 */
function makeWindowFunction(def, kind, calls) {
  if (def === null || (typeof def !== 'object' && typeof def !== 'function')) {
    throw new TypeError('weir-sdk: expected a window function definition (an object or a class)');
  }
  const states = metaOf(def, 'states', []);
  if (!Array.isArray(states) || states.length > 0) {
    throw new TypeError('weir-sdk: a window function has no keyed state (the host keeps the window state)');
  }
  let inst = null;
  const opened = () => {
    if (inst === null) throw new WeirError('window function called before a successful `open`');
    return inst;
  };
  const nameOf = () => describeOf(def, false).name;
  const misuse = (call) =>
    guarded(() => {
      throw new WeirError(
        `operator.${call}: \`${nameOf()}\` is a window function (${kind}): use it in an [[operator]] ` +
          'with a `window` table, not as a plain operator',
      );
    });
  const kindName = (k) => (k === 'aggregate' ? 'an aggregate function' : 'a process-window function');
  const wrongKind = (call) =>
    guarded(() => {
      const other = call === 'process-window' ? 'process-window' : 'aggregate';
      throw new WeirError(`window-function.${call}: \`${nameOf()}\` is ${kindName(kind)}, not ${kindName(other)}`);
    });
  const wf = {
    kind: () => kind,
    add: wrongKind('add'),
    merge: wrongKind('merge'),
    getResult: wrongKind('get-result'),
    processWindow: wrongKind('process-window'),
  };
  const own = calls(opened);
  for (const k of Object.keys(own)) wf[k] = guarded(own[k]);
  const empty = new Collector();
  return {
    describe: guarded(() => describeOf(def, false)),
    open: guarded((ctx) => {
      const created = instantiate(def);
      if (typeof created.open === 'function') created.open(new OpenContext(ctx, []));
      inst = created;
    }),
    process: misuse('process'),
    processInput: misuse('process-input'),
    onTimer: misuse('on-timer'),
    onProcessingTimer: misuse('on-processing-timer'),
    // Nothing to do or flush (as the Rust SDK's window functions), so a host
    // may pass watermarks to, or close, any instance it opened.
    onWatermark: guarded(() => empty._emitted()),
    close: guarded(() => empty._emitted()),
    migrateState: guarded((name, fromVersion, old) => old),
    windowFunction: Object.freeze(wf),
  };
}

/**
 * An aggregate window function (Flink's AggregateFunction): incremental,
 * one accumulator per key and window, stored by the host as bytes.
 *
 * The definition (an object or a class) has
 *   - `createAccumulator()`: a new window's accumulator;
 *   - `add(accumulator, record)`: adds a record (`key`, `value`,
 *     `timestamp`), returns the accumulator (or mutates it and returns
 *     nothing);
 *   - `getResult(key, window, accumulator)`: the fired window's result value,
 *     a Uint8Array or a string (UTF-8); the host emits it with the window's
 *     key and the timestamp `window.end - 1`;
 *   - optional `merge(a, b)`: one accumulator of two (session windows; a
 *     session window without it fails), returned (or `a` mutated);
 *   - optional `accumulator`: the codec of the accumulator's bytes
 *     (default `codecs.json`; a class gives it as a static field);
 *   - optional `name`, `version`, `open(ctx)` (config from the job spec).
 *
 * The SDK does the batch bookkeeping of the contract's `add` (records in
 * order into their targets; a `none` accumulator created first; every
 * accumulator returned), `merge` and `get-result`.
 */
export function aggregate(def) {
  requireMethod(def, 'createAccumulator');
  requireMethod(def, 'add');
  requireMethod(def, 'getResult');
  const codec = checkCodec(metaOf(def, 'accumulator', codecs.json), 'accumulator');
  const decode = (b) => {
    try {
      return codec.decode(bytesIn(b));
    } catch (e) {
      throw new WeirError(`cannot decode an accumulator (codec ${codec.name}): ${errorMessage(e)}`);
    }
  };
  const encode = (acc) => {
    let b;
    try {
      b = codec.encode(acc);
    } catch (e) {
      throw new WeirError(`cannot encode an accumulator (codec ${codec.name}): ${errorMessage(e)}`);
    }
    if (!isBytes(b)) throw new WeirError(`the accumulator codec ${codec.name} returned ${describeValue(b)}, not a Uint8Array`);
    return b;
  };
  return makeWindowFunction(def, 'aggregate', (opened) => ({
    add(accumulators, targets, records) {
      const f = opened();
      const n = accumulators.length;
      const count = records.timestamps.length;
      if (targets.length !== count) {
        throw new WeirError(`window-function.add: ${targets.length} targets for ${count} records`);
      }
      const accs = new Array(n);
      const live = new Uint8Array(n);
      forEachRecord(records, (r, i) => {
        const t = targets[i];
        if (!(t >= 0 && t < n)) {
          throw new WeirError(
            `window-function.add: record ${i} goes to accumulator ${t}, but ${n} accumulator${n === 1 ? ' was' : 's were'} given`,
          );
        }
        if (live[t] === 0) {
          const a = accumulators[t];
          accs[t] = a === undefined || a === null ? f.createAccumulator() : decode(a);
          live[t] = 1;
        }
        const next = f.add(accs[t], r);
        if (next !== undefined) accs[t] = next;
      });
      const out = new Array(n);
      for (let i = 0; i < n; i++) {
        const a = accumulators[i];
        if (live[i] === 1) out[i] = encode(accs[i]);
        else if (a === undefined || a === null) out[i] = encode(f.createAccumulator());
        else out[i] = bytesIn(a);
      }
      return out;
    },
    merge(pairs) {
      const f = opened();
      if (typeof f.merge !== 'function') {
        throw new WeirError('window-function.merge: this aggregate has no `merge` (session windows need one)');
      }
      return Array.from(pairs, (p) => {
        const a = decode(p[0]);
        const m = f.merge(a, decode(p[1]));
        return encode(m === undefined ? a : m);
      });
    },
    getResult(windows) {
      const f = opened();
      return Array.from(windows, (w) => {
        const v = f.getResult(bytesIn(w.key), windowIn(w.window), decode(w.accumulator));
        if (isBytes(v)) return v;
        if (typeof v === 'string') return utf8.encode(v);
        throw new WeirError(`getResult must return a Uint8Array or a string, got ${describeValue(v)}`);
      });
    },
  }));
}

/**
 * A process-window function (Flink's ProcessWindowFunction): when a window
 * fires, `processWindow(key, window, records, out)` gets its key
 * (Uint8Array), the Window (`start`, `end`, `maxTimestamp()`) and all its
 * records in arrival order (views valid during the call), and emits any
 * records with `out.collect(key, value)` / `out.output(tag, key, value)`.
 * The host gives every emitted record the timestamp `end - 1` (the
 * default when none is given). Optional `name`, `version`, `open(ctx)`.
 */
export function processWindow(def) {
  requireMethod(def, 'processWindow');
  const out = new Collector();
  return makeWindowFunction(def, 'process-window', (opened) => ({
    processWindow(key, window, records) {
      const f = opened();
      const w = windowIn(window);
      out._clear();
      out._defaultTs = w.maxTimestamp();
      const rs = [];
      forEachRecord(records, (r) => rs.push(r));
      f.processWindow(bytesIn(key), w, rs, out);
      return out._emitted();
    },
  }));
}
