//! The optional export `window-function` (contract 0.1.3): a window
//! operator's user function in Wasm, an aggregate or a process-window
//! function. The types mirror `wit/operator.wit`; the calls go through the
//! instance's guard (deadline, memory cap, poisoning) like every other call,
//! and their results are checked before the window operator uses them.

use wasmtime::Store;
use wasmtime::component::{ComponentType, Instance, Lift, Lower, TypedFunc};

use super::instance::{InstanceState, OperatorInstance, optional_export};
use super::{FailureKind, OperatorError};
use crate::record::{Batch, Emitted};

/// The name of the optional window-function interface (since 0.1.3).
pub const WINDOW_FUNCTION_INTERFACE: &str = "weir:operator/window-function@0.1.3";

/// `window-function-kind`: what a component's window function is.
#[derive(ComponentType, Lift, Lower, Debug, Clone, Copy, PartialEq, Eq)]
#[component(enum)]
#[repr(u8)]
pub enum WindowFunctionKind {
    /// Not a window function.
    #[component(name = "none")]
    None,
    /// An aggregate: `add`, `merge`, `get-result`.
    #[component(name = "aggregate")]
    Aggregate,
    /// A process-window function: `process-window`.
    #[component(name = "process-window")]
    ProcessWindow,
}

/// `window`: `[start, end)`.
#[derive(ComponentType, Lift, Lower, Debug, Clone, Copy, PartialEq, Eq)]
#[component(record)]
pub struct WitWindow {
    /// The first millisecond in the window.
    pub start: i64,
    /// The first millisecond after it.
    pub end: i64,
}

/// `accumulated`: a fired window's accumulator.
#[derive(ComponentType, Lift, Lower, Debug, Clone, PartialEq, Eq)]
#[component(record)]
pub struct Accumulated {
    /// The key.
    pub key: Vec<u8>,
    /// The window.
    pub window: WitWindow,
    /// Its accumulator.
    pub accumulator: Vec<u8>,
}

type Accumulators = Vec<Vec<u8>>;
type KindFn = TypedFunc<(), (WindowFunctionKind,)>;
type AddFn = TypedFunc<(Vec<Option<Vec<u8>>>, Vec<u32>, Batch), (Result<Accumulators, String>,)>;
type MergeFn = TypedFunc<(Vec<(Vec<u8>, Vec<u8>)>,), (Result<Accumulators, String>,)>;
type ResultsFn = TypedFunc<(Vec<Accumulated>,), (Result<Accumulators, String>,)>;
type ProcessWindowFn = TypedFunc<(Vec<u8>, WitWindow, Batch), (Result<Emitted, String>,)>;

/// The functions of a component's `window-function` export.
#[derive(Clone, Copy)]
pub(super) struct WindowCalls {
    kind: KindFn,
    add: AddFn,
    merge: MergeFn,
    results: ResultsFn,
    process_window: ProcessWindowFn,
}

impl WindowCalls {
    /// The export's functions, if the component has the export (all of
    /// them, with the contract's types, or the instantiation fails).
    pub(super) fn lookup(
        store: &mut Store<InstanceState>,
        instance: &Instance,
    ) -> wasmtime::Result<Option<WindowCalls>> {
        let iface = WINDOW_FUNCTION_INTERFACE;
        let Some(kind) = optional_export(store, instance, iface, "kind")? else {
            return Ok(None);
        };
        let missing = |f: &str| {
            wasmtime::Error::msg(format!("`{iface}` is exported without its function `{f}`"))
        };
        Ok(Some(WindowCalls {
            kind,
            add: optional_export(store, instance, iface, "add")?.ok_or_else(|| missing("add"))?,
            merge: optional_export(store, instance, iface, "merge")?
                .ok_or_else(|| missing("merge"))?,
            results: optional_export(store, instance, iface, "get-result")?
                .ok_or_else(|| missing("get-result"))?,
            process_window: optional_export(store, instance, iface, "process-window")?
                .ok_or_else(|| missing("process-window"))?,
        }))
    }
}

impl OperatorInstance {
    fn window_calls(&self) -> Result<WindowCalls, OperatorError> {
        self.window.ok_or_else(|| {
            self.error(
                FailureKind::ContractMismatch,
                "the module does not export `weir:operator/window-function` (build it with an \
                 aggregate or process-window function and an SDK for contract 0.1.3 or later)"
                    .into(),
            )
        })
    }

    /// `window-function.kind`, or `None` if the component does not export
    /// the interface.
    pub fn window_function_kind(&mut self) -> Result<Option<WindowFunctionKind>, OperatorError> {
        let Some(calls) = self.window else {
            return Ok(None);
        };
        self.guarded("kind", |s| calls.kind.call(s, ()).map(|(k,)| Ok(k)))
            .map(Some)
    }

    /// `window-function.add`: record i of `records` into
    /// `accumulators[targets[i]]`; returns the accumulators after the adds,
    /// exactly as many as given, within the output cap.
    pub fn window_add(
        &mut self,
        accumulators: Vec<Option<Vec<u8>>>,
        targets: Vec<u32>,
        records: &Batch,
    ) -> Result<Vec<Vec<u8>>, OperatorError> {
        let calls = self.window_calls()?;
        let n = accumulators.len();
        let args = (accumulators, targets, records.clone());
        let out = self.guarded("add", |s| calls.add.call(s, args).map(|(r,)| r))?;
        self.check_accumulators("add", out, n)
    }

    /// `window-function.merge`: one accumulator per pair.
    pub fn window_merge(
        &mut self,
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<Vec<u8>>, OperatorError> {
        let calls = self.window_calls()?;
        let n = pairs.len();
        let out = self.guarded("merge", |s| calls.merge.call(s, (pairs,)).map(|(r,)| r))?;
        self.check_accumulators("merge", out, n)
    }

    /// `window-function.get-result`: one value per fired window.
    pub fn window_results(
        &mut self,
        windows: Vec<Accumulated>,
    ) -> Result<Vec<Vec<u8>>, OperatorError> {
        let calls = self.window_calls()?;
        let n = windows.len();
        let out = self.guarded("get-result", |s| {
            calls.results.call(s, (windows,)).map(|(r,)| r)
        })?;
        self.check_accumulators("get-result", out, n)
    }

    /// `window-function.process-window` for one fired window.
    pub fn process_window(
        &mut self,
        key: &[u8],
        window: WitWindow,
        records: &Batch,
    ) -> Result<Emitted, OperatorError> {
        let calls = self.window_calls()?;
        let args = (key.to_vec(), window, records.clone());
        let out = self.guarded("process-window", |s| {
            calls.process_window.call(s, args).map(|(r,)| r)
        })?;
        self.check_output(out)
    }

    /// A list of byte strings a window call returned: as many as asked
    /// for, and no more bytes than one call may emit.
    fn check_accumulators(
        &self,
        what: &str,
        out: Vec<Vec<u8>>,
        expected: usize,
    ) -> Result<Vec<Vec<u8>>, OperatorError> {
        if out.len() != expected {
            return Err(self.error(
                FailureKind::BadOutput,
                format!(
                    "`{what}` returned {} values for {expected} windows",
                    out.len()
                ),
            ));
        }
        let size: usize = out.iter().map(Vec::len).sum();
        if size > self.max_output() {
            return Err(self.error(
                FailureKind::BadOutput,
                format!(
                    "`{what}` returned {size} bytes, over the limit of {} bytes",
                    self.max_output()
                ),
            ));
        }
        Ok(out)
    }
}
