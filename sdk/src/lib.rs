//! # weir-sdk: write Weir stream operators in Rust
//!
//! A Weir operator is a WebAssembly component that implements the contract
//! in `wit/operator.wit`. This crate hides the contract behind Flink's
//! function traits, typed keyed state and one export macro, and runs the
//! same operator natively in a test harness.
//!
//! ## Writing an operator
//!
//! Implement one trait, then export it once per crate (the crate is a
//! `cdylib` built with `cargo build --release --target wasm32-wasip2`):
//!
//! | trait | per call | export |
//! |---|---|---|
//! | [`MapFunction`] | record → record | [`export_map!`] |
//! | [`FlatMapFunction`] | record → 0..n records | [`export_flat_map!`] |
//! | [`FilterFunction`] | record → keep? | [`export_filter!`] |
//! | [`KeyedProcessFunction`] | record + [`KeyedContext`] (state, timers, side outputs); `on_timer` | [`export_keyed!`] |
//! | [`Operator`] | a whole packed [`Batch`] → [`Emitted`] | [`export_operator!`] |
//! | [`AggregateFunction`] | a window's accumulator: add / merge / result (a `window` operator's `module`) | [`export_aggregate!`] |
//! | [`ProcessWindowFunction`] | all records of a fired window | [`export_process_window!`] |
//!
//! Each has `fn open(ctx: &OpenContext) -> Result<Self, Error>`: read the
//! [`Config`] there (`ctx.config().get_bool("lowercase")?`) and take typed
//! handles on the states declared in `const STATES`.
//!
//! A complete keyed operator, counting records per key and emitting the
//! count when input ends (the host's final watermark, `i64::MAX`, fires all
//! timers):
//!
//! ```
//! use weir_sdk::{
//!     Error, KeyedContext, KeyedProcessFunction, OpenContext, Record, StateDescriptor,
//!     ValueState,
//! };
//!
//! pub struct CountPerKey {
//!     count: ValueState<u64>,
//!     prefix: String,
//! }
//!
//! impl KeyedProcessFunction for CountPerKey {
//!     const STATES: &'static [StateDescriptor] = &[StateDescriptor::value("count")];
//!
//!     fn open(ctx: &OpenContext) -> Result<Self, Error> {
//!         Ok(CountPerKey {
//!             count: ctx.value_state("count")?,
//!             prefix: ctx.config().get_str("prefix").unwrap_or("").to_owned(),
//!         })
//!     }
//!
//!     fn process_element(
//!         &mut self,
//!         _record: Record<'_>,
//!         ctx: &mut KeyedContext<'_>,
//!     ) -> Result<(), Error> {
//!         let count = self.count.get(ctx)?;
//!         if count.is_none() {
//!             ctx.register_event_time_timer(i64::MAX)?;
//!         }
//!         self.count.set(ctx, &(count.unwrap_or(0) + 1))
//!     }
//!
//!     fn on_timer(&mut self, time: i64, ctx: &mut KeyedContext<'_>) -> Result<(), Error> {
//!         let count = self.count.get(ctx)?.unwrap_or(0);
//!         let value = format!("{}{}={count}", self.prefix, String::from_utf8_lossy(ctx.key()));
//!         ctx.collect(Record::keyed(ctx.key(), &value, time));
//!         Ok(())
//!     }
//! }
//!
//! weir_sdk::export_keyed!(CountPerKey);
//!
//! // Natively, the same operator runs in the test harness:
//! use weir_sdk::{Keyed, testing::Harness};
//!
//! let mut h = Harness::<Keyed<CountPerKey>>::open(&[("prefix", "n:")])?;
//! let out = h.process([
//!     Record::keyed("a", "x", 1),
//!     Record::keyed("b", "y", 2),
//!     Record::keyed("a", "z", 3),
//! ])?;
//! assert!(out.is_empty());
//! assert_eq!(h.value_state::<u64>("count", "a")?, Some(2));
//! let out = h.finish()?; // final watermark, then close
//! assert_eq!(out.values(), ["n:a=2", "n:b=1"]);
//! # Ok::<(), Error>(())
//! ```
//!
//! ## Keyed state
//!
//! States are declared up front (`const STATES`, a list of
//! [`StateDescriptor`]s; a state's id is its index) so the host can create
//! their storage before the first record. [`ValueState`], [`ListState`] and
//! [`MapState`] are typed handles; every access is scoped to the current key
//! taken from the [`KeyedContext`] passed in (Flink's semantics). Values are
//! stored with the [`StateCodec`] encoding, documented in [`codec`] and shared
//! by every Weir SDK.
//!
//! ## Performance
//!
//! Records cross the Wasm boundary in packed batches. Input records borrow
//! from the batch's buffer ([`Record`] is three words); outputs are appended
//! to one buffer per call. [`MapFunction::map`] may return a record pointing
//! into a buffer owned by the operator, [`Collector::collect_with`] writes a
//! value in place, a [`FilterFunction`] compacts the input batch in place,
//! and an [`Operator`] can return its input untouched.
//!
//! ## Layout
//!
//! - `operator`: the traits ([`Operator`], [`MapFunction`], ...), [`KeyedContext`] and the adapters [`Map`], [`FlatMap`], [`Filter`], [`Keyed`].
//! - `record`: [`Record`], [`OwnedRecord`], batch reading ([`Batch::records`]) and writing ([`BatchBuilder`], [`Collector`]).
//! - `context`: [`OpenContext`] and [`Config`].
//! - [`state`]: [`StateDescriptor`] and the typed state handles.
//! - [`codec`]: [`StateCodec`], the byte encoding of state.
//! - [`log`] and [`metrics`]: wrappers over the host's log and metrics.
//! - [`testing`]: the native [`Harness`](testing::Harness), with checkpoint and restore ([`Snapshot`](testing::Snapshot)) and the per-call path of value state.
//! - `window`: [`AggregateFunction`], [`ProcessWindowFunction`], their adapters [`Aggregate`] and [`ProcessWindow`], and [`Window`].
//! - `export`: the export macros.
//! - [`bindings`]: the code `wit-bindgen` generates from the WIT contract.
//! - `backend`: the only caller of the host imports (in-memory natively).

pub mod bindings;

mod backend;
mod cache;
pub mod codec;
mod context;
mod error;
mod export;
pub mod log;
pub mod metrics;
mod operator;
mod record;
pub mod state;
pub mod testing;
mod window;

pub use bindings::weir::operator::types::{Batch, Emitted, SideOutput};
pub use codec::{DecodeError, StateCodec};
pub use context::{Config, OpenContext};
pub use error::Error;
pub use operator::{
    Filter, FilterFunction, FlatMap, FlatMapFunction, Keyed, KeyedCo, KeyedCoProcessFunction,
    KeyedContext, KeyedProcessFunction, Map, MapFunction, Operator,
};
pub use record::{BatchBuilder, Collector, OwnedRecord, Record, Records};
pub use state::{
    ExplicitKey, KeyScope, ListState, MapState, MigrateFn, StateDescriptor, StateKind, ValueState,
};
pub use window::{
    Aggregate, AggregateFunction, ProcessWindow, ProcessWindowFunction, Window, WindowKind,
};

/// The current event-time watermark of this subtask (`i64::MIN` before the first).
pub fn current_watermark() -> i64 {
    backend::current_watermark()
}

/// What the export macros expand to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::__export_weir_stream_operator as export;
    pub use crate::bindings::exports::weir::operator::migration::Guest as MigrationGuest;
    pub use crate::bindings::exports::weir::operator::operator::Guest;
    pub use crate::bindings::exports::weir::operator::processing_time::Guest as ProcessingTimeGuest;
    pub use crate::bindings::exports::weir::operator::two_input::Guest as TwoInputGuest;
    pub use crate::bindings::exports::weir::operator::window_function::Guest as WindowFunctionGuest;
    pub use crate::bindings::exports::weir::operator::window_function::{
        Accumulated, Window as WitWindow,
    };
    pub use crate::bindings::weir::operator::types::{OpenContext, OperatorInfo};
    pub use crate::export::{Instance, describe, migrate};
}
