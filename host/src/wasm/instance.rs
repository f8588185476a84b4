//! One sandboxed operator instance: its `Store`, limits, keyed state, timers,
//! and the typed calls into the guest's lifecycle.
//!
//! Every call sets a fresh epoch deadline, and every failure is turned into
//! an [`OperatorError`] with a [`FailureKind`]. After a trap the instance is
//! poisoned: wasmtime does not allow re-entering it, and neither do we.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::StreamOperator;
use super::bindings::exports::weir::operator::operator::Guest;
use super::bindings::weir::operator::types::{Emitted, OpenContext, OperatorInfo};
use super::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_OUTPUT, DEFAULT_MEMORY_LIMIT, EPOCH_TICK, FailureKind,
    OperatorError, OperatorModule, STDERR_CAPTURE,
};
use crate::record::Batch;
use crate::state::{KeyGroupRange, KeyedStateBackend};

/// Largest table an instance may grow (function references); generous for
/// any compiled language runtime, small enough to bound memory.
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
}

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
        }
    }
}

/// Caps memory and tables, and remembers that the memory cap was hit so the
/// resulting trap is reported as out-of-memory.
pub(crate) struct Limiter {
    memory_limit: usize,
    pub(crate) memory_exceeded: Option<usize>,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.memory_exceeded = Some(desired);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Per-instance data the host functions see.
pub(crate) struct InstanceState {
    pub(crate) operator: String,
    pub(crate) subtask_index: u32,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    stderr: MemoryOutputPipe,
    pub(crate) state: Option<Box<dyn KeyedStateBackend>>,
    pub(crate) key_groups: Option<KeyGroupRange>,
    pub(crate) max_parallelism: u16,
    /// Registered event-time timers, ordered by time.
    pub(crate) timers: BTreeSet<(i64, Vec<u8>)>,
    pub(crate) watermark: i64,
    pub(crate) counters: BTreeMap<String, u64>,
    pub(crate) gauges: BTreeMap<String, f64>,
}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// One operator instance for one subtask.
pub struct OperatorInstance {
    store: Store<InstanceState>,
    bindings: StreamOperator,
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
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        // Nothing of the host is visible: no preopened directories, no
        // environment, no arguments, no network, stdout discarded.
        let wasi = WasiCtxBuilder::new()
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
            limiter: Limiter {
                memory_limit: config.memory_limit,
                memory_exceeded: None,
            },
            stderr,
            state: None,
            key_groups: None,
            max_parallelism: config.max_parallelism,
            timers: BTreeSet::new(),
            watermark: i64::MIN,
            counters: BTreeMap::new(),
            gauges: BTreeMap::new(),
        };
        let mut store = Store::new(engine, data);
        store.limiter(|s| &mut s.limiter);
        let deadline_ticks =
            (config.call_timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1;
        store.set_epoch_deadline(deadline_ticks);
        let bindings = module.pre.instantiate(&mut store).map_err(|e| {
            let mut err = classify(&store, &config.operator, e, config.call_timeout);
            if err.kind == FailureKind::Trap {
                err.kind = FailureKind::Instantiate;
            }
            err
        })?;
        Ok(OperatorInstance {
            store,
            bindings,
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

    /// Writes buffered state updates to the backend (at the end of input).
    pub fn flush_state(&mut self) -> Result<(), OperatorError> {
        if let Some(state) = self.store.data_mut().state.as_mut() {
            state.flush().map_err(|e| {
                OperatorError::new(&self.config.operator, FailureKind::Host, e.to_string())
            })?;
        }
        Ok(())
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
        self.store.data_mut().timers.extend(timers);
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

    fn call<T>(
        &mut self,
        what: &str,
        f: impl FnOnce(&Guest, &mut Store<InstanceState>) -> wasmtime::Result<Result<T, String>>,
    ) -> Result<T, OperatorError> {
        if self.poisoned {
            return Err(OperatorError::new(
                &self.config.operator,
                FailureKind::Host,
                format!("cannot call `{what}`: the instance failed earlier"),
            ));
        }
        self.store.set_epoch_deadline(self.deadline_ticks);
        let guest = self.bindings.weir_operator_operator();
        match f(guest, &mut self.store) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(OperatorError::new(
                &self.config.operator,
                FailureKind::Guest,
                format!("`{what}` returned an error: {message}"),
            )),
            Err(e) => {
                self.poisoned = true;
                Err(classify(
                    &self.store,
                    &self.config.operator,
                    e,
                    self.config.call_timeout,
                ))
            }
        }
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
        let timers = &mut self.store.data_mut().timers;
        match timers.first() {
            Some((t, _)) if *t <= watermark => timers.pop_first(),
            _ => None,
        }
    }

    /// Calls `close`.
    pub fn close(&mut self) -> Result<Emitted, OperatorError> {
        let out = self.call("close", |g, s| g.call_close(s))?;
        self.check_output(out)
    }

    /// Rejects malformed or oversized output.
    fn check_output(&self, out: Emitted) -> Result<Emitted, OperatorError> {
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
                "tried to grow linear memory to {desired} bytes, over the limit of {} bytes",
                data.limiter.memory_limit
            )),
        );
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
