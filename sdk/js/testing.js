// testing.js: run a Weir JS operator in-process under Node, without Wasm.
//
// `Harness` binds an in-memory fake of the host interfaces (state, timers,
// log, metrics) shaped like the StarlingMonkey bindings (bigint for s64/u64,
// typed arrays for lists, `undefined` for a missing option, errors thrown
// with a `payload` variant), then drives the exported `operator` object the
// way the host does: describe, open, process batches, fire timers as the
// watermark advances (in (time, key bytes) order), close; and migrate state
// as `weir upgrade` does (`migrateState` for one stored value,
// `migrateStoredState` for everything stored).
//
// Mirrors sdk/src/testing.rs. It checks every emitted batch as the host
// does (three lists of one length, lengths adding up to the data), and
// copies outputs at once, since the SDK reuses its buffers between calls.
// The batched value-state calls of contract 0.1.3 (value-get-many,
// value-set-many) are emulated as the host does them (one get / set / clear
// per entry) and counted: `batchedStateCalls()`, `stateCalls()` for the
// single-key ones; `Harness.open(op, { batchedState: false })` leaves them out.
// `h.snapshot()` takes a checkpoint of the fake host (every state's entries,
// the timers, the processing-time clock, the watermark) and
// `Harness.open(op, { restore: snapshot })` opens a new instance on it, as a
// task restarting from a checkpoint.
//
//   import { Harness } from '../../../sdk/js/testing.js';
//   const h = Harness.open(operator, { config: { emit: 'updates' } });
//   const out = h.process([{ key: 'a', value: 'a', timestamp: 1n }]);
//   out.values(); // ['a\t1']
//   h.migrateState('count', '1.0.0', oldBytes); // what the upgrade stores instead
//
// Window functions (aggregate() / processWindow(), contract 0.1.3) run
// through the same export code as in the component, at the wire level:
//
//   Harness.aggregate(fn, 'k', { start: 0n, end: 10n }, ['3', '5'], 2).valueString();
//   Harness.mergedAggregate(fn, 'k', win, ['3'], ['5']);  // two accumulators, merged
//   Harness.processWindow(fn, 'k', win, ['3', '5']).values();
//   h.windowAdd(accumulators, targets, records) ... // the raw calls, on Harness.open(fn)

import { MAX_TIMESTAMP, MIN_TIMESTAMP, errorMessage, utf8 } from './weir-sdk.js';

const HOST_KEY = '__weirHost';

function bytes(v) {
  if (v === null || v === undefined) return null;
  if (v instanceof Uint8Array) return v.slice();
  if (typeof v === 'string') return utf8.encode(v);
  throw new TypeError(`expected a string or Uint8Array, got ${typeof v}`);
}

const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
const unhex = (s) => new Uint8Array((s.match(/../g) || []).map((x) => parseInt(x, 16)));

function compareBytes(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

/** A state error as the bindings throw it. */
function stateError(tag, val) {
  const e = new Error(`state error: ${tag}`);
  e.payload = val === undefined ? { tag } : { tag, val };
  return e;
}

function badPacked(what) {
  return stateError('backend', `malformed packed list: ${what}`);
}

/** The entries of a `packed` (null: absent), checked as the host checks them. */
function unpack(p) {
  if (p === null || typeof p !== 'object' || !(p.data instanceof Uint8Array)) {
    throw new TypeError('a packed list needs `lens` (list<s32>) and `data` (a Uint8Array)');
  }
  const entries = [];
  let at = 0;
  Array.from(p.lens).forEach((len, i) => {
    if (len === -1) {
      entries.push(null);
      return;
    }
    if (!Number.isInteger(len) || len < 0 || len > 0x7fffffff || at + len > p.data.length) {
      throw badPacked(`entry ${i} has length ${len}, past the ${p.data.length} bytes of data`);
    }
    entries.push(p.data.slice(at, at + len));
    at += len;
  });
  if (at !== p.data.length) throw badPacked(`the lengths add up to ${at} bytes but data holds ${p.data.length}`);
  return entries;
}

/** Entries (null: absent) as a `packed`, shaped as the bindings return it. */
function pack(entries) {
  const lens = new Int32Array(entries.length);
  let total = 0;
  entries.forEach((e, i) => {
    lens[i] = e === null ? -1 : e.length;
    if (e !== null) total += e.length;
  });
  const data = new Uint8Array(total);
  let pos = 0;
  for (const e of entries) {
    if (e === null) continue;
    data.set(e, pos);
    pos += e.length;
  }
  return { lens, data };
}

/** One output record, with its bytes copied out of the SDK's buffers. */
export class OutputRecord {
  constructor(key, value, timestamp) {
    /** @type {Uint8Array | null} */
    this.key = key;
    /** @type {Uint8Array} */
    this.value = value;
    /** @type {bigint} */
    this.timestamp = timestamp;
  }
  keyString() {
    return this.key === null ? null : utf8.decode(this.key);
  }
  valueString() {
    return utf8.decode(this.value);
  }
}

/** Everything emitted by one or more calls. */
export class Output {
  constructor() {
    /** @type {OutputRecord[]} */
    this.main = [];
    /** @type {Array<{ tag: string, record: OutputRecord }>} */
    this.sideRecords = [];
  }
  /** The main output's values as strings. */
  values() {
    return this.main.map((r) => r.valueString());
  }
  /** The records emitted on side output `tag`. */
  side(tag) {
    return this.sideRecords.filter((s) => s.tag === tag).map((s) => s.record);
  }
  /** True if nothing was emitted. */
  isEmpty() {
    return this.main.length === 0 && this.sideRecords.length === 0;
  }
  extend(other) {
    this.main.push(...other.main);
    this.sideRecords.push(...other.sideRecords);
  }
}

/** Copies a `batch` out of the SDK's buffers, checking it as the host does. */
function readBatch(b, where) {
  const n = b.timestamps.length;
  if (b.keyLens.length !== n || b.valueLens.length !== n) {
    throw new Error(`bad output (${where}): ${n} timestamps, ${b.keyLens.length} key lengths, ${b.valueLens.length} value lengths`);
  }
  const out = [];
  let pos = 0;
  for (let i = 0; i < n; i++) {
    const k = b.keyLens[i];
    if (k < -1) throw new Error(`bad output (${where}): record ${i} has key length ${k}`);
    const key = k < 0 ? null : b.data.slice(pos, pos + k);
    pos += Math.max(k, 0);
    const v = b.valueLens[i];
    if (pos + v > b.data.length) throw new Error(`bad output (${where}): record ${i} runs past the data`);
    out.push(new OutputRecord(key, b.data.slice(pos, pos + v), BigInt(b.timestamps[i])));
    pos += v;
  }
  if (pos !== b.data.length) throw new Error(`bad output (${where}): lengths add up to ${pos}, data holds ${b.data.length}`);
  return out;
}

/** The in-memory host: keyed state by id, timers, watermark, logs, metrics. */
class FakeHost {
  constructor(states) {
    this.kinds = states.map((s) => s.kind);
    /** per state id: Map<hex key, value | element[] | Map<hex user key, value>> */
    this.stores = states.map(() => new Map());
    /** "time|hexkey" -> [time, key] */
    this.timerSet = new Map();
    this.watermark = MIN_TIMESTAMP;
    this.logs = [];
    this.counters = new Map();
    this.gauges = new Map();
    const self = this;
    const store = (id, kind) => {
      if (!(id >= 0 && id < self.stores.length)) throw stateError('unknown-state', id);
      if (kind && self.kinds[id] !== kind) throw stateError('wrong-kind', id);
      return self.stores[id];
    };
    const k = (key) => {
      if (!(key instanceof Uint8Array)) throw new TypeError('state key must be a Uint8Array');
      return hex(key);
    };
    this.state = {
      valueGet: (id, key) => {
        const v = store(id, 'value').get(k(key));
        return v === undefined ? undefined : v.slice();
      },
      valueSet: (id, key, value) => void store(id, 'value').set(k(key), value.slice()),
      listGet: (id, key) => (store(id, 'list').get(k(key)) || []).map((e) => e.slice()),
      listAdd: (id, key, el) => {
        const s = store(id, 'list');
        const kk = k(key);
        if (!s.has(kk)) s.set(kk, []);
        s.get(kk).push(el.slice());
      },
      mapGet: (id, key, uk) => {
        const m = store(id, 'map').get(k(key));
        const v = m && m.get(hex(uk));
        return v === undefined ? undefined : v.slice();
      },
      mapPut: (id, key, uk, v) => {
        const s = store(id, 'map');
        const kk = k(key);
        if (!s.has(kk)) s.set(kk, new Map());
        s.get(kk).set(hex(uk), v.slice());
      },
      mapRemove: (id, key, uk) => {
        const m = store(id, 'map').get(k(key));
        if (m) m.delete(hex(uk));
      },
      mapEntries: (id, key) => {
        const m = store(id, 'map').get(k(key));
        if (!m) return [];
        return [...m.entries()]
          .map(([uk, v]) => [unhex(uk), v.slice()])
          .sort((a, b) => compareBytes(a[0], b[0]));
      },
      clear: (id, key) => void store(id).delete(k(key)),
      // Contract 0.1.3: as the host, one value-get (value-set or clear) per entry.
      valueGetMany: (id, keys) => {
        self.batchedCalls++;
        const s = store(id, 'value');
        const values = unpack(keys).map((key) => {
          if (key === null) throw badPacked('an absent key');
          const v = s.get(hex(key));
          return v === undefined ? null : v;
        });
        return pack(values);
      },
      valueSetMany: (id, keys, values) => {
        self.batchedCalls++;
        const ks = unpack(keys);
        const vs = unpack(values);
        if (ks.length !== vs.length) throw badPacked(`${ks.length} keys but ${vs.length} values`);
        const s = store(id, 'value');
        ks.forEach((key, i) => {
          if (key === null) throw badPacked('an absent key');
          if (vs[i] === null) s.delete(hex(key));
          else s.set(hex(key), vs[i].slice());
        });
      },
    };
    // Counts the guest's state calls: the batched ones (value-get-many,
    // value-set-many) and all others (one key each).
    this.batchedCalls = 0;
    this.singleCalls = 0;
    for (const name of Object.keys(this.state)) {
      if (name === 'valueGetMany' || name === 'valueSetMany') continue;
      const f = this.state[name];
      this.state[name] = (...args) => {
        self.singleCalls++;
        return f(...args);
      };
    }
    this.timers = {
      registerEventTimer: (key, time) => {
        if (typeof time !== 'bigint') throw new TypeError('timer time must be a bigint (s64)');
        self.timerSet.set(`${time}|${hex(key)}`, [time, key.slice()]);
      },
      deleteEventTimer: (key, time) => void self.timerSet.delete(`${time}|${hex(key)}`),
      currentWatermark: () => self.watermark,
      registerProcessingTimer: (key, time) => {
        if (typeof time !== 'bigint') throw new TypeError('timer time must be a bigint (s64)');
        self.processingTimers.set(`${time}|${hex(key)}`, [time, key.slice()]);
      },
      deleteProcessingTimer: (key, time) => void self.processingTimers.delete(`${time}|${hex(key)}`),
      currentProcessingTime: () => self.processingTime,
    };
    this.processingTimers = new Map();
    this.processingTime = 0n;
    this.log = { log: (level, message) => void self.logs.push([level, message]) };
    this.metrics = {
      counterAdd: (name, delta) => {
        if (typeof delta !== 'bigint') throw new TypeError('counter delta must be a bigint (u64)');
        self.counters.set(name, (self.counters.get(name) || 0n) + delta);
      },
      gaugeSet: (name, value) => void self.gauges.set(name, value),
    };
  }
  /** Registered timers as [time, key], in firing order. */
  sortedTimers() {
    return sortTimers([...this.timerSet.values()]);
  }
}

/** Timers [time, key] in firing order: by time, then key bytes. */
function sortTimers(timers) {
  return timers.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : compareBytes(a[1], b[1])));
}

/** A deep copy of one state's store (see FakeHost.stores). */
function copyStore(kind, store) {
  const entries = [...store.entries()];
  if (kind === 'value') return new Map(entries.map(([k, v]) => [k, v.slice()]));
  if (kind === 'list') return new Map(entries.map(([k, es]) => [k, es.map((e) => e.slice())]));
  return new Map(entries.map(([k, m]) => [k, new Map([...m.entries()].map(([uk, v]) => [uk, v.slice()]))]));
}

/** Makes `host` (of the operator described by `info`) hold what `snapshot` holds. */
function restore(host, info, snapshot) {
  if (snapshot === null || typeof snapshot !== 'object' || typeof snapshot.states !== 'object') {
    throw new TypeError('restore takes a snapshot (what Harness.snapshot() returns)');
  }
  for (const [name, { kind, entries }] of Object.entries(snapshot.states)) {
    const id = info.states.findIndex((s) => s.name === name && s.kind === kind);
    if (id < 0) {
      const declared = info.states.map((s) => `${s.name} (${s.kind})`).join(', ');
      throw new Error(
        `restore: the snapshot's ${kind} state \`${name}\` is not declared by ${info.name} (declared: ${declared})`,
      );
    }
    host.stores[id] = copyStore(kind, entries);
  }
  const timerMap = (timers) => new Map(timers.map(([t, k]) => [`${t}|${hex(k)}`, [t, k.slice()]]));
  host.timerSet = timerMap(snapshot.timers);
  host.processingTimers = timerMap(snapshot.processingTimers);
  host.processingTime = snapshot.processingTime;
  host.watermark = snapshot.watermark;
}

/** Packs records `{ key?, value, timestamp? }` (strings or bytes) into the contract's batch. */
export function packBatch(records) {
  const n = records.length;
  const timestamps = new BigInt64Array(n);
  const keyLens = new Int32Array(n);
  const valueLens = new Uint32Array(n);
  const parts = [];
  let total = 0;
  records.forEach((r, i) => {
    const key = bytes(r.key);
    const value = bytes(r.value ?? new Uint8Array(0));
    timestamps[i] = BigInt(r.timestamp ?? 0);
    keyLens[i] = key === null ? -1 : key.length;
    valueLens[i] = value.length;
    if (key !== null) parts.push(key);
    parts.push(value);
    total += (key ? key.length : 0) + value.length;
  });
  const data = new Uint8Array(total);
  let pos = 0;
  for (const p of parts) {
    data.set(p, pos);
    pos += p.length;
  }
  return { timestamps, keyLens, valueLens, data };
}

/** A window argument `{ start, end }` (bigints or integers) as the contract's record, with bigints. */
function windowArg(w) {
  if (w === null || typeof w !== 'object' || w.start === undefined || w.end === undefined) {
    throw new TypeError('expected a window { start, end }');
  }
  return { start: BigInt(w.start), end: BigInt(w.end) };
}

/** The host's timestamp of a window's output: end - 1. */
const windowTime = (w) => (w.end > MIN_TIMESTAMP ? w.end - 1n : w.end);

/**
 * Records of one key's window: a string or Uint8Array is a value (key: the
 * window's key, timestamp: the window's start); an object `{ key?, value,
 * timestamp? }` the same with its own fields.
 */
function windowRecords(key, window, records) {
  return Array.from(records, (r) =>
    typeof r === 'string' || r instanceof Uint8Array
      ? { key, value: r, timestamp: window.start }
      : { key: r.key === undefined ? key : r.key, value: r.value, timestamp: r.timestamp ?? window.start },
  );
}

/**
 * Runs an exported `operator` object (what keyed()/map()/... return)
 * against the fake host. Create with `Harness.open(operator, options)`.
 */
export class Harness {
  constructor(op, host, info) {
    this.op = op;
    this.host = host;
    this.info = info;
    this.closed = false;
  }

  /**
   * Describes and opens `op`. Options: `config` (object or [k, v] pairs;
   * non-string values are flattened as the host does: scalars in TOML
   * syntax, tables and arrays as JSON), `operatorId`, `subtaskIndex`,
   * `parallelism`, `maxParallelism`; `batchedState: false` leaves out the
   * batched value-state calls (`value-get-many`, `value-set-many`), as a
   * host before contract 0.1.3: then every state access is its own call
   * (to compare both paths). `restore`: a snapshot (`h.snapshot()`) the
   * host holds before `open`, as when a task restarts from a checkpoint:
   * states matched by name (one the snapshot lacks starts empty), timers,
   * the processing-time clock and the watermark. `op` is opened afresh (a
   * new instance): nothing of the guest survives but what the host kept;
   * a harness opened earlier on the same `op` is done. Throws (an Error
   * with the guest's message) if `open` fails.
   */
  static open(op, options = {}) {
    const bootstrap = new FakeHost([]);
    globalThis[HOST_KEY] = { backend: 'test', ...bootstrap };
    const info = op.describe();
    const host = new FakeHost(info.states);
    if (options.batchedState === false) {
      delete host.state.valueGetMany;
      delete host.state.valueSetMany;
    }
    if (options.restore !== undefined) restore(host, info, options.restore);
    const h = new Harness(op, host, info);
    h._bind();
    const cfg = options.config || {};
    const entries = (Array.isArray(cfg) ? cfg : Object.entries(cfg)).map(([k, v]) => [
      String(k),
      typeof v === 'string' ? v : typeof v === 'object' ? JSON.stringify(v) : String(v),
    ]);
    h._guest(() =>
      op.open({
        operatorId: options.operatorId ?? 'op',
        subtaskIndex: options.subtaskIndex ?? 0,
        parallelism: options.parallelism ?? 1,
        maxParallelism: options.maxParallelism ?? 128,
        config: entries,
      }),
    );
    return h;
  }

  _bind() {
    const host = this.host;
    globalThis[HOST_KEY] = {
      backend: 'test',
      state: host.state,
      timers: host.timers,
      log: host.log,
      metrics: host.metrics,
      package: { name: 'test', version: '0.0.0' },
    };
  }

  /** Calls the guest; a thrown string (the contract's err) becomes an Error with that message. */
  _guest(f) {
    this._bind();
    try {
      return f();
    } catch (e) {
      const err = new Error(typeof e === 'string' ? e : errorMessage(e));
      err.guest = true;
      throw err;
    }
  }

  _call(f) {
    const emitted = this._guest(f);
    const out = new Output();
    out.main.push(...readBatch(emitted.main, 'main'));
    for (const s of emitted.side) {
      for (const r of readBatch(s.records, `side ${s.tag}`)) out.sideRecords.push({ tag: s.tag, record: r });
    }
    return out;
  }

  /** Processes records `{ key?, value, timestamp? }` as one batch. */
  process(records) {
    const batch = packBatch(records);
    return this._call(() => this.op.process(batch));
  }

  /** Processes a batch given in the contract's layout. */
  processBatch(batch) {
    return this._call(() => this.op.process(batch));
  }

  /**
   * Advances the watermark: fires every timer at or before it (including
   * those registered while firing) in (time, key) order, then calls
   * `onWatermark`. Going back is an error; the same watermark is a no-op.
   */
  advanceWatermark(watermark) {
    const wm = BigInt(watermark);
    if (wm < this.host.watermark) throw new Error(`watermark ${wm} is behind the current watermark ${this.host.watermark}`);
    const out = new Output();
    if (wm === this.host.watermark) return out;
    this.host.watermark = wm;
    for (;;) {
      const due = this.host.sortedTimers()[0];
      if (!due || due[0] > wm) break;
      this.host.timerSet.delete(`${due[0]}|${hex(due[1])}`);
      out.extend(this._call(() => this.op.onTimer(due[1], due[0])));
    }
    out.extend(this._call(() => this.op.onWatermark(wm)));
    return out;
  }

  /** Processes records as one batch on input `input` (0 left, 1 right) of a two-input operator. */
  processInput(input, records) {
    const batch = packBatch(records);
    return this._call(() => this.op.processInput(input, batch));
  }

  /**
   * Moves the harness's processing-time clock (it starts at 0) forward by
   * `ms` and fires the processing-time timers now due, in (time, key) order.
   */
  advanceProcessingTime(ms) {
    const host = this.host;
    host.processingTime += BigInt(ms);
    const out = new Output();
    for (;;) {
      const due = [...host.processingTimers.values()]
        .filter((t) => t[0] <= host.processingTime)
        .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : compareBytes(a[1], b[1])))[0];
      if (!due) break;
      host.processingTimers.delete(`${due[0]}|${hex(due[1])}`);
      out.extend(this._call(() => this.op.onProcessingTimer(due[1], due[0])));
    }
    return out;
  }

  /** Calls `close`; twice is an error. */
  close() {
    if (this.closed) throw new Error('the operator is already closed');
    this.closed = true;
    return this._call(() => this.op.close());
  }

  /** End of bounded input, as the host does it: the final watermark (i64::MAX), then close. */
  finish() {
    const out = this.advanceWatermark(MAX_TIMESTAMP);
    out.extend(this.close());
    return out;
  }

  // -------------------------------------------------------------------------
  // Window functions (contract 0.1.3): the component's `window-function`
  // export, called as the host's window operator calls it.
  // -------------------------------------------------------------------------

  _window() {
    const wf = this.op.windowFunction;
    if (!wf) throw new Error('the operator object has no `windowFunction` (build.sh exports kind `none` for it)');
    return wf;
  }

  /** `window-function.kind`: 'none', 'aggregate' or 'process-window'. */
  windowKind() {
    return this._guest(() => this._window().kind());
  }

  _accumulators(call, got, n) {
    const list = Array.from(got);
    if (list.length !== n) throw new Error(`bad output (${call}): ${list.length} accumulators for ${n}`);
    return list.map((a, i) => {
      if (!(a instanceof Uint8Array)) throw new Error(`bad output (${call}): accumulator ${i} is not a Uint8Array`);
      return a.slice();
    });
  }

  /**
   * `window-function.add`: record i of `records` ({ key?, value, timestamp? })
   * into `accumulators[targets[i]]`; an accumulator is bytes, or null for a
   * new window's. Returns every accumulator after the adds (copies), checked
   * as the host checks them (as many as given).
   */
  windowAdd(accumulators, targets, records) {
    const accs = Array.from(accumulators, (a) => (a === null || a === undefined ? undefined : bytes(a)));
    const t = Uint32Array.from(targets);
    const batch = packBatch(records);
    const got = this._guest(() => this._window().add(accs, t, batch));
    return this._accumulators('add', got, accs.length);
  }

  /** `window-function.merge`: one accumulator (a copy) per [a, b] pair. */
  windowMerge(pairs) {
    const ps = Array.from(pairs, ([a, b]) => [bytes(a), bytes(b)]);
    const got = this._guest(() => this._window().merge(ps));
    return this._accumulators('merge', got, ps.length);
  }

  /** `window-function.get-result`: one result value (a copy) per { key, window, accumulator }. */
  windowGetResult(windows) {
    const ws = Array.from(windows, (w) => ({
      key: bytes(w.key),
      window: windowArg(w.window),
      accumulator: bytes(w.accumulator),
    }));
    const got = this._guest(() => this._window().getResult(ws));
    return this._accumulators('get-result', got, ws.length);
  }

  /**
   * `window-function.process-window` for `key`'s `window` with `records`
   * (values, or { key?, value, timestamp? }; see Harness.processWindow).
   * Returns the Output with every record's timestamp `end - 1`, as the host
   * emits them.
   */
  windowProcess(key, window, records) {
    const w = windowArg(window);
    const batch = packBatch(windowRecords(key, w, records));
    const out = this._call(() => this._window().processWindow(bytes(key), w, batch));
    const t = windowTime(w);
    for (const r of out.main) r.timestamp = t;
    for (const s of out.sideRecords) s.record.timestamp = t;
    return out;
  }

  /** Adds `records` to a new accumulator, `chunk` records per `add` call; the accumulator's bytes. */
  _accumulate(key, w, records, chunk) {
    if (!Number.isInteger(chunk) || chunk < 1) throw new TypeError(`chunk must be a positive integer, got ${chunk}`);
    const rs = windowRecords(key, w, records);
    if (rs.length === 0) return this.windowAdd([null], [], [])[0];
    let acc = null;
    for (let i = 0; i < rs.length; i += chunk) {
      const part = rs.slice(i, i + chunk);
      [acc] = this.windowAdd([acc], new Array(part.length).fill(0), part);
    }
    return acc;
  }

  _result(key, w, accumulator) {
    const [value] = this.windowGetResult([{ key, window: w, accumulator }]);
    return new OutputRecord(bytes(key), value, windowTime(w));
  }

  _expectKind(kind) {
    const k = this.windowKind();
    if (k !== kind) throw new Error(`expected a window function of kind ${kind}, but its kind is ${k}`);
  }

  /**
   * Runs the aggregate `fn` (what aggregate() returns) over one window as
   * the host does, through the component's export code: opens it
   * (`options` as Harness.open's), adds `records` to a new accumulator
   * `chunk` at a time, the accumulator round-tripped as bytes between the
   * calls, then gets the result. `records`: values (strings or bytes; key:
   * `key`, timestamp: the window's start) or { key?, value, timestamp? }.
   * Returns the record the host emits: an OutputRecord with key `key`, the
   * result as its value and the timestamp `end - 1`. A failing call throws
   * an Error with the guest's message.
   */
  static aggregate(fn, key, window, records, chunk = 1, options = {}) {
    const h = Harness.open(fn, options);
    h._expectKind('aggregate');
    const w = windowArg(window);
    return h._result(key, w, h._accumulate(key, w, records, chunk));
  }

  /**
   * As `aggregate`, but `recordsA` and `recordsB` each go into their own
   * accumulator (`options.chunk` per add, default 1), which `merge`
   * combines (as when a record joins two session windows) before the
   * result.
   */
  static mergedAggregate(fn, key, window, recordsA, recordsB, options = {}) {
    const h = Harness.open(fn, options);
    h._expectKind('aggregate');
    const w = windowArg(window);
    const chunk = options.chunk ?? 1;
    const a = h._accumulate(key, w, recordsA, chunk);
    const b = h._accumulate(key, w, recordsB, chunk);
    const [merged] = h.windowMerge([[a, b]]);
    return h._result(key, w, merged);
  }

  /**
   * Runs the process-window function `fn` (what processWindow() returns) on
   * one fired window: opens it (`options` as Harness.open's) and calls
   * `process-window` with `records` (as for `aggregate`). Returns the
   * Output, every record with the timestamp `end - 1` as the host emits it.
   */
  static processWindow(fn, key, window, records, options = {}) {
    const h = Harness.open(fn, options);
    h._expectKind('process-window');
    return h.windowProcess(key, window, records);
  }

  /**
   * A checkpoint of what the host keeps for this operator, deep-copied:
   * `{ states: { [name]: { kind, entries } }, timers, processingTimers,
   * processingTime, watermark }`, entries as the host keeps them (a Map
   * from the key's hex to the value, the list of elements, or a Map from
   * the user key's hex to the value), timers as [time, key] in firing
   * order. Taken between calls, as the host takes one at a barrier between
   * batches (the SDK has written every batch's state back by then); two
   * snapshots are `assert.deepEqual` when they hold the same bytes. Continue
   * from it with `Harness.open(op, { restore: snapshot })`.
   */
  snapshot() {
    const host = this.host;
    const states = {};
    this.info.states.forEach((s, id) => {
      states[s.name] = { kind: s.kind, entries: copyStore(s.kind, host.stores[id]) };
    });
    const copyTimers = (timers) => timers.map(([t, k]) => [t, k.slice()]);
    return {
      states,
      timers: copyTimers(host.sortedTimers()),
      processingTimers: copyTimers(sortTimers([...host.processingTimers.values()])),
      processingTime: host.processingTime,
      watermark: host.watermark,
    };
  }

  /** The current watermark. */
  currentWatermark() {
    return this.host.watermark;
  }

  /** Registered timers as [time (bigint), key (Uint8Array)], in firing order. */
  timers() {
    return this.host.sortedTimers().map(([t, k]) => [t, k.slice()]);
  }

  /**
   * What the component's `migrate-state` export returns for `old` (bytes or
   * a string), one stored value of state `name` written by operator version
   * `fromVersion`: the state's `migrate` result (a copy), or `old` unchanged
   * for a state without one. Needs no open operator (the host calls it
   * before `open`). A failed migration throws an Error with the message the
   * upgrade would show.
   */
  migrateState(name, fromVersion, old) {
    const migrated = this._guest(() => this.op.migrateState(name, fromVersion, bytes(old)));
    return migrated.slice();
  }

  /**
   * Migrates everything this harness stores as `weir upgrade` does when the
   * old operator was at `fromVersion`: every value, list element and map
   * value (not map user keys) of every declared state; nothing when
   * `fromVersion` is this operator's version. Atomic: after a failure (an
   * Error with the upgrade's message) the stored state is as it was.
   */
  migrateStoredState(fromVersion) {
    if (fromVersion === this.info.version) return;
    const stores = this.info.states.map((s, id) => {
      const store = this.host.stores[id];
      const migrate = (v) => this.migrateState(s.name, fromVersion, v);
      const entries = [...store.entries()];
      if (s.kind === 'value') return new Map(entries.map(([k, v]) => [k, migrate(v)]));
      if (s.kind === 'list') return new Map(entries.map(([k, es]) => [k, es.map(migrate)]));
      const values = (m) => new Map([...m.entries()].map(([uk, v]) => [uk, migrate(v)]));
      return new Map(entries.map(([k, m]) => [k, values(m)]));
    });
    this.host.stores = stores;
  }

  _stateId(name) {
    const id = this.info.states.findIndex((s) => s.name === name);
    if (id < 0) throw new Error(`state \`${name}\` is not declared`);
    return id;
  }

  /** The value state `name` of `key`, decoded with `codec` (undefined if unset). */
  valueState(name, key, codec) {
    const v = this.host.stores[this._stateId(name)].get(hex(bytes(key)));
    return v === undefined ? undefined : codec.decode(v);
  }

  /** The raw stored bytes of value state `name` for `key`. */
  rawValueState(name, key) {
    const v = this.host.stores[this._stateId(name)].get(hex(bytes(key)));
    return v === undefined ? undefined : v.slice();
  }

  /** Stores raw bytes (or a string, as UTF-8) in value state `name` for `key`, e.g. as an older version wrote them. */
  setRawValueState(name, key, value) {
    const id = this._stateId(name);
    if (this.info.states[id].kind !== 'value') throw new Error(`state \`${name}\` is not a value state`);
    this.host.stores[id].set(hex(bytes(key)), bytes(value));
  }

  /** The list state `name` of `key`, each element decoded with `codec`. */
  listState(name, key, codec) {
    const es = this.host.stores[this._stateId(name)].get(hex(bytes(key))) || [];
    return es.map((e) => codec.decode(e));
  }

  /** The map state `name` of `key` as [userKey, value] pairs in user key byte order, decoded with the codecs. */
  mapState(name, key, keyCodec, valueCodec) {
    const m = this.host.stores[this._stateId(name)].get(hex(bytes(key)));
    if (!m) return [];
    return [...m.entries()]
      .map(([uk, v]) => [unhex(uk), v])
      .sort((a, b) => compareBytes(a[0], b[0]))
      .map(([uk, v]) => [keyCodec.decode(uk), valueCodec.decode(v)]);
  }

  /** The keys holding anything in state `name`, in byte order. */
  stateKeys(name) {
    return [...this.host.stores[this._stateId(name)].keys()].map(unhex).sort(compareBytes);
  }

  /**
   * How many batched value-state calls (`value-get-many`, `value-set-many`)
   * the operator made: what `keyed` and `keyedCo` use instead of one call
   * per record (a batch: one read and one write per value state used).
   */
  batchedStateCalls() {
    return this.host.batchedCalls;
  }

  /**
   * How many single-key state calls (`value-get`, `value-set`, `clear`,
   * list and map calls) the operator made.
   */
  stateCalls() {
    return this.host.singleCalls;
  }

  /** Log lines as [level, message]. */
  logs() {
    return this.host.logs.slice();
  }

  /** The counter `name` (0n if never added to). */
  counter(name) {
    return this.host.counters.get(name) || 0n;
  }

  /** The gauge `name`, or undefined. */
  gauge(name) {
    return this.host.gauges.get(name);
  }
}

export { MAX_TIMESTAMP, MIN_TIMESTAMP };
