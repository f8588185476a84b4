//! Window functions (contract 0.1.3): the user's function of the host's
//! window operator, an `[[operator]]` with a `window` table and a `module`.
//!
//! The host assigns records to windows, keeps the window state and fires
//! windows on the watermark; the function only computes. Two kinds, as in
//! Flink:
//!
//! - [`AggregateFunction`] (Flink's `AggregateFunction`): incremental, one
//!   accumulator per key and window, stored by the host as the
//!   accumulator's [`StateCodec`] bytes. Export with [`export_aggregate!`](crate::export_aggregate).
//! - [`ProcessWindowFunction`] (Flink's `ProcessWindowFunction`): all of a
//!   window's records at once when it fires, for what an aggregate cannot
//!   do (a median, the top N). Export with [`export_process_window!`](crate::export_process_window).
//!
//! The adapters [`Aggregate`] and [`ProcessWindow`] turn them into an
//! [`Operator`] whose window calls the export macro wires to the WIT
//! `window-function` interface. The host calls an aggregate with many
//! windows at once: `add` gets every record of a batch with the
//! accumulator of each window it touched, so a batch costs one call.
//!
//! ```
//! use weir_sdk::{AggregateFunction, Error, OpenContext, Record, Window};
//!
//! /// The sum of the values (decimal integers) per key and window.
//! struct Sum;
//!
//! impl AggregateFunction for Sum {
//!     type Accumulator = i64;
//!
//!     fn open(_ctx: &OpenContext) -> Result<Self, Error> {
//!         Ok(Sum)
//!     }
//!     fn create_accumulator(&self) -> i64 {
//!         0
//!     }
//!     fn add(&self, acc: &mut i64, record: Record<'_>) -> Result<(), Error> {
//!         *acc += record.value_str().trim().parse::<i64>().map_err(|e| Error::msg(e))?;
//!         Ok(())
//!     }
//!     fn merge(&self, a: i64, b: i64) -> i64 {
//!         a + b
//!     }
//!     fn get_result(&self, key: &[u8], window: Window, acc: &i64) -> Result<Vec<u8>, Error> {
//!         let key = String::from_utf8_lossy(key);
//!         Ok(format!("{key} [{}, {}): {acc}", window.start, window.end).into_bytes())
//!     }
//! }
//!
//! weir_sdk::export_aggregate!(Sum);
//!
//! // Natively, through the same calls the host makes:
//! use weir_sdk::{Aggregate, testing::Harness};
//! let mut h = Harness::<Aggregate<Sum>>::open(&[])?;
//! let w = Window { start: 0, end: 10 };
//! let records = [Record::keyed("a", "2", 1), Record::keyed("a", "3", 4)];
//! assert_eq!(h.aggregate("a", w, &records, 1)?, b"a [0, 10): 5");
//! # Ok::<(), Error>(())
//! ```

use crate::Error;
use crate::bindings::exports::weir::operator::window_function as wit;
use crate::bindings::weir::operator::types::{Batch, Emitted};
use crate::codec::StateCodec;
use crate::context::OpenContext;
use crate::operator::Operator;
use crate::record::{Collector, Record};

pub use wit::WindowFunctionKind as WindowKind;

/// A window `[start, end)` in ms of event time. A count window's
/// (`type = "global"`) is the whole time line (see [`Window::is_global`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// The first millisecond in the window.
    pub start: i64,
    /// The first millisecond after it.
    pub end: i64,
}

impl Window {
    /// The global window of count windows.
    pub const GLOBAL: Window = Window {
        start: i64::MIN,
        end: i64::MAX,
    };

    /// Its last millisecond, `end - 1`: the timestamp of its output.
    pub fn max_timestamp(self) -> i64 {
        self.end - 1
    }

    /// Whether it is the global window of count windows.
    pub fn is_global(self) -> bool {
        self == Window::GLOBAL
    }
}

impl From<wit::Window> for Window {
    fn from(w: wit::Window) -> Window {
        Window {
            start: w.start,
            end: w.end,
        }
    }
}

impl From<Window> for wit::Window {
    fn from(w: Window) -> wit::Window {
        wit::Window {
            start: w.start,
            end: w.end,
        }
    }
}

/// An incremental window function (Flink's `AggregateFunction`): the host
/// keeps one accumulator per key and window, as its [`StateCodec`] bytes.
pub trait AggregateFunction: Sized + 'static {
    /// A human-readable name for `weir inspect`; empty means the crate name.
    const NAME: &'static str = "";
    /// The function's own version; empty means the crate version.
    const VERSION: &'static str = "";
    /// The accumulator; its bytes are the window's state (keep the encoding
    /// stable across versions, as any state's).
    type Accumulator: StateCodec;

    /// Creates the instance, once (read the job spec's `config` here).
    fn open(ctx: &OpenContext) -> Result<Self, Error>;
    /// A new window's accumulator.
    fn create_accumulator(&self) -> Self::Accumulator;
    /// Adds `record` (key, value, timestamp as the window's input had them).
    fn add(&self, acc: &mut Self::Accumulator, record: Record<'_>) -> Result<(), Error>;
    /// Merges two accumulators (session windows a record joined).
    fn merge(&self, a: Self::Accumulator, b: Self::Accumulator) -> Self::Accumulator;
    /// The fired window's output value; the host emits it with `key` and
    /// the timestamp `window.max_timestamp()`.
    fn get_result(
        &self,
        key: &[u8],
        window: Window,
        acc: &Self::Accumulator,
    ) -> Result<Vec<u8>, Error>;
}

/// A window function that sees all of a window's records when it fires
/// (Flink's `ProcessWindowFunction`).
pub trait ProcessWindowFunction: Sized + 'static {
    /// A human-readable name for `weir inspect`; empty means the crate name.
    const NAME: &'static str = "";
    /// The function's own version; empty means the crate version.
    const VERSION: &'static str = "";

    /// Creates the instance, once (read the job spec's `config` here).
    fn open(ctx: &OpenContext) -> Result<Self, Error>;
    /// `window` of `key` fired; `records` are all its records in the order
    /// they arrived. Emit through `out` (main or side outputs); the host
    /// stamps every record emitted with `window.max_timestamp()`.
    fn process(
        &mut self,
        key: &[u8],
        window: Window,
        records: &[Record<'_>],
        out: &mut Collector,
    ) -> Result<(), Error>;
}

/// The [`Operator`] of an [`AggregateFunction`]; what
/// [`export_aggregate!`](crate::export_aggregate) exports.
pub struct Aggregate<T> {
    inner: T,
}

/// The [`Operator`] of a [`ProcessWindowFunction`]; what
/// [`export_process_window!`](crate::export_process_window) exports.
pub struct ProcessWindow<T> {
    inner: T,
    out: Collector,
}

/// What a window function answers to the record-at-a-time calls.
fn not_an_operator() -> Error {
    Error::msg(
        "this module is a window function: use it as the `module` of an [[operator]] \
         with a `window` table",
    )
}

impl<T: AggregateFunction> Operator for Aggregate<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;
    const WINDOW_KIND: WindowKind = WindowKind::Aggregate;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(Aggregate {
            inner: T::open(ctx)?,
        })
    }

    fn process(&mut self, _input: Batch) -> Result<Emitted, Error> {
        Err(not_an_operator())
    }

    fn window_add(
        &mut self,
        accumulators: Vec<Option<Vec<u8>>>,
        targets: Vec<u32>,
        records: Batch,
    ) -> Result<Vec<Vec<u8>>, Error> {
        let mut accs = accumulators
            .iter()
            .map(|a| match a {
                Some(bytes) => T::Accumulator::decode(bytes)
                    .map_err(|e| Error::msg(format!("a stored accumulator: {e}"))),
                None => Ok(self.inner.create_accumulator()),
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let records = records.records()?;
        if records.len() != targets.len() {
            crate::bail!(
                "`add` got {} records but {} targets",
                records.len(),
                targets.len()
            );
        }
        for (record, &target) in records.zip(&targets) {
            let Some(acc) = accs.get_mut(target as usize) else {
                crate::bail!(
                    "`add` target {target} is out of range ({} accumulators)",
                    accumulators.len()
                );
            };
            self.inner.add(acc, record)?;
        }
        Ok(accs.iter().map(StateCodec::to_bytes).collect())
    }

    fn window_merge(&mut self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<Vec<u8>>, Error> {
        pairs
            .into_iter()
            .map(|(a, b)| {
                let decode = |bytes: &[u8]| {
                    T::Accumulator::decode(bytes)
                        .map_err(|e| Error::msg(format!("a stored accumulator: {e}")))
                };
                let merged = self.inner.merge(decode(&a)?, decode(&b)?);
                Ok(merged.to_bytes())
            })
            .collect()
    }

    fn window_results(&mut self, windows: Vec<wit::Accumulated>) -> Result<Vec<Vec<u8>>, Error> {
        windows
            .into_iter()
            .map(|w| {
                let acc = T::Accumulator::decode(&w.accumulator)
                    .map_err(|e| Error::msg(format!("a stored accumulator: {e}")))?;
                self.inner.get_result(&w.key, w.window.into(), &acc)
            })
            .collect()
    }
}

impl<T: ProcessWindowFunction> Operator for ProcessWindow<T> {
    const NAME: &'static str = T::NAME;
    const VERSION: &'static str = T::VERSION;
    const WINDOW_KIND: WindowKind = WindowKind::ProcessWindow;

    fn open(ctx: &OpenContext) -> Result<Self, Error> {
        Ok(ProcessWindow {
            inner: T::open(ctx)?,
            out: Collector::new(),
        })
    }

    fn process(&mut self, _input: Batch) -> Result<Emitted, Error> {
        Err(not_an_operator())
    }

    fn process_window(
        &mut self,
        key: Vec<u8>,
        window: Window,
        records: Batch,
    ) -> Result<Emitted, Error> {
        self.out.clear();
        let records: Vec<Record<'_>> = records.records()?.collect();
        self.inner.process(&key, window, &records, &mut self.out)?;
        Ok(self.out.take())
    }
}

impl<T> Aggregate<T> {
    /// The wrapped function.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

impl<T> ProcessWindow<T> {
    /// The wrapped function.
    pub fn inner(&self) -> &T {
        &self.inner
    }
}

/// The error of a window call on an operator that is not a window function.
pub(crate) fn not_a_window_function() -> Error {
    Error::msg(
        "this module is not a window function (build it with `export_aggregate!` or \
         `export_process_window!`)",
    )
}
