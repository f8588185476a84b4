//! The traits a Rust operator implements, and the adapters that run them.
//!
//! Owns the low-level [`Operator`] trait (whole batches in, [`Emitted`] out:
//! the WIT `operator` interface minus the plumbing) and Flink's function
//! traits: [`MapFunction`], [`FlatMapFunction`], [`FilterFunction`] and
//! [`KeyedProcessFunction`] with its [`KeyedContext`]. The adapters [`Map`],
//! [`FlatMap`], [`Filter`] and [`Keyed`] turn a function into an `Operator`:
//! they decode the packed input batch once (records borrow from it), call the
//! function per record and write the output into one packed buffer.
//!
//! Invariants: adapters never allocate per record (outputs are appended to
//! the collector's buffers, which keep their capacity across calls); a keyed
//! function always runs with a key (a record without one is an error); the
//! output of a failed call is discarded.

use crate::Error;
use crate::backend;
use crate::bindings::exports::weir::operator::window_function::Accumulated;
use crate::bindings::weir::operator::types::{Batch, Emitted};
use crate::context::OpenContext;
use crate::record::{BatchBuilder, Collector, Record};
use crate::state::{KeyScope, StateDescriptor, StateKind, explain};
use crate::window::{Window, WindowKind, not_a_window_function};

/// The low-level operator interface: whole batches, full control.
///
/// Implement it directly when per-record adapters are in the way, e.g. an
/// identity that returns its input batch without touching it. Every
/// associated item except `open` and `process` has a default.
///
/// `NAME` and `VERSION` left empty mean the UDF crate's package name and
/// version (the export macro fills them in from Cargo).
pub trait Operator: Sized + 'static {
    /// A human-readable name for `weir inspect`; empty means the crate name.
    const NAME: &'static str = "";
    /// The operator's own version; empty means the crate version.
    const VERSION: &'static str = "";
    /// True if the operator must run on a keyed stream.
    const KEYED: bool = false;
    /// The keyed states the operator uses. A state's id is its index here.
    const STATES: &'static [StateDescriptor] = &[];

    /// Creates the instance, once, before any record.
    fn open(ctx: &OpenContext) -> Result<Self, Error>;

    /// Processes one batch of records.
    fn process(&mut self, input: Batch) -> Result<Emitted, Error>;

    /// Processes one batch that arrived on input `input` of an operator
    /// with two inputs (0: left, as `process`; 1: right). The default takes
    /// input 0 only.
    fn process_input(&mut self, input: u32, batch: Batch) -> Result<Emitted, Error> {
        if input != 0 {
            crate::bail!(
                "this operator has one input, but a batch arrived on input {input} \
                 (`input = \"right\"` in the job spec needs a two-input function)"
            );
        }
        self.process(batch)
    }

    /// A timer registered for `key` fired at `time`.
    fn on_timer(&mut self, key: Vec<u8>, time: i64) -> Result<Emitted, Error> {
        let _ = (key, time);
        Ok(Emitted::empty())
    }

    /// A processing-time timer registered for `key` fired at `time`.
    fn on_processing_timer(&mut self, key: Vec<u8>, time: i64) -> Result<Emitted, Error> {
        let _ = (key, time);
        Ok(Emitted::empty())
    }

    /// The watermark advanced to `watermark` (after due timers fired).
    fn on_watermark(&mut self, watermark: i64) -> Result<Emitted, Error> {
        let _ = watermark;
        Ok(Emitted::empty())
    }

    /// Called once after the last record; may emit final records.
    fn close(&mut self) -> Result<Emitted, Error> {
        Ok(Emitted::empty())
    }

    /// What the operator is as a window function (contract 0.1.3): `None`
    /// but for the adapters [`Aggregate`](crate::Aggregate) and
    /// [`ProcessWindow`](crate::ProcessWindow), which implement the
    /// `window_*` calls below.
    const WINDOW_KIND: WindowKind = WindowKind::None;

    /// WIT `window-function.add`: record i of `records` into
    /// `accumulators[targets[i]]` (`None`: a new window); returns every
    /// accumulator after the adds.
    fn window_add(
        &mut self,
        accumulators: Vec<Option<Vec<u8>>>,
        targets: Vec<u32>,
        records: Batch,
    ) -> Result<Vec<Vec<u8>>, Error> {
        let _ = (accumulators, targets, records);
        Err(not_a_window_function())
    }

    /// WIT `window-function.merge`: one accumulator per pair.
    fn window_merge(&mut self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<Vec<u8>>, Error> {
        let _ = pairs;
        Err(not_a_window_function())
    }

    /// WIT `window-function.get-result`: one value per fired window.
    fn window_results(&mut self, windows: Vec<Accumulated>) -> Result<Vec<Vec<u8>>, Error> {
        let _ = windows;
        Err(not_a_window_function())
    }

    /// WIT `window-function.process-window`: all records of a fired window.
    fn process_window(
        &mut self,
        key: Vec<u8>,
        window: Window,
        records: Batch,
    ) -> Result<Emitted, Error> {
        let _ = (key, window, records);
        Err(not_a_window_function())
    }
}

/// One record in, one record out (Flink's `MapFunction`).
///
/// The output may borrow from the input record *or from `self`*: keep a
/// buffer in the operator, fill it, and return a record pointing at it, so
/// mapping allocates nothing per record.
///
/// ```
/// use weir_sdk::{Error, MapFunction, OpenContext, Record};
///
/// struct Reverse {
///     buf: Vec<u8>,
/// }
///
/// impl MapFunction for Reverse {
///     fn open(_ctx: &OpenContext) -> Result<Self, Error> {
///         Ok(Reverse { buf: Vec::new() })
///     }
///
///     fn map<'a>(&'a mut self, record: Record<'a>) -> Result<Record<'a>, Error> {
///         self.buf.clear();
///         self.buf.extend(record.value.iter().rev());
///         Ok(record.with_value(&self.buf))
///     }
/// }
/// ```
pub trait MapFunction: Sized + 'static {
    /// As [`Operator::NAME`].
    const NAME: &'static str = "";
    /// As [`Operator::VERSION`].
    const VERSION: &'static str = "";

    /// Creates the instance, once, before any record.
    fn open(ctx: &OpenContext) -> Result<Self, Error>;

    /// Maps one record.
    fn map<'a>(&'a mut self, record: Record<'a>) -> Result<Record<'a>, Error>;
}

/// One record in, zero or more out (Flink's `FlatMapFunction`).
pub trait FlatMapFunction: Sized + 'static {
    /// As [`Operator::NAME`].
    const NAME: &'static str = "";
    /// As [`Operator::VERSION`].
    const VERSION: &'static str = "";

    /// Creates the instance, once, before any record.
    fn open(ctx: &OpenContext) -> Result<Self, Error>;

    /// Emits any number of records for `record` into `out`.
    fn flat_map(&mut self, record: Record<'_>, out: &mut Collector) -> Result<(), Error>;
}

/// Keeps the records for which it returns true (Flink's `FilterFunction`).
pub trait FilterFunction: Sized + 'static {
    /// As [`Operator::NAME`].
    const NAME: &'static str = "";
    /// As [`Operator::VERSION`].
    const VERSION: &'static str = "";

    /// Creates the instance, once, before any record.
    fn open(ctx: &OpenContext) -> Result<Self, Error>;

    /// True to keep `record`.
    fn filter(&mut self, record: &Record<'_>) -> Result<bool, Error>;
}

/// Per-key logic with keyed state and event-time timers (Flink's
/// `KeyedProcessFunction`). Runs on a keyed stream only.
///
/// State handles come from [`OpenContext::value_state`] and friends in
/// `open`; their methods take the [`KeyedContext`], whose key scopes the
/// access: the current record's key in `process_element`, the timer's key in
/// `on_timer`.
pub trait KeyedProcessFunction: Sized + 'static {
    /// As [`Operator::NAME`].
    const NAME: &'static str = "";
    /// As [`Operator::VERSION`].
    const VERSION: &'static str = "";
    /// The keyed states the function uses. A state's id is its index here.
    const STATES: &'static [StateDescriptor] = &[];

    /// Creates the instance, once, before any record.
    fn open(ctx: &OpenContext) -> Result<Self, Error>;

    /// Processes one record; `ctx.key()` is its key.
    fn process_element(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error>;

    /// A timer fired: `ctx.key()` is the key it was registered for and
    /// `ctx.timestamp()` its time (`time`, which output records usually carry).
    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let _ = (time, ctx);
        Ok(())
    }

    /// A processing-time timer fired: `ctx.key()` is its key, `time` the
    /// time it was registered for.
    fn on_processing_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let _ = (time, ctx);
        Ok(())
    }

    /// The watermark advanced (after due timers fired). No key is current here.
    fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), Error> {
        let _ = (watermark, out);
        Ok(())
    }

    /// Called once after the last record. No key is current here.
    fn close(&mut self, out: &mut Collector) -> Result<(), Error> {
        let _ = out;
        Ok(())
    }
}

/// Per-key logic over two keyed inputs with shared keyed state and
/// timers (Flink's `KeyedCoProcessFunction`): the building block of joins.
/// Edges name the input they feed (`input = "left"` calls
/// `process_element1`, `input = "right"` `process_element2`); both are
/// keyed by the operator's `key_by`, so records of one key from either side
/// meet in the same state.
pub trait KeyedCoProcessFunction: Sized + 'static {
    /// As [`Operator::NAME`].
    const NAME: &'static str = "";
    /// As [`Operator::VERSION`].
    const VERSION: &'static str = "";
    /// The keyed states the function uses. A state's id is its index here.
    const STATES: &'static [StateDescriptor] = &[];

    /// Creates the instance, once, before any record.
    fn open(ctx: &OpenContext) -> Result<Self, Error>;

    /// Processes one record of the left input (0).
    fn process_element1(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error>;

    /// Processes one record of the right input (1).
    fn process_element2(
        &mut self,
        record: Record<'_>,
        ctx: &mut KeyedContext<'_>,
    ) -> Result<(), Error>;

    /// A timer fired, as [`KeyedProcessFunction::on_timer`].
    fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let _ = (time, ctx);
        Ok(())
    }

    /// A processing-time timer fired, as
    /// [`KeyedProcessFunction::on_processing_timer`].
    fn on_processing_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
        let _ = (time, ctx);
        Ok(())
    }

    /// The watermark (the minimum over both inputs) advanced.
    fn on_watermark(&mut self, watermark: i64, out: &mut Collector) -> Result<(), Error> {
        let _ = (watermark, out);
        Ok(())
    }

    /// Called once after the last record of both inputs.
    fn close(&mut self, out: &mut Collector) -> Result<(), Error> {
        let _ = out;
        Ok(())
    }
}

/// The current key, time, timers and outputs of a [`KeyedProcessFunction`]
/// call (Flink's `Context` / `OnTimerContext`).
pub struct KeyedContext<'a> {
    key: &'a [u8],
    timestamp: i64,
    out: &'a mut Collector,
}

impl<'a> KeyedContext<'a> {
    /// The current key: the record's, or the firing timer's.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The record's timestamp, or the firing timer's time.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The current event-time watermark of this subtask.
    pub fn current_watermark(&self) -> i64 {
        backend::current_watermark()
    }

    /// Registers an event-time timer for the current key; it fires through
    /// `on_timer` once the watermark reaches `time`. Registering the same
    /// timer twice is a no-op.
    pub fn register_event_time_timer(&mut self, time: i64) -> Result<(), Error> {
        backend::register_event_timer(self.key, time)
            .map_err(|e| Error::new(format!("register timer at {time}: {}", explain(e))))
    }

    /// Deletes the current key's timer at `time`, if registered.
    pub fn delete_event_time_timer(&mut self, time: i64) -> Result<(), Error> {
        backend::delete_event_timer(self.key, time)
            .map_err(|e| Error::new(format!("delete timer at {time}: {}", explain(e))))
    }

    /// The subtask's wall clock, ms since the epoch (in the harness, its
    /// clock: [`crate::testing::Harness::advance_processing_time`]).
    pub fn current_processing_time(&self) -> i64 {
        backend::current_processing_time()
    }

    /// Registers a processing-time timer for the current key; it fires
    /// through `on_processing_timer` once the wall clock reaches `time`. It
    /// is checkpointed with the state (after a restore, a timer already due
    /// fires at once). Registering the same timer twice is a no-op.
    pub fn register_processing_time_timer(&mut self, time: i64) -> Result<(), Error> {
        backend::register_processing_timer(self.key, time).map_err(|e| {
            Error::new(format!(
                "register processing-time timer at {time}: {}",
                explain(e)
            ))
        })
    }

    /// Deletes the current key's processing-time timer at `time`, if registered.
    pub fn delete_processing_time_timer(&mut self, time: i64) -> Result<(), Error> {
        backend::delete_processing_timer(self.key, time).map_err(|e| {
            Error::new(format!(
                "delete processing-time timer at {time}: {}",
                explain(e)
            ))
        })
    }

    /// Emits `record` on the main output.
    pub fn collect(&mut self, record: Record<'_>) {
        self.out.collect(record);
    }

    /// Emits a record on the main output with the value written in place
    /// (see [`Collector::collect_with`]).
    pub fn collect_with<R>(
        &mut self,
        key: Option<&[u8]>,
        timestamp: i64,
        write_value: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        self.out.collect_with(key, timestamp, write_value)
    }

    /// Emits `record` on the side output `tag` (Flink's `ctx.output`).
    pub fn output(&mut self, tag: &str, record: Record<'_>) {
        self.out.output(tag, record);
    }

    /// The collector itself.
    pub fn collector(&mut self) -> &mut Collector {
        self.out
    }
}

impl KeyScope for KeyedContext<'_> {
    fn current_key(&self) -> &[u8] {
        self.key
    }
}

/// Runs a [`MapFunction`] as an [`Operator`].
pub struct Map<T> {
    inner: T,
}

/// Runs a [`FlatMapFunction`] as an [`Operator`].
pub struct FlatMap<T> {
    inner: T,
    out: Collector,
}

/// Runs a [`FilterFunction`] as an [`Operator`].
pub struct Filter<T> {
    inner: T,
    /// Which records of the current batch to keep; reused across batches.
    keep: Vec<bool>,
}

/// Runs a [`KeyedProcessFunction`] as an [`Operator`].
pub struct Keyed<T> {
    inner: T,
    out: Collector,
}

/// Runs a [`KeyedCoProcessFunction`] as an [`Operator`] with two inputs.
pub struct KeyedCo<T> {
    inner: T,
    out: Collector,
}

macro_rules! inner_accessors {
    ($($adapter:ident),*) => {$(
        impl<T> $adapter<T> {
            /// The wrapped function.
            pub fn inner(&self) -> &T {
                &self.inner
            }

            /// The wrapped function, mutably.
            pub fn inner_mut(&mut self) -> &mut T {
                &mut self.inner
            }
        }
    )*};
}

inner_accessors!(Map, FlatMap, Filter, Keyed, KeyedCo);

impl<T: MapFunction> Operator for Map<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Map {
            inner: T::open(ctx)?,
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        // One record out per record in: the input's sizes are a good guess.
        let mut out = BatchBuilder::with_capacity(input.len(), input.data.len());
        for record in input.records()? {
            out.push(self.inner.map(record)?);
        }
        Ok(Emitted::main(out.finish()))
    }
}

impl<T: FlatMapFunction> Operator for FlatMap<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(FlatMap {
            inner: T::open(ctx)?,
            out: Collector::new(),
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        self.out.clear();
        for record in input.records()? {
            self.inner.flat_map(record, &mut self.out)?;
        }
        Ok(self.out.take())
    }
}

impl<T: FilterFunction> Operator for Filter<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Filter {
            inner: T::open(ctx)?,
            keep: Vec::new(),
        })
    }

    /// Decides every record, then compacts the kept ones in place in the
    /// input's own buffers: no copy to a new buffer, and no work at all when
    /// every record is kept.
    fn process(&mut self, mut input: Batch) -> Result<Emitted, Error> {
        self.keep.clear();
        for record in input.records()? {
            self.keep.push(self.inner.filter(&record)?);
        }
        if self.keep.iter().all(|&k| k) {
            return Ok(Emitted::main(input));
        }
        let (mut read, mut write, mut kept) = (0, 0, 0);
        for i in 0..input.timestamps.len() {
            let (key_len, value_len) = (input.key_lens[i], input.value_lens[i]);
            // Checked by `records()`: the columns have the same length, and
            // a key length is -1 or non-negative.
            let len = key_len.max(0) as usize + value_len as usize;
            if self.keep[i] {
                if read != write {
                    input.data.copy_within(read..read + len, write);
                }
                input.timestamps[kept] = input.timestamps[i];
                input.key_lens[kept] = key_len;
                input.value_lens[kept] = value_len;
                kept += 1;
                write += len;
            }
            read += len;
        }
        input.timestamps.truncate(kept);
        input.key_lens.truncate(kept);
        input.value_lens.truncate(kept);
        input.data.truncate(write);
        Ok(Emitted::main(input))
    }
}

/// The timer, watermark and close callbacks of a keyed adapter (`Keyed`,
/// `KeyedCo`): the function's own, with the key of the timer current.
macro_rules! keyed_callbacks {
    () => {
        fn on_timer(&mut self, key: Vec<u8>, time: i64) -> Result<Emitted, Error> {
            self.out.clear();
            let mut ctx = KeyedContext {
                key: &key,
                timestamp: time,
                out: &mut self.out,
            };
            self.inner.on_timer(time, &mut ctx)?;
            Ok(self.out.take())
        }

        fn on_processing_timer(&mut self, key: Vec<u8>, time: i64) -> Result<Emitted, Error> {
            self.out.clear();
            let mut ctx = KeyedContext {
                key: &key,
                timestamp: time,
                out: &mut self.out,
            };
            self.inner.on_processing_timer(time, &mut ctx)?;
            Ok(self.out.take())
        }

        fn on_watermark(&mut self, watermark: i64) -> Result<Emitted, Error> {
            self.out.clear();
            self.inner.on_watermark(watermark, &mut self.out)?;
            Ok(self.out.take())
        }

        fn close(&mut self) -> Result<Emitted, Error> {
            self.out.clear();
            self.inner.close(&mut self.out)?;
            Ok(self.out.take())
        }
    };
}

impl<T: KeyedProcessFunction> Operator for Keyed<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;
    const KEYED: bool = true;
    const STATES: &'static [StateDescriptor] = T::STATES;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Keyed {
            inner: T::open(ctx)?,
            out: Collector::new(),
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        self.out.clear();
        with_batch_cache(T::STATES, &input, || self.elements(&input))?;
        Ok(self.out.take())
    }

    keyed_callbacks!();
}

impl<T: KeyedProcessFunction> Keyed<T> {
    fn elements(&mut self, input: &Batch) -> Result<(), Error> {
        for (i, record) in input.records()?.enumerate() {
            let Some(key) = record.key else {
                crate::bail!(
                    "record {i} of the batch has no key, but this operator runs on a keyed stream"
                );
            };
            crate::cache::at_record(i);
            let mut ctx = KeyedContext {
                key,
                timestamp: record.timestamp,
                out: &mut self.out,
            };
            self.inner.process_element(record, &mut ctx)?;
        }
        Ok(())
    }
}

impl<T: KeyedCoProcessFunction> KeyedCo<T> {
    fn elements(&mut self, input: u32, batch: Batch) -> Result<Emitted, Error> {
        self.out.clear();
        with_batch_cache(T::STATES, &batch, || self.co_elements(input, &batch))?;
        Ok(self.out.take())
    }

    fn co_elements(&mut self, input: u32, batch: &Batch) -> Result<(), Error> {
        for (i, record) in batch.records()?.enumerate() {
            let Some(key) = record.key else {
                crate::bail!(
                    "record {i} of input {input} has no key, but this operator runs on keyed streams"
                );
            };
            crate::cache::at_record(i);
            let mut ctx = KeyedContext {
                key,
                timestamp: record.timestamp,
                out: &mut self.out,
            };
            match input {
                0 => self.inner.process_element1(record, &mut ctx)?,
                1 => self.inner.process_element2(record, &mut ctx)?,
                other => {
                    crate::bail!("a batch on input {other}; a co-process function has 0 and 1")
                }
            }
        }
        Ok(())
    }
}

/// Runs `f` (the records of `batch`) with the batch cache of value states
/// open (`crate::cache`) if the operator declares any, then writes back
/// what changed, also when `f` failed (as single calls would have). In the
/// native harness a test may switch the cache off (the per-call path);
/// in a component the switch is a constant and costs nothing.
fn with_batch_cache(
    states: &[StateDescriptor],
    batch: &Batch,
    f: impl FnOnce() -> Result<(), Error>,
) -> Result<(), Error> {
    if !states.iter().any(|s| s.kind == StateKind::Value) || !backend::batch_cache_enabled() {
        return f();
    }
    crate::cache::begin(batch.len(), batch.records()?.map(|r| r.key));
    let done = f();
    let written = crate::cache::end().map_err(|(id, e)| {
        let name = states.get(id as usize).map_or("?", |s| s.name);
        crate::state::state_error(name, e)
    });
    done.and(written)
}

impl<T: KeyedCoProcessFunction> Operator for KeyedCo<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;
    const KEYED: bool = true;
    const STATES: &'static [StateDescriptor] = T::STATES;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(KeyedCo {
            inner: T::open(ctx)?,
            out: Collector::new(),
        })
    }

    fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
        self.elements(0, input)
    }

    fn process_input(&mut self, input: u32, batch: Batch) -> Result<Emitted, Error> {
        self.elements(input, batch)
    }

    keyed_callbacks!();
}
