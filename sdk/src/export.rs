//! The export macros: how a UDF crate becomes a Weir operator component.
//!
//! Owns [`export_operator!`](crate::export_operator) and its shorthands
//! ([`export_map!`](crate::export_map), [`export_flat_map!`](crate::export_flat_map),
//! [`export_filter!`](crate::export_filter), [`export_keyed!`](crate::export_keyed)),
//! and the hidden runtime they expand to: [`Instance`], the one operator
//! instance of the component, which implements the WIT `operator` interface
//! on top of an [`Operator`].
//!
//! A component holds exactly one instance and the host calls it
//! sequentially, so the instance lives in a thread-local (a plain static on
//! single-threaded `wasm32`). The raw `wit-bindgen` export is emitted only on
//! `wasm32`: natively the macro still type-checks the operator, so a UDF
//! crate's own `cargo test` works.

use std::cell::RefCell;

use crate::Error;
use crate::bindings::exports::weir::operator::window_function::{Accumulated, Window as WitWindow};
use crate::bindings::weir::operator::types::{self as wit, Batch, Emitted, OperatorInfo};
use crate::context::{Config, OpenContext};
use crate::operator::Operator;
use crate::state::check_declared;
use crate::window::WindowKind;

/// The `operator-info` of `O`; empty names and versions fall back to the
/// crate's (passed in by the export macro from Cargo's environment).
pub fn describe<O: Operator>(crate_name: &str, crate_version: &str) -> OperatorInfo {
    let or =
        |value: &str, fallback: &str| if value.is_empty() { fallback } else { value }.to_owned();
    OperatorInfo {
        name: or(O::NAME, crate_name),
        version: or(O::VERSION, crate_version),
        keyed: O::KEYED,
        states: O::STATES
            .iter()
            .map(|s| wit::StateDescriptor {
                name: s.name.to_owned(),
                kind: s.kind,
                ttl_ms: s.ttl_ms,
            })
            .collect(),
    }
}

/// WIT `migration.migrate-state` for `O`: the state's
/// [`migrate`](crate::StateDescriptor::migrate) function, or the bytes as
/// they are for a state without one (or one `O` does not declare).
pub fn migrate<O: Operator>(
    state: &str,
    from_version: &str,
    old: Vec<u8>,
) -> Result<Vec<u8>, Error> {
    match O::STATES
        .iter()
        .find(|s| s.name == state)
        .and_then(|s| s.migrate)
    {
        Some(f) => f(from_version, &old).map_err(|e| {
            e.context(format_args!(
                "migrating state `{state}` from version {from_version}"
            ))
        }),
        None => Ok(old),
    }
}

/// Opens `O` from the host's `open-context`.
pub(crate) fn open<O: Operator>(ctx: wit::OpenContext) -> Result<O, Error> {
    check_declared(O::STATES)?;
    let ctx = OpenContext::new(
        ctx.operator_id,
        ctx.subtask_index,
        ctx.parallelism,
        ctx.max_parallelism,
        Config::new(ctx.config),
        O::STATES,
    );
    O::open(&ctx)
}

/// The component's operator instance: `None` until `open` succeeds.
pub struct Instance<O> {
    op: RefCell<Option<O>>,
}

impl<O: Operator> Instance<O> {
    /// No instance yet.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self {
            op: RefCell::new(None),
        }
    }

    /// WIT `open`.
    pub fn open(&self, ctx: wit::OpenContext) -> Result<(), String> {
        let op = open::<O>(ctx).map_err(String::from)?;
        *self.op.borrow_mut() = Some(op);
        Ok(())
    }

    /// WIT `process`.
    pub fn process(&self, input: Batch) -> Result<Emitted, String> {
        self.with(|op| op.process(input))
    }

    /// WIT `two-input.process-input`.
    pub fn process_input(&self, input: u32, batch: Batch) -> Result<Emitted, String> {
        self.with(|op| op.process_input(input, batch))
    }

    /// WIT `on-timer`.
    pub fn on_timer(&self, key: Vec<u8>, time: i64) -> Result<Emitted, String> {
        self.with(|op| op.on_timer(key, time))
    }

    /// WIT `processing-time.on-processing-timer`.
    pub fn on_processing_timer(&self, key: Vec<u8>, time: i64) -> Result<Emitted, String> {
        self.with(|op| op.on_processing_timer(key, time))
    }

    /// WIT `on-watermark`.
    pub fn on_watermark(&self, watermark: i64) -> Result<Emitted, String> {
        self.with(|op| op.on_watermark(watermark))
    }

    /// WIT `close`.
    pub fn close(&self) -> Result<Emitted, String> {
        self.with(|op| op.close())
    }

    /// WIT `window-function.kind`.
    pub fn window_kind(&self) -> WindowKind {
        O::WINDOW_KIND
    }

    /// WIT `window-function.add`.
    pub fn window_add(
        &self,
        accumulators: Vec<Option<Vec<u8>>>,
        targets: Vec<u32>,
        records: Batch,
    ) -> Result<Vec<Vec<u8>>, String> {
        self.with(|op| op.window_add(accumulators, targets, records))
    }

    /// WIT `window-function.merge`.
    pub fn window_merge(&self, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Result<Vec<Vec<u8>>, String> {
        self.with(|op| op.window_merge(pairs))
    }

    /// WIT `window-function.get-result`.
    pub fn window_results(&self, windows: Vec<Accumulated>) -> Result<Vec<Vec<u8>>, String> {
        self.with(|op| op.window_results(windows))
    }

    /// WIT `window-function.process-window`.
    pub fn process_window(
        &self,
        key: Vec<u8>,
        window: WitWindow,
        records: Batch,
    ) -> Result<Emitted, String> {
        self.with(|op| op.process_window(key, window.into(), records))
    }

    fn with<T>(&self, f: impl FnOnce(&mut O) -> Result<T, Error>) -> Result<T, String> {
        let mut op = self.op.borrow_mut();
        let op = op
            .as_mut()
            .ok_or_else(|| "operator called before a successful `open`".to_owned())?;
        f(op).map_err(String::from)
    }
}

/// Exports a type implementing [`Operator`](crate::Operator) as the
/// component's operator. Invoke once per UDF crate, at the top level.
///
/// The function traits are exported through their adapters:
/// `export_operator!(weir_sdk::Keyed<WordCount>)` is what
/// [`export_keyed!(WordCount)`](crate::export_keyed) expands to.
///
/// ```
/// use weir_sdk::{Batch, Emitted, Error, OpenContext, Operator};
///
/// struct Identity;
///
/// impl Operator for Identity {
///     fn open(_ctx: &OpenContext) -> Result<Self, Error> {
///         Ok(Identity)
///     }
///     fn process(&mut self, input: Batch) -> Result<Emitted, Error> {
///         Ok(Emitted::main(input))
///     }
/// }
///
/// weir_sdk::export_operator!(Identity);
/// ```
#[macro_export]
macro_rules! export_operator {
    ($op:ty) => {
        // `unsafe_code`: the raw export functions are `unsafe extern "C"`
        // glue generated by wit-bindgen.
        #[allow(unsafe_code, dead_code)]
        const _: () = {
            ::std::thread_local! {
                static WEIR_INSTANCE: $crate::__private::Instance<$op> =
                    const { $crate::__private::Instance::new() };
            }

            struct WeirOperatorExport;

            impl $crate::__private::Guest for WeirOperatorExport {
                fn describe() -> $crate::__private::OperatorInfo {
                    $crate::__private::describe::<$op>(
                        ::core::env!("CARGO_PKG_NAME"),
                        ::core::env!("CARGO_PKG_VERSION"),
                    )
                }
                fn open(
                    ctx: $crate::__private::OpenContext,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.open(ctx))
                }
                fn process(
                    input: $crate::Batch,
                ) -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.process(input))
                }
                fn on_timer(
                    key: ::std::vec::Vec<u8>,
                    time: i64,
                ) -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.on_timer(key, time))
                }
                fn on_watermark(
                    watermark: i64,
                ) -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.on_watermark(watermark))
                }
                fn close() -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.close())
                }
            }

            impl $crate::__private::ProcessingTimeGuest for WeirOperatorExport {
                fn on_processing_timer(
                    key: ::std::vec::Vec<u8>,
                    time: i64,
                ) -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.on_processing_timer(key, time))
                }
            }

            impl $crate::__private::TwoInputGuest for WeirOperatorExport {
                fn process_input(
                    input: u32,
                    records: $crate::Batch,
                ) -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.process_input(input, records))
                }
            }

            impl $crate::__private::WindowFunctionGuest for WeirOperatorExport {
                fn kind() -> $crate::WindowKind {
                    WEIR_INSTANCE.with(|i| i.window_kind())
                }
                fn add(
                    accumulators: ::std::vec::Vec<::core::option::Option<::std::vec::Vec<u8>>>,
                    targets: ::std::vec::Vec<u32>,
                    records: $crate::Batch,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::std::vec::Vec<u8>>,
                    ::std::string::String,
                > {
                    WEIR_INSTANCE.with(|i| i.window_add(accumulators, targets, records))
                }
                fn merge(
                    pairs: ::std::vec::Vec<(::std::vec::Vec<u8>, ::std::vec::Vec<u8>)>,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::std::vec::Vec<u8>>,
                    ::std::string::String,
                > {
                    WEIR_INSTANCE.with(|i| i.window_merge(pairs))
                }
                fn get_result(
                    windows: ::std::vec::Vec<$crate::__private::Accumulated>,
                ) -> ::core::result::Result<
                    ::std::vec::Vec<::std::vec::Vec<u8>>,
                    ::std::string::String,
                > {
                    WEIR_INSTANCE.with(|i| i.window_results(windows))
                }
                fn process_window(
                    key: ::std::vec::Vec<u8>,
                    window: $crate::__private::WitWindow,
                    records: $crate::Batch,
                ) -> ::core::result::Result<$crate::Emitted, ::std::string::String> {
                    WEIR_INSTANCE.with(|i| i.process_window(key, window, records))
                }
            }

            impl $crate::__private::MigrationGuest for WeirOperatorExport {
                fn migrate_state(
                    state: ::std::string::String,
                    from_version: ::std::string::String,
                    old: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, ::std::string::String> {
                    $crate::__private::migrate::<$op>(&state, &from_version, old)
                        .map_err(::std::string::String::from)
                }
            }

            #[cfg(target_arch = "wasm32")]
    $crate::__private::export!(WeirOperatorExport with_types_in $crate::bindings);
        };
    };
}

/// Exports a [`MapFunction`](crate::MapFunction): `export_map!(Uppercase);`
#[macro_export]
macro_rules! export_map {
    ($function:ty) => {
        $crate::export_operator!($crate::Map<$function>);
    };
}

/// Exports a [`FlatMapFunction`](crate::FlatMapFunction): `export_flat_map!(Tokenize);`
#[macro_export]
macro_rules! export_flat_map {
    ($function:ty) => {
        $crate::export_operator!($crate::FlatMap<$function>);
    };
}

/// Exports a [`FilterFunction`](crate::FilterFunction): `export_filter!(Contains);`
#[macro_export]
macro_rules! export_filter {
    ($function:ty) => {
        $crate::export_operator!($crate::Filter<$function>);
    };
}

/// Exports a [`KeyedCoProcessFunction`](crate::KeyedCoProcessFunction), an
/// operator with two inputs: `export_keyed_co!(MatchOrders);`
#[macro_export]
macro_rules! export_keyed_co {
    ($function:ty) => {
        $crate::export_operator!($crate::KeyedCo<$function>);
    };
}

/// Exports an [`AggregateFunction`](crate::AggregateFunction) as the
/// component's window function: `export_aggregate!(Stats);`
#[macro_export]
macro_rules! export_aggregate {
    ($function:ty) => {
        $crate::export_operator!($crate::Aggregate<$function>);
    };
}

/// Exports a [`ProcessWindowFunction`](crate::ProcessWindowFunction) as the
/// component's window function: `export_process_window!(TopThree);`
#[macro_export]
macro_rules! export_process_window {
    ($function:ty) => {
        $crate::export_operator!($crate::ProcessWindow<$function>);
    };
}

/// Exports a [`KeyedProcessFunction`](crate::KeyedProcessFunction): `export_keyed!(WordCount);`
#[macro_export]
macro_rules! export_keyed {
    ($function:ty) => {
        $crate::export_operator!($crate::Keyed<$function>);
    };
}
