// Types of weir-sdk.js: write Weir stream operators in JavaScript or TypeScript.
// See README.md beside this file and wit/operator.wit.

/** i64::MAX: the host's final watermark at the end of bounded input. */
export const MAX_TIMESTAMP: bigint;
/** i64::MIN: the watermark before the first one. */
export const MIN_TIMESTAMP: bigint;

/** Event time: milliseconds since the Unix epoch, as the contract's s64. */
export type Timestamp = bigint;
/** A timestamp argument: a bigint, or an integer number. */
export type TimestampLike = bigint | number;
/** Bytes for an output key or value: bytes, a string (written as UTF-8), or parts written back to back. */
export type BytesLike = Uint8Array | string | ReadonlyArray<Uint8Array | string | number | bigint>;

/** An operator error; its message is what the host reports. Any thrown value fails the call the same way. */
export class WeirError extends Error {
  constructor(message: string);
}
/** The message the host gets for a thrown value. */
export function errorMessage(e: unknown): string;

/** UTF-8 that works on every backend (QuickJS has no TextEncoder/TextDecoder). */
export const utf8: {
  encode(s: string): Uint8Array;
  /** Invalid UTF-8 becomes U+FFFD unless `fatal`, which throws. */
  decode(bytes: Uint8Array, fatal?: boolean): string;
};

/** How a state value becomes bytes. */
export interface Codec<T> {
  readonly name: string;
  encode(value: T): Uint8Array;
  /** Throws a WeirError for bytes that are not an encoding of T. */
  decode(bytes: Uint8Array): T;
}

/** The shared state encoding of wit/README.md (sdk/src/codec.rs is the reference); `json` is JS-only. */
export const codecs: {
  readonly u8: Codec<number>;
  readonly u16: Codec<number>;
  readonly u32: Codec<number>;
  readonly u64: Codec<bigint>;
  readonly i8: Codec<number>;
  readonly i16: Codec<number>;
  readonly i32: Codec<number>;
  readonly i64: Codec<bigint>;
  readonly f32: Codec<number>;
  readonly f64: Codec<number>;
  readonly bool: Codec<boolean>;
  readonly string: Codec<string>;
  readonly bytes: Codec<Uint8Array>;
  readonly unit: Codec<null>;
  readonly json: Codec<unknown>;
};

export type StateKind = 'value' | 'list' | 'map';
/**
 * Rewrites one stored value (a value, a list element, a map value) written
 * by operator version `fromVersion`, on `weir upgrade`: gets its bytes as
 * the old version encoded them, returns the bytes this version reads. Runs
 * before `open`; a throw aborts the upgrade.
 */
export type MigrateFn = (fromVersion: string, old: Uint8Array) => Uint8Array;
export interface StateDescriptor {
  readonly name: string;
  readonly kind: StateKind;
  /** Time to live in ms of processing time, enforced by the host. */
  readonly ttlMs?: number | bigint;
  /** How values an older operator version stored become this version's; none: kept as they are. */
  readonly migrate?: MigrateFn;
}
export interface StateOptions {
  ttlMs?: number | bigint;
  migrate?: MigrateFn;
}
/** State descriptors for `states` (a state's id is its index there). */
export const state: {
  value(name: string, options?: StateOptions): StateDescriptor;
  list(name: string, options?: StateOptions): StateDescriptor;
  map(name: string, options?: StateOptions): StateDescriptor;
};

/** Where state accesses take their key from: a KeyedContext, or explicitKey(). */
export interface KeyScope {
  readonly key: Uint8Array;
}
export function explicitKey(key: Uint8Array | string): KeyScope;

/**
 * One value per key. In a `keyed`/`keyedCo` batch, the first `get` reads the
 * state for all the batch's keys in one host call, and changes are written
 * back in one call at the end of the batch (same results as per-record calls).
 */
export class ValueState<T> {
  readonly id: number;
  readonly name: string;
  get(scope: KeyScope): T | undefined;
  set(scope: KeyScope, value: T): void;
  clear(scope: KeyScope): void;
}
export class ListState<T> {
  readonly id: number;
  readonly name: string;
  get(scope: KeyScope): T[];
  add(scope: KeyScope, element: T): void;
  update(scope: KeyScope, elements: Iterable<T>): void;
  clear(scope: KeyScope): void;
}
export class MapState<K, V> {
  readonly id: number;
  readonly name: string;
  get(scope: KeyScope, userKey: K): V | undefined;
  contains(scope: KeyScope, userKey: K): boolean;
  put(scope: KeyScope, userKey: K, value: V): void;
  remove(scope: KeyScope, userKey: K): void;
  /** Ordered by the user keys' encoded bytes. */
  entries(scope: KeyScope): Array<[K, V]>;
  isEmpty(scope: KeyScope): boolean;
  clear(scope: KeyScope): void;
}

/** The operator's `config` table (strings as they are, scalars in TOML syntax, tables/arrays as JSON). */
export class Config {
  constructor(entries?: Array<[string, string]>);
  getStr(key: string): string | undefined;
  requireStr(key: string): string;
  getBool(key: string): boolean | undefined;
  getU64(key: string): bigint | undefined;
  getI64(key: string): bigint | undefined;
  /** A safe-integer number. */
  getInt(key: string): number | undefined;
  getF64(key: string): number | undefined;
  getJson(key: string): unknown;
  entries(): Array<[string, string]>;
}

export class OpenContext {
  readonly operatorId: string;
  readonly subtaskIndex: number;
  readonly parallelism: number;
  readonly maxParallelism: number;
  readonly config: Config;
  readonly states: ReadonlyArray<StateDescriptor>;
  valueState<T>(name: string, codec: Codec<T>): ValueState<T>;
  listState<T>(name: string, codec: Codec<T>): ListState<T>;
  mapState<K, V>(name: string, keyCodec: Codec<K>, valueCodec: Codec<V>): MapState<K, V>;
}

/** An input record: views into the batch buffer, valid during the call (copy with .slice() to keep). */
export class Record {
  readonly key: Uint8Array | null;
  readonly value: Uint8Array;
  readonly timestamp: Timestamp;
  keyString(): string | null;
  valueString(): string;
  withValue<V>(value: V): { key: Uint8Array | null; value: V; timestamp: Timestamp };
  withKey<K>(key: K): { key: K; value: Uint8Array; timestamp: Timestamp };
}

/** An output record for map(). A missing timestamp keeps the input's; a missing key means none. */
export interface OutRecord {
  key?: BytesLike | null;
  value: BytesLike;
  timestamp?: TimestampLike;
}

export class BatchBuilder {
  readonly length: number;
  push(key: BytesLike | null, value: BytesLike, timestamp: TimestampLike): void;
  pushRecord(record: OutRecord & { timestamp: TimestampLike }): void;
  clear(): void;
}

/** The outputs of one call. */
export class Collector {
  readonly main: BatchBuilder;
  collect(key: BytesLike | null, value: BytesLike, timestamp: TimestampLike): void;
  /** Side output `tag`: edges `from = "<operator-id>:<tag>"`. */
  output(tag: string, key: BytesLike | null, value: BytesLike, timestamp: TimestampLike): void;
}

/** A process-window function's outputs: the timestamp may be left out (the host gives every record `end - 1`). */
export interface WindowCollector extends Collector {
  collect(key: BytesLike | null, value: BytesLike, timestamp?: TimestampLike): void;
  output(tag: string, key: BytesLike | null, value: BytesLike, timestamp?: TimestampLike): void;
}

/** The current key, time, timers and outputs of a keyed call; reused per record, do not keep it. */
export class KeyedContext implements KeyScope {
  readonly key: Uint8Array;
  readonly timestamp: Timestamp;
  readonly out: Collector;
  keyString(): string;
  currentWatermark(): Timestamp;
  registerEventTimeTimer(time: TimestampLike): void;
  deleteEventTimeTimer(time: TimestampLike): void;
  /** The subtask's wall clock in ms since the epoch (contract 0.1.2). */
  currentProcessingTime(): Timestamp;
  /** A processing-time timer for the current key, firing `onProcessingTimer`; checkpointed. */
  registerProcessingTimeTimer(time: TimestampLike): void;
  deleteProcessingTimeTimer(time: TimestampLike): void;
  collect(key: BytesLike | null, value: BytesLike, timestamp: TimestampLike): void;
  output(tag: string, key: BytesLike | null, value: BytesLike, timestamp: TimestampLike): void;
}

export const log: {
  trace(...message: unknown[]): void;
  debug(...message: unknown[]): void;
  info(...message: unknown[]): void;
  warn(...message: unknown[]): void;
  error(...message: unknown[]): void;
};
export const metrics: {
  counterAdd(name: string, delta?: number | bigint): void;
  gaugeSet(name: string, value: number): void;
};
export function currentWatermark(): Timestamp;

/** Metadata; `name`/`version` default to package.json's (set by build.sh). */
export interface Meta {
  name?: string;
  version?: string;
}
export interface WithStates extends Meta {
  states?: ReadonlyArray<StateDescriptor>;
}
/** A definition is an object (used as the instance) or a class (instantiated at open; metadata as static fields). */
type Def<T> = T | (Meta & WithStates & (new () => T));

export interface MapFunction extends Meta {
  open?(ctx: OpenContext): void;
  map(record: Record): OutRecord;
}
export interface FlatMapFunction extends Meta {
  open?(ctx: OpenContext): void;
  flatMap(record: Record, out: Collector): void;
}
export interface FilterFunction extends Meta {
  open?(ctx: OpenContext): void;
  filter(record: Record): boolean;
}
export interface KeyedProcessFunction extends WithStates {
  open?(ctx: OpenContext): void;
  processElement(record: Record, ctx: KeyedContext): void;
  onTimer?(time: Timestamp, ctx: KeyedContext): void;
  onProcessingTimer?(time: Timestamp, ctx: KeyedContext): void;
  onWatermark?(watermark: Timestamp, out: Collector): void;
  close?(out: Collector): void;
}
/** Two keyed inputs with shared state and timers (edges with `input = "left"` / `"right"`). */
export interface KeyedCoProcessFunction extends WithStates {
  open?(ctx: OpenContext): void;
  processElement1(record: Record, ctx: KeyedContext): void;
  processElement2(record: Record, ctx: KeyedContext): void;
  onTimer?(time: Timestamp, ctx: KeyedContext): void;
  onProcessingTimer?(time: Timestamp, ctx: KeyedContext): void;
  onWatermark?(watermark: Timestamp, out: Collector): void;
  close?(out: Collector): void;
}
export interface BatchOperator extends WithStates {
  keyed?: boolean;
  open?(ctx: OpenContext): void;
  process(records: Record[], out: Collector): void;
  onTimer?(key: Uint8Array, time: Timestamp, out: Collector): void;
  onWatermark?(watermark: Timestamp, out: Collector): void;
  close?(out: Collector): void;
}

/** A window `[start, end)` in ms of event time, as the host fired it. */
export class Window {
  constructor(start: Timestamp, end: Timestamp);
  /** The first millisecond in the window. */
  readonly start: Timestamp;
  /** The first millisecond after it. */
  readonly end: Timestamp;
  /** `end - 1`: the timestamp the host gives the window's output (Flink's maxTimestamp). */
  maxTimestamp(): Timestamp;
  /** True for a count window's (`type = "global"`): MIN_TIMESTAMP to MAX_TIMESTAMP. */
  isGlobal(): boolean;
}

/**
 * An aggregate window function (Flink's AggregateFunction) over accumulators
 * of type A, which the host stores as bytes (`accumulator` codec, default
 * `codecs.json`). `add` and `merge` return the accumulator, or mutate the
 * first argument and return nothing.
 */
export interface AggregateFunction<A = any> extends Meta {
  /** The accumulator's codec; a class gives it as a static field. Default: codecs.json. */
  accumulator?: Codec<A>;
  open?(ctx: OpenContext): void;
  createAccumulator(): A;
  add(accumulator: A, record: Record): A | void;
  /** Two accumulators as one (session windows); without it, a session window fails. */
  merge?(a: A, b: A): A | void;
  /** The fired window's result; the host emits it with `key` and the timestamp `window.end - 1`. */
  getResult(key: Uint8Array, window: Window, accumulator: A): Uint8Array | string;
}

/** A process-window function (Flink's ProcessWindowFunction). */
export interface ProcessWindowFunction extends Meta {
  open?(ctx: OpenContext): void;
  /** All records of `key`'s fired `window`, in arrival order (views valid during the call). */
  processWindow(key: Uint8Array, window: Window, records: Record[], out: WindowCollector): void;
}

export type WindowFunctionKind = 'none' | 'aggregate' | 'process-window';

/** The contract's `window-function` interface (0.1.3), as build.sh exports it. */
export interface WindowFunctionExport {
  kind(): WindowFunctionKind;
  add(accumulators: Array<Uint8Array | null | undefined>, targets: ArrayLike<number>, records: unknown): Uint8Array[];
  merge(pairs: Array<[Uint8Array, Uint8Array]>): Uint8Array[];
  getResult(windows: Array<{ key: Uint8Array; window: { start: unknown; end: unknown }; accumulator: Uint8Array }>): Uint8Array[];
  processWindow(key: Uint8Array, window: { start: unknown; end: unknown }, records: unknown): unknown;
}

/**
 * The contract's `operator` interface, as the component exports it. Export it as `operator`;
 * build.sh exports its `migrateState` as the `migration` interface.
 */
export interface OperatorExport {
  describe(): unknown;
  open(ctx: unknown): void;
  process(input: unknown): unknown;
  onTimer(key: Uint8Array, time: unknown): unknown;
  /** `processing-time.on-processing-timer` (build.sh exports it). */
  onProcessingTimer(key: Uint8Array, time: unknown): unknown;
  /** `two-input.process-input` (build.sh exports it): input 1 needs `keyedCo`. */
  processInput(input: number, records: unknown): unknown;
  onWatermark(watermark: unknown): unknown;
  close(): unknown;
  /** `migrate-state`: the state's `migrate` result, or `old` for a state without one. */
  migrateState(state: string, fromVersion: string, old: Uint8Array): Uint8Array;
  /**
   * `window-function` (build.sh exports it): kind `none` for every operator
   * but those of aggregate() and processWindow(), whose `operator` answers
   * records and timers with an error (watermarks and close emit nothing).
   */
  windowFunction: WindowFunctionExport;
}

export function map(def: Def<MapFunction>): OperatorExport;
export function flatMap(def: Def<FlatMapFunction>): OperatorExport;
export function filter(def: Def<FilterFunction>): OperatorExport;
export function keyed(def: Def<KeyedProcessFunction>): OperatorExport;
export function keyedCo(def: Def<KeyedCoProcessFunction>): OperatorExport;
export function operator(def: Def<BatchOperator>): OperatorExport;
/** A window function computing per-window aggregates (use it in an [[operator]] with a `window` table). */
export function aggregate<A = any>(def: Def<AggregateFunction<A>>): OperatorExport;
/** A window function getting each fired window's records at once (use it in an [[operator]] with a `window` table). */
export function processWindow(def: Def<ProcessWindowFunction>): OperatorExport;
