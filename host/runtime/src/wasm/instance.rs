//! One sandboxed operator instance: its `Store`, limits, keyed state, timers,
//! and the typed calls into the guest's lifecycle.
//!
//! Every call sets a fresh epoch deadline, and every failure is turned into
//! an [`OperatorError`] with a [`FailureKind`]. After a trap the instance is
//! poisoned: wasmtime does not allow re-entering it, and neither do we.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::StreamOperator;
use super::bindings::exports::weir::operator::operator::Guest;
use super::bindings::weir::operator::types::{Emitted, OpenContext, OperatorInfo};
use super::quota::{HostQuota, Timers};
use super::window_function::WindowCalls;
use super::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY_LIMIT, EPOCH_TICK, FailureKind,
    OperatorError, OperatorModule, STDERR_CAPTURE,
};
use crate::record::Batch;
use crate::state::{KeyGroupRange, KeyedStateBackend};
use crate::telemetry::OperatorTelemetry;

/// Most table elements (function references) over all of an instance's
/// tables; generous for any compiled language runtime, small enough to bound
/// memory.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// How to set up one instance.
#[derive(Debug, Clone)]
pub struct InstanceConfig {
    /// The operator's uid, used in every error and log line.
    pub operator: String,
    /// This subtask's index.
    pub subtask_index: u32,
    /// The operator's parallelism.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u16,
    /// The operator's config, flattened.
    pub config: Vec<(String, String)>,
    /// Cap on linear memory, bytes.
    pub memory_limit: usize,
    /// CPU deadline per call.
    pub call_timeout: Duration,
    /// Cap on bytes emitted by one call.
    pub max_output: usize,
    /// Set when the job is cancelled or aborted: a call running at that
    /// moment is interrupted within one epoch tick and fails with
    /// [`FailureKind::Cancelled`].
    pub cancel: Arc<AtomicBool>,
    /// The job's deployment attempt (0, then one more per restart); the
    /// guest sees it as the environment variable [`ATTEMPT_ENV`].
    pub attempt: u32,
    /// Where the guest's log lines and metrics are kept for the daemon to
    /// ship and serve (this vertex's subtask's).
    pub telemetry: Arc<OperatorTelemetry>,
}

/// The one environment variable a guest sees: the job's deployment attempt
/// (`0` first, then one more per restart), like Flink's
/// `RuntimeContext#getAttemptNumber`.
pub const ATTEMPT_ENV: &str = "WEIR_ATTEMPT";

impl InstanceConfig {
    /// Defaults for a single, unkeyed instance of `operator`.
    pub fn new(operator: &str) -> Self {
        InstanceConfig {
            operator: operator.to_string(),
            subtask_index: 0,
            parallelism: 1,
            max_parallelism: crate::state::DEFAULT_MAX_PARALLELISM,
            config: Vec::new(),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_output: DEFAULT_MAX_OUTPUT,
            cancel: Arc::default(),
            attempt: 0,
            telemetry: Arc::default(),
        }
    }
}

/// Most linear memories one instance may create. Compiled components of
/// every supported language use one or two; the cap exists because each
/// memory reserves address space and multi-memory lets a tiny module declare
/// thousands.
pub const MAX_MEMORIES: usize = 16;

/// Most tables one instance may create (a component has a few per core
/// module: function tables and the canonical ABI's resource tables).
pub const MAX_TABLES: usize = 64;

/// Most core instances one instance may create (a component made of many
/// core modules, as componentize-py's, has tens).
pub const MAX_CORE_INSTANCES: usize = 256;

/// Bytes charged per table element (a pointer, as wasmtime stores them).
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// Caps what one instance may allocate: every linear memory and table
/// counts against **one** budget (`memory_limit` bytes), so declaring more
/// memories does not buy more memory; also caps how many memories, tables
/// and core instances exist. Remembers that the budget was hit so the
/// resulting trap is reported as out-of-memory.
pub(crate) struct Limiter {
    pub(crate) memory_limit: usize,
    /// Bytes of memories and tables granted so far. A growth that wasmtime
    /// fails after it was granted (beyond the memory's declared maximum, or
    /// the OS refusing) stays charged: wasmtime's failure callback does not
    /// say which growth failed (for memories with 1-byte pages it reports
    /// one it never asked about), so taking grants back could undercount;
    /// charging too much only shrinks a misbehaving guest's own budget.
    pub(crate) allocated: usize,
    /// Table elements over all tables.
    table_elements: usize,
    pub(crate) memory_exceeded: Option<usize>,
}

impl Limiter {
    pub(crate) fn new(memory_limit: usize) -> Self {
        Limiter {
            memory_limit,
            allocated: 0,
            table_elements: 0,
            memory_exceeded: None,
        }
    }

    /// Grants `delta` more bytes if the budget allows; records the
    /// would-be total when it does not.
    fn grant(&mut self, delta: usize) -> bool {
        let total = self.allocated.saturating_add(delta);
        if total > self.memory_limit {
            self.memory_exceeded = Some(total);
            return false;
        }
        self.allocated = total;
        true
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // A new memory arrives as a growth from 0 to its minimum.
        Ok(self.grant(desired.saturating_sub(current)))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let added = desired.saturating_sub(current);
        if self.table_elements.saturating_add(added) > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        if !self.grant(added.saturating_mul(TABLE_ELEMENT_BYTES)) {
            return Ok(false);
        }
        self.table_elements += added;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// Per-instance data the host functions see.
pub(crate) struct InstanceState {
    pub(crate) operator: String,
    pub(crate) subtask_index: u32,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    /// Epoch ticks the running call may still use (see [`deadline_tick`]).
    ticks_left: u64,
    cancel: Arc<AtomicBool>,
    stderr: MemoryOutputPipe,
    pub(crate) state: Option<Box<dyn KeyedStateBackend>>,
    pub(crate) key_groups: Option<KeyGroupRange>,
    pub(crate) max_parallelism: u16,
    /// Registered event-time timers, ordered by time.
    pub(crate) timers: Timers,
    /// Registered processing-time timers, ordered by time; mirrored in the
    /// hidden state `processing` (so checkpoints keep them).
    pub(crate) processing_timers: Timers,
    /// The hidden state's id (after the guest's), once enabled: guest
    /// state ids at or past it are refused.
    pub(crate) processing: Option<u32>,
    /// The component exports `processing-time`.
    pub(crate) fires_processing_timers: bool,
    /// What the host keeps for the guest (timers, metric names, logs).
    pub(crate) quota: HostQuota,
    pub(crate) watermark: i64,
    pub(crate) counters: BTreeMap<String, u64>,
    pub(crate) gauges: BTreeMap<String, f64>,
    /// Log lines and metrics as the daemon sees them.
    pub(crate) telemetry: Arc<OperatorTelemetry>,
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The `migration.migrate-state` export: (state, from-version, old) → new.
type MigrateState =
    wasmtime::component::TypedFunc<(String, String, Vec<u8>), (Result<Vec<u8>, String>,)>;

/// The contract version this host implements (`wit/operator.wit`). It
/// runs components built against any `0.1.x`: wasmtime links and looks up
/// semver-compatible interface versions.
pub const CONTRACT_VERSION: &str = "0.1.3";

/// The name of the optional migration interface among a component's exports.
pub const MIGRATION_INTERFACE: &str = "weir:operator/migration@0.1.3";

/// The name of the optional two-input interface (since 0.1.1).
pub const TWO_INPUT_INTERFACE: &str = "weir:operator/two-input@0.1.3";

/// Whether `name` (an import or export of a component) is the contract's
/// interface `interface` at any version this host runs (`0.1.x`).
pub fn is_contract_interface(name: &str, interface: &str) -> bool {
    name.strip_prefix("weir:operator/")
        .and_then(|rest| rest.strip_prefix(interface))
        .and_then(|rest| rest.strip_prefix("@0.1."))
        .is_some_and(|patch| !patch.is_empty() && patch.bytes().all(|b| b.is_ascii_digit()))
}

/// The name of the optional processing-time interface (since 0.1.2).
pub const PROCESSING_TIME_INTERFACE: &str = "weir:operator/processing-time@0.1.3";

/// The host's hidden map state of a keyed operator's processing-time
/// timers (key → time → nothing), declared after the guest's states so
/// checkpoints, savepoints and rescaling carry the timers with the keys.
pub const PROCESSING_TIMERS_STATE: &str = "weir.processing-timers";

/// `processing-time.on-processing-timer`: (key, time) → emitted.
type OnProcessingTimer = wasmtime::component::TypedFunc<(Vec<u8>, i64), (Result<Emitted, String>,)>;

/// `two-input.process-input`: (input, batch) → emitted.
type ProcessInput = wasmtime::component::TypedFunc<(u32, Batch), (Result<Emitted, String>,)>;

/// One operator instance for one subtask.
pub struct OperatorInstance {
    store: Store<InstanceState>,
    bindings: StreamOperator,
    /// `migration.migrate-state`, if the component exports it.
    migrate: Option<MigrateState>,
    /// `two-input.process-input`, if the component exports it.
    process_input: Option<ProcessInput>,
    /// `processing-time.on-processing-timer`, if the component exports it.
    on_processing_timer: Option<OnProcessingTimer>,
    /// `window-function`, if the component exports it.
    pub(super) window: Option<WindowCalls>,
    config: InstanceConfig,
    deadline_ticks: u64,
    poisoned: bool,
}

impl std::fmt::Debug for OperatorInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorInstance")
            .field("config", &self.config)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl OperatorInstance {
    pub(super) fn new(
        engine: &wasmtime::Engine,
        module: &OperatorModule,
        config: InstanceConfig,
    ) -> Result<Self, OperatorError> {
        let (mut store, deadline_ticks) = new_store(engine, &config);
        let instantiated = module
            .pre
            .instance_pre()
            .instantiate(&mut store)
            .and_then(|instance| {
                let bindings = StreamOperator::new(&mut store, &instance)?;
                let migrate =
                    optional_export(&mut store, &instance, MIGRATION_INTERFACE, "migrate-state")?;
                let process_input =
                    optional_export(&mut store, &instance, TWO_INPUT_INTERFACE, "process-input")?;
                let on_processing_timer = optional_export(
                    &mut store,
                    &instance,
                    PROCESSING_TIME_INTERFACE,
                    "on-processing-timer",
                )?;
                let window = WindowCalls::lookup(&mut store, &instance)?;
                Ok((
                    bindings,
                    migrate,
                    process_input,
                    on_processing_timer,
                    window,
                ))
            });
        let (bindings, migrate, process_input, on_processing_timer, window) = instantiated
            .map_err(|e| {
                let mut err = classify(&store, &config.operator, e, config.call_timeout);
                if err.kind == FailureKind::Trap {
                    err.kind = FailureKind::Instantiate;
                }
                err
            })?;
        store.data_mut().fires_processing_timers = on_processing_timer.is_some();
        Ok(OperatorInstance {
            store,
            bindings,
            migrate,
            process_input,
            on_processing_timer,
            window,
            config,
            deadline_ticks,
            poisoned: false,
        })
    }

    /// The operator uid.
    pub fn operator(&self) -> &str {
        &self.config.operator
    }

    /// Gives the instance its keyed state; `key_groups` are the ones this
    /// subtask owns. Must be called before `open` for keyed operators.
    pub fn attach_state(&mut self, backend: Box<dyn KeyedStateBackend>, key_groups: KeyGroupRange) {
        let data = self.store.data_mut();
        data.state = Some(backend);
        data.key_groups = Some(key_groups);
    }

    /// Keeps processing-time timers in the hidden state `state` (declared
    /// after the guest's, see [`PROCESSING_TIMERS_STATE`]), and restores the
    /// ones it holds (a restored backend). Call after
    /// [`OperatorInstance::attach_state`].
    pub fn enable_processing_timers(&mut self, state: u32) -> Result<(), OperatorError> {
        let data = self.store.data_mut();
        data.processing = Some(state);
        let Some(backend) = data.state.as_mut() else {
            return Ok(());
        };
        let mut restored = Vec::new();
        let exported = backend.export_state(state, &mut |_, stored_key, _| {
            if let Some((_, key, time)) = crate::state::layout::decode_key(stored_key)
                && let Ok(time) = <[u8; 8]>::try_from(time)
            {
                restored.push((time_of(time), key.to_vec()));
            }
            Ok(())
        });
        exported.map_err(|e| {
            OperatorError::new(
                &self.config.operator,
                FailureKind::Host,
                format!("restoring processing-time timers: {e}"),
            )
        })?;
        let data = self.store.data_mut();
        data.processing_timers.restore(&mut data.quota, restored);
        Ok(())
    }

    /// The earliest registered processing-time timer, if any.
    pub fn next_processing_timer(&self) -> Option<i64> {
        self.store
            .data()
            .processing_timers
            .iter()
            .next()
            .map(|(t, _)| *t)
    }

    /// Fires every processing-time timer at or before `now` (ms since the
    /// epoch), in time order, through `on-processing-timer`.
    pub fn fire_processing_timers(&mut self, now: i64) -> Result<Vec<Emitted>, OperatorError> {
        let mut out = Vec::new();
        let Some(on_timer) = self.on_processing_timer else {
            return Ok(out);
        };
        loop {
            let data = self.store.data_mut();
            let Some((time, key)) = data.processing_timers.pop_due(&mut data.quota, now) else {
                break;
            };
            if let (Some(state), Some(backend)) = (data.processing, data.state.as_mut()) {
                backend
                    .map_remove(state, &key, &time_bytes(time))
                    .map_err(|e| {
                        OperatorError::new(
                            &self.config.operator,
                            FailureKind::Host,
                            format!("processing-time timers: {e}"),
                        )
                    })?;
            }
            let emitted = guarded_call(
                &mut self.store,
                &mut self.poisoned,
                &self.config,
                self.deadline_ticks,
                "on-processing-timer",
                |store| on_timer.call(store, (key, time)).map(|(r,)| r),
            )?;
            out.push(self.check_output(emitted)?);
        }
        Ok(out)
    }

    /// Writes buffered state updates to the backend (at the end of input).
    pub fn flush_state(&mut self) -> Result<(), OperatorError> {
        if let Some(state) = self.store.data_mut().state.as_mut() {
            state.flush().map_err(|e| {
                OperatorError::new(&self.config.operator, FailureKind::Host, e.to_string())
            })?;
        }
        Ok(())
    }

    /// The keyed state's backend and about how many bytes it takes
    /// (`None`: the instance has no keyed state).
    pub fn state_size(&self) -> Option<crate::taskmanager::StateSize> {
        let state = self.store.data().state.as_ref()?;
        Some((state.kind(), state.size_bytes()))
    }

    /// The synchronous part of a checkpoint: flushes buffered state and
    /// writes the backend's local snapshot into `dir`. `false` when the
    /// instance has no keyed state.
    pub fn snapshot_state(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        let operator = self.config.operator.clone();
        let Some(state) = self.store.data_mut().state.as_mut() else {
            return Ok(false);
        };
        let host = |e: crate::state::StateError| {
            OperatorError::new(&operator, FailureKind::Host, format!("checkpoint: {e}"))
        };
        state.flush().map_err(host)?;
        state.snapshot_local(dir).map_err(host)?;
        Ok(true)
    }

    /// Registered event-time timers, in firing order (for checkpoints).
    pub fn timers(&self) -> Vec<(i64, Vec<u8>)> {
        self.store.data().timers.iter().cloned().collect()
    }

    /// Restores timers from a checkpoint.
    pub fn restore_timers(&mut self, timers: Vec<(i64, Vec<u8>)>) {
        let data = self.store.data_mut();
        data.timers.restore(&mut data.quota, timers);
    }

    /// The guest's counters (from the `metrics` interface).
    pub fn counters(&self) -> &BTreeMap<String, u64> {
        &self.store.data().counters
    }

    /// The guest's gauges.
    pub fn gauges(&self) -> &BTreeMap<String, f64> {
        &self.store.data().gauges
    }

    /// Number of registered timers.
    pub fn pending_timers(&self) -> usize {
        self.store.data().timers.len()
    }

    /// Bytes the host keeps for this instance (timers, metric names),
    /// charged against its memory limit.
    pub fn host_bytes(&self) -> usize {
        self.store.data().quota.used()
    }

    /// Log lines and metric updates dropped so far because they were over
    /// the instance's budgets (see [`super::quota`]).
    pub fn dropped_logs_and_metrics(&self) -> (u64, u64) {
        let quota = &self.store.data().quota;
        (quota.logs_dropped(), quota.metrics_dropped())
    }

    fn call<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&Guest, &mut Store<InstanceState>) -> wasmtime::Result<Result<T, String>>,
    ) -> Result<T, OperatorError> {
        let guest = self.bindings.weir_operator_operator();
        guarded_call(
            &mut self.store,
            &mut self.poisoned,
            &self.config,
            self.deadline_ticks,
            what,
            |store| f(guest, store),
        )
    }

    /// One call of an optional export `what` under the instance's guard.
    pub(super) fn guarded<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Store<InstanceState>) -> wasmtime::Result<Result<T, String>>,
    ) -> Result<T, OperatorError> {
        guarded_call(
            &mut self.store,
            &mut self.poisoned,
            &self.config,
            self.deadline_ticks,
            what,
            f,
        )
    }

    /// An error of this operator.
    pub(super) fn error(&self, kind: FailureKind, message: String) -> OperatorError {
        OperatorError::new(&self.config.operator, kind, message)
    }

    /// The cap on the bytes one call may emit.
    pub(super) fn max_output(&self) -> usize {
        self.config.max_output
    }

    /// Whether the component exports `migration` ([`MIGRATION_INTERFACE`]).
    pub fn can_migrate(&self) -> bool {
        self.migrate.is_some()
    }

    /// Calls `migration.migrate-state` for one stored value (or list
    /// element, or map value) `old` of state `state`, written by operator
    /// version `from_version`; returns the new bytes. Under the instance's
    /// deadline and memory cap like any call; a guest error names the
    /// state. Fails if the component does not export `migration`.
    pub fn migrate_state(
        &mut self,
        state: &str,
        from_version: &str,
        old: &[u8],
    ) -> Result<Vec<u8>, OperatorError> {
        let Some(migrate) = self.migrate else {
            return Err(OperatorError::new(
                &self.config.operator,
                FailureKind::Host,
                format!("cannot migrate state `{state}`: the module does not export `migration`"),
            ));
        };
        let args = (state.to_owned(), from_version.to_owned(), old.to_vec());
        let out = guarded_call(
            &mut self.store,
            &mut self.poisoned,
            &self.config,
            self.deadline_ticks,
            "migrate-state",
            |store| migrate.call(store, args).map(|(r,)| r),
        )?;
        // Bounded like any output: a migration cannot grow one value past
        // what one call may emit.
        if out.len() > self.config.max_output {
            return Err(OperatorError::new(
                &self.config.operator,
                FailureKind::BadOutput,
                format!(
                    "`migrate-state` of state `{state}` returned {} bytes, over the limit of {} bytes",
                    out.len(),
                    self.config.max_output
                ),
            ));
        }
        Ok(out)
    }

    /// Calls `describe`.
    pub fn describe(&mut self) -> Result<OperatorInfo, OperatorError> {
        self.call("describe", |g, s| g.call_describe(s).map(Ok))
    }

    /// Calls `open` with the instance's config.
    pub fn open(&mut self) -> Result<(), OperatorError> {
        let ctx = OpenContext {
            operator_id: self.config.operator.clone(),
            subtask_index: self.config.subtask_index,
            parallelism: self.config.parallelism,
            max_parallelism: u32::from(self.config.max_parallelism),
            config: self.config.config.clone(),
        };
        self.call("open", |g, s| g.call_open(s, &ctx))
    }

    /// Processes one batch.
    pub fn process(&mut self, input: &Batch) -> Result<Emitted, OperatorError> {
        let out = self.call("process", |g, s| g.call_process(s, input))?;
        self.check_output(out)
    }

    /// Whether the component exports `two-input` ([`TWO_INPUT_INTERFACE`]).
    pub fn has_two_inputs(&self) -> bool {
        self.process_input.is_some()
    }

    /// Processes one batch that arrived on input `input`: `process` for
    /// input 0, `two-input.process-input` for input 1.
    pub fn process_input(&mut self, input: u8, batch: &Batch) -> Result<Emitted, OperatorError> {
        if input == 0 {
            return self.process(batch);
        }
        let Some(process_input) = self.process_input else {
            return Err(OperatorError::new(
                &self.config.operator,
                FailureKind::ContractMismatch,
                "a batch arrived on input 1 (`input = \"right\"`), but the module does not \
                 export `weir:operator/two-input` (build it with a two-input function)",
            ));
        };
        let args = (u32::from(input), batch.clone());
        let out = guarded_call(
            &mut self.store,
            &mut self.poisoned,
            &self.config,
            self.deadline_ticks,
            "process-input",
            |store| process_input.call(store, args).map(|(r,)| r),
        )?;
        self.check_output(out)
    }

    /// Advances the watermark: fires every timer at or before it (in time
    /// order), then calls `on-watermark`. Returns everything emitted.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<Emitted>, OperatorError> {
        let mut out = Vec::new();
        if watermark <= self.store.data().watermark {
            return Ok(out);
        }
        self.store.data_mut().watermark = watermark;
        while let Some((time, key)) = self.next_due_timer(watermark) {
            let emitted = self.call("on-timer", |g, s| g.call_on_timer(s, &key, time))?;
            out.push(self.check_output(emitted)?);
        }
        let emitted = self.call("on-watermark", |g, s| g.call_on_watermark(s, watermark))?;
        out.push(self.check_output(emitted)?);
        Ok(out)
    }

    fn next_due_timer(&mut self, watermark: i64) -> Option<(i64, Vec<u8>)> {
        let data = self.store.data_mut();
        data.timers.pop_due(&mut data.quota, watermark)
    }

    /// Calls `close`.
    pub fn close(&mut self) -> Result<Emitted, OperatorError> {
        let out = self.call("close", |g, s| g.call_close(s))?;
        self.check_output(out)
    }

    /// Rejects malformed or oversized output.
    pub(super) fn check_output(&self, out: Emitted) -> Result<Emitted, OperatorError> {
        let mut size = out.main.byte_size();
        let bad = |m: String| OperatorError::new(&self.config.operator, FailureKind::BadOutput, m);
        out.main
            .validate()
            .map_err(|e| bad(format!("main output: {e}")))?;
        for side in &out.side {
            side.records
                .validate()
                .map_err(|e| bad(format!("side output `{}`: {e}", side.tag)))?;
            size += side.records.byte_size();
        }
        if size > self.config.max_output {
            return Err(bad(format!(
                "one call emitted {size} bytes, over the limit of {} bytes",
                self.config.max_output
            )));
        }
        Ok(out)
    }
}

/// One call into the guest under a fresh deadline: a guest `err` is a
/// [`FailureKind::Guest`] failure; a trap poisons the instance.
fn guarded_call<T>(
    store: &mut Store<InstanceState>,
    poisoned: &mut bool,
    config: &InstanceConfig,
    deadline_ticks: u64,
    what: &str,
    f: impl FnOnce(&mut Store<InstanceState>) -> wasmtime::Result<Result<T, String>>,
) -> Result<T, OperatorError> {
    if *poisoned {
        return Err(OperatorError::new(
            &config.operator,
            FailureKind::Host,
            format!("cannot call `{what}`: the instance failed earlier"),
        ));
    }
    arm_deadline(store, deadline_ticks);
    let started = std::time::Instant::now();
    let result = f(store);
    config.telemetry.record_call(
        started.elapsed().as_nanos() as u64,
        store.data().limiter.allocated as u64,
    );
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(message)) => Err(OperatorError::new(
            &config.operator,
            FailureKind::Guest,
            format!("`{what}` returned an error: {message}"),
        )),
        Err(e) => {
            *poisoned = true;
            Err(classify(store, &config.operator, e, config.call_timeout))
        }
    }
}

/// Order-preserving bytes of a processing-time timer's time (the user key
/// in [`PROCESSING_TIMERS_STATE`]).
pub(crate) fn time_bytes(time: i64) -> [u8; 8] {
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

fn time_of(bytes: [u8; 8]) -> i64 {
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// The component's function `function` of the optional interface
/// `interface` (looked up semver-compatibly), if it exports it, with the
/// contract's type.
pub(super) fn optional_export<Params, Results>(
    store: &mut Store<InstanceState>,
    instance: &wasmtime::component::Instance,
    interface: &str,
    function: &str,
) -> wasmtime::Result<Option<wasmtime::component::TypedFunc<Params, Results>>>
where
    Params: wasmtime::component::ComponentNamedList + wasmtime::component::Lower,
    Results: wasmtime::component::ComponentNamedList + wasmtime::component::Lift,
{
    let Some(interface) = instance.get_export_index(&mut *store, None, interface) else {
        return Ok(None);
    };
    let Some(func) = instance.get_export_index(&mut *store, Some(&interface), function) else {
        return Ok(None);
    };
    instance.get_typed_func(store, func).map(Some)
}

/// A store with the sandbox of `config`: WASI with nothing of the host
/// visible, the memory limiter, and the deadline armed for instantiation.
/// Returns it with the deadline of one call, in epoch ticks.
fn new_store(engine: &wasmtime::Engine, config: &InstanceConfig) -> (Store<InstanceState>, u64) {
    let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
    // Nothing of the host is visible: no preopened directories, no
    // arguments, no network, stdout discarded; the environment holds only
    // the attempt number.
    let wasi = WasiCtxBuilder::new()
        .env(ATTEMPT_ENV, config.attempt.to_string())
        .stderr(stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    let data = InstanceState {
        operator: config.operator.clone(),
        subtask_index: config.subtask_index,
        wasi,
        table: ResourceTable::new(),
        limiter: Limiter::new(config.memory_limit),
        ticks_left: 0,
        cancel: config.cancel.clone(),
        stderr,
        state: None,
        key_groups: None,
        max_parallelism: config.max_parallelism,
        timers: Timers::default(),
        processing_timers: Timers::default(),
        processing: None,
        fires_processing_timers: false,
        quota: HostQuota::new(config.memory_limit),
        watermark: i64::MIN,
        counters: BTreeMap::new(),
        gauges: BTreeMap::new(),
        telemetry: config.telemetry.clone(),
    };
    let mut store = Store::new(engine, data);
    store.limiter(|s| &mut s.limiter);
    let deadline_ticks =
        (config.call_timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1;
    store.epoch_deadline_callback(|mut ctx| deadline_tick(ctx.data_mut()));
    arm_deadline(&mut store, deadline_ticks);
    (store, deadline_ticks)
}

/// The guest was interrupted because its job was cancelled or aborted.
#[derive(Debug, thiserror::Error)]
#[error("interrupted: the job was cancelled")]
pub(crate) struct Cancelled;

/// Gives the next call `ticks` epoch ticks. The engine calls
/// [`deadline_tick`] at every tick while guest code runs, so a cancel is
/// seen within one tick (10 ms) even under a long deadline.
fn arm_deadline(store: &mut Store<InstanceState>, ticks: u64) {
    store.data_mut().ticks_left = ticks;
    store.data_mut().quota.new_call();
    store.set_epoch_deadline(1);
}

/// Called by wasmtime once per epoch tick of guest execution: interrupts the
/// call when the job is cancelled or its deadline is used up.
fn deadline_tick(data: &mut InstanceState) -> wasmtime::Result<UpdateDeadline> {
    if data.cancel.load(Ordering::Relaxed) {
        return Err(Cancelled.into());
    }
    data.ticks_left = data.ticks_left.saturating_sub(1);
    if data.ticks_left == 0 {
        return Ok(UpdateDeadline::Interrupt);
    }
    Ok(UpdateDeadline::Continue(1))
}

/// Turns a wasmtime error from a call into a typed failure.
fn classify(
    store: &Store<InstanceState>,
    operator: &str,
    err: wasmtime::Error,
    timeout: Duration,
) -> OperatorError {
    let data = store.data();
    let stderr = String::from_utf8_lossy(&data.stderr.contents())
        .trim()
        .to_string();
    let with_stderr = |m: String| {
        if stderr.is_empty() {
            m
        } else {
            format!("{m}; guest stderr: {}", tail(&stderr, 2000))
        }
    };
    if let Some(desired) = data.limiter.memory_exceeded {
        return OperatorError::new(
            operator,
            FailureKind::OutOfMemory,
            with_stderr(format!(
                "tried to grow its memories and tables to {desired} bytes in all, \
                 over the limit of {} bytes",
                data.limiter.memory_limit
            )),
        );
    }
    // wasmtime's refusal when the limiter's counts (memories, tables,
    // instances) are exceeded.
    let text = format!("{err:#}");
    if text.contains("resource limit exceeded") {
        return OperatorError::new(
            operator,
            FailureKind::OutOfMemory,
            format!(
                "{text} (an instance may have at most {MAX_MEMORIES} memories, \
                 {MAX_TABLES} tables and {MAX_CORE_INSTANCES} core instances)"
            ),
        );
    }
    if err.downcast_ref::<Cancelled>().is_some() {
        return OperatorError::new(operator, FailureKind::Cancelled, Cancelled.to_string());
    }
    if let Some(forbidden) = err.downcast_ref::<super::host::Forbidden>() {
        return OperatorError::new(operator, FailureKind::Forbidden, forbidden.to_string());
    }
    match err.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => OperatorError::new(
            operator,
            FailureKind::OutOfTime,
            format!(
                "a call ran longer than its deadline of {} ms and was interrupted",
                timeout.as_millis()
            ),
        ),
        Some(Trap::StackOverflow) => OperatorError::new(
            operator,
            FailureKind::StackOverflow,
            with_stderr(format!(
                "the guest exhausted its stack ({} KiB)",
                super::MAX_WASM_STACK >> 10
            )),
        ),
        Some(Trap::UnreachableCodeReached) if stderr.contains("panicked") => OperatorError::new(
            operator,
            FailureKind::Panic,
            tail(&stderr, 2000).to_string(),
        ),
        Some(trap) => {
            OperatorError::new(operator, FailureKind::Trap, with_stderr(trap.to_string()))
        }
        None => OperatorError::new(operator, FailureKind::Trap, with_stderr(format!("{err:#}"))),
    }
}

fn tail(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use wasm_encoder::{
        Component, InstanceSection, MemorySection, MemoryType, Module, ModuleArg, ModuleSection,
    };
    use wasmtime::component::Linker;

    use super::*;
    use crate::wasm::{Runtime, RuntimeConfig};

    const MIB: usize = 1 << 20;
    /// Wasm pages per MiB.
    const PAGES_PER_MIB: u64 = 16;

    /// A component whose one core module declares `count` memories of
    /// `mib` MiB each (multi-memory), and instantiates it.
    fn memories_component(count: u32, mib: u64) -> Vec<u8> {
        let mut memories = MemorySection::new();
        for _ in 0..count {
            memories.memory(MemoryType {
                minimum: mib * PAGES_PER_MIB,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            });
        }
        let mut module = Module::new();
        module.section(&memories);
        let mut component = Component::new();
        component.section(&ModuleSection(&module));
        let mut instances = InstanceSection::new();
        instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
        component.section(&instances);
        component.finish()
    }

    /// Instantiates `bytes` in a sandboxed store capped at `limit` bytes;
    /// returns the outcome and the limiter's accounting.
    fn instantiate(bytes: &[u8], limit: usize) -> (Result<(), OperatorError>, usize) {
        let runtime = Runtime::new(RuntimeConfig { cache_dir: None }).unwrap();
        let engine = runtime.engine();
        let component = wasmtime::component::Component::new(engine, bytes).unwrap();
        let mut config = InstanceConfig::new("bomb");
        config.memory_limit = limit;
        let (mut store, _) = new_store(engine, &config);
        let result = Linker::<InstanceState>::new(engine)
            .instantiate(&mut store, &component)
            .map(drop)
            .map_err(|e| classify(&store, "bomb", e, config.call_timeout));
        (result, store.data().limiter.allocated)
    }

    #[test]
    fn memories_share_one_budget() {
        // Each memory alone is under the cap; together they are not.
        let (result, allocated) = instantiate(&memories_component(2, 40), 64 * MIB);
        let err = result.unwrap_err();
        assert_eq!(err.kind, FailureKind::OutOfMemory, "{err}");
        assert!(allocated <= 64 * MIB, "{allocated}");
        // The same two fit a cap of 80 MiB.
        let (result, allocated) = instantiate(&memories_component(2, 40), 80 * MIB);
        result.unwrap();
        assert_eq!(allocated, 80 * MIB);
    }

    #[test]
    fn a_memory_bomb_of_many_memories_is_refused_within_the_cap() {
        // The finding: 24 memories of 64 MiB each under a 128 MiB cap.
        let (result, allocated) = instantiate(&memories_component(24, 64), 128 * MIB);
        let err = result.unwrap_err();
        assert_eq!(err.kind, FailureKind::OutOfMemory, "{err}");
        assert!(allocated <= 128 * MIB, "{allocated}");
        // As many as the count allows: the byte budget stops them.
        let (result, allocated) = instantiate(&memories_component(16, 64), 128 * MIB);
        let err = result.unwrap_err();
        assert_eq!(err.kind, FailureKind::OutOfMemory, "{err}");
        assert!(err.message.contains("in all"), "{err}");
        assert_eq!(allocated, 128 * MIB);
    }

    #[test]
    fn the_number_of_memories_is_capped() {
        // Tiny memories, many of them: each reserves address space.
        let (result, allocated) =
            instantiate(&memories_component(MAX_MEMORIES as u32 + 1, 0), 64 * MIB);
        let err = result.unwrap_err();
        assert_eq!(err.kind, FailureKind::OutOfMemory, "{err}");
        assert!(err.message.contains("at most 16 memories"), "{err}");
        assert_eq!(allocated, 0);
        let (result, _) = instantiate(&memories_component(MAX_MEMORIES as u32, 0), 64 * MIB);
        result.unwrap();
    }

    #[test]
    fn a_cancel_interrupts_a_long_deadline() {
        // Deadline-only interruption would wait `call_timeout`; the cancel
        // flag is checked at every tick.
        let mut data = InstanceConfig::new("spin");
        data.call_timeout = Duration::from_secs(3600);
        let runtime = Runtime::new(RuntimeConfig { cache_dir: None }).unwrap();
        let (mut store, ticks) = new_store(runtime.engine(), &data);
        arm_deadline(&mut store, ticks);
        for _ in 0..100 {
            assert!(matches!(
                deadline_tick(store.data_mut()),
                Ok(UpdateDeadline::Continue(1))
            ));
        }
        data.cancel.store(true, Ordering::Relaxed);
        let Err(err) = deadline_tick(store.data_mut()) else {
            panic!("a cancelled call went on");
        };
        assert!(err.downcast_ref::<Cancelled>().is_some(), "{err:#}");
        let classified = classify(&store, "spin", err, data.call_timeout);
        assert_eq!(classified.kind, FailureKind::Cancelled);
    }

    #[test]
    fn the_deadline_interrupts_after_its_ticks() {
        let mut config = InstanceConfig::new("spin");
        config.call_timeout = EPOCH_TICK * 5;
        let runtime = Runtime::new(RuntimeConfig { cache_dir: None }).unwrap();
        let (mut store, ticks) = new_store(runtime.engine(), &config);
        arm_deadline(&mut store, ticks);
        let mut continued = 0;
        while let Ok(UpdateDeadline::Continue(1)) = deadline_tick(store.data_mut()) {
            continued += 1;
        }
        assert_eq!(continued, ticks - 1);
    }

    #[test]
    fn timers_and_metrics_a_guest_registers_are_charged_to_it() {
        use crate::wasm::bindings::weir::operator::{metrics, timers};
        let mut config = InstanceConfig::new("timer-bomb");
        config.memory_limit = 64 << 10;
        let runtime = Runtime::new(RuntimeConfig { cache_dir: None }).unwrap();
        let (mut store, _) = new_store(runtime.engine(), &config);
        let data = store.data_mut();
        data.key_groups = Some(crate::state::KeyGroupRange {
            start: 0,
            end: data.max_parallelism,
        });
        let mut registered = 0u32;
        let err = loop {
            let key = registered.to_be_bytes().to_vec();
            match timers::Host::register_event_timer(data, key, i64::from(registered)) {
                Ok(()) => registered += 1,
                Err(e) => break e,
            }
            assert!(registered < 100_000, "timers are not bounded");
        };
        assert!(format!("{err:?}").contains("at its limit"), "{err:?}");
        assert!(data.quota.used() <= config.memory_limit);
        assert_eq!(data.timers.len(), registered as usize);
        // Metric names share the budget: none fits now.
        metrics::Host::counter_add(data, "records".into(), 1);
        assert!(data.counters.is_empty());
    }

    #[test]
    fn the_hidden_timer_state_is_not_the_guests_and_processing_timers_need_the_export() {
        use crate::state::{BackendConfig, BackendKind, KeyGroupRange, StateDescriptor, StateKind};
        use crate::wasm::bindings::weir::operator::{state, timers};
        let config = InstanceConfig::new("hidden");
        let runtime = Runtime::new(RuntimeConfig { cache_dir: None }).unwrap();
        let (mut store, _) = new_store(runtime.engine(), &config);
        let states = [
            StateDescriptor {
                name: "mine".into(),
                kind: StateKind::Value,
                ttl: None,
            },
            StateDescriptor {
                name: PROCESSING_TIMERS_STATE.into(),
                kind: StateKind::Map,
                ttl: None,
            },
        ];
        let range = KeyGroupRange::all(128);
        let backend = crate::state::open_backend(BackendConfig {
            kind: BackendKind::Heap,
            dir: std::path::Path::new("/nonexistent"),
            states: &states,
            key_groups: range,
            max_parallelism: 128,
        })
        .unwrap();
        let data = store.data_mut();
        data.state = Some(backend);
        data.key_groups = Some(range);
        data.max_parallelism = 128;
        data.processing = Some(1);
        // The guest's own state works; the host's hidden one is unknown to it.
        state::Host::value_set(data, 0, b"k".to_vec(), b"v".to_vec()).unwrap();
        for call in [
            state::Host::map_entries(data, 1, b"k".to_vec()).map(|_| ()),
            state::Host::map_put(data, 1, b"k".to_vec(), b"t".to_vec(), Vec::new()),
            state::Host::clear(data, 1, b"k".to_vec()),
        ] {
            assert!(
                matches!(call, Err(state::StateError::UnknownState(1))),
                "{call:?}"
            );
        }
        // Without the `processing-time` export a timer could never fire.
        let refused = timers::Host::register_processing_timer(data, b"k".to_vec(), 5);
        assert!(
            format!("{refused:?}").contains("processing-time"),
            "{refused:?}"
        );
        // With it, the timer lands in the hidden state too (so checkpoints keep it).
        data.fires_processing_timers = true;
        timers::Host::register_processing_timer(data, b"k".to_vec(), 5).unwrap();
        let stored = data.state.as_mut().unwrap().map_entries(1, b"k").unwrap();
        assert_eq!(stored, [(time_bytes(5).to_vec(), Vec::new())]);
        timers::Host::delete_processing_timer(data, b"k".to_vec(), 5).unwrap();
        assert!(
            data.state
                .as_mut()
                .unwrap()
                .map_entries(1, b"k")
                .unwrap()
                .is_empty()
        );
        assert_eq!(data.processing_timers.len(), 0);
    }
}
