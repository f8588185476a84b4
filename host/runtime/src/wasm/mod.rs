//! The Wasm runtime: one wasmtime [`Engine`] per process, a compiled-component
//! cache on disk, and sandboxed operator instances.
//!
//! # Key types
//!
//! - [`Runtime`]: the engine, the linker with Weir's host functions and WASI,
//!   the epoch ticker that enforces per-call deadlines, and the cache.
//! - [`OperatorModule`]: a compiled component checked against the contract
//!   (world `stream-operator`), ready to instantiate many times.
//! - [`OperatorInstance`]: one instance per subtask, with its own `Store`,
//!   memory cap, deadline, stderr capture, keyed state backend and timers.
//! - [`OperatorError`]: every way a guest can fail, typed by [`FailureKind`]
//!   and naming the operator uid.
//!
//! # Invariants
//!
//! - An instance never escapes its sandbox: no preopened directories, no
//!   network, no arguments, an environment of only [`ATTEMPT_ENV`]; memory,
//!   stack, CPU time per call and output size are capped.
//! - A guest failure is an `Err` value, never a panic of the host; after a
//!   trap the instance is not called again.
//! - Host functions check every state access against the subtask's key groups
//!   (done by the [`crate::state`] backend).
//!
//! # Profiling guests
//!
//! With [`PERF_MAP_ENV`]` = 1` in the daemon's environment the engine writes
//! `/tmp/perf-<pid>.map` naming every compiled guest function, so `perf
//! report` shows guest frames by name instead of `[JIT]` addresses (see
//! `benches/README.md`, "Profiling").
//!
//! This module must not know about job graphs, channels or connectors.

mod cache;
mod host;
mod instance;
mod quota;
mod window_function;

pub use cache::CacheOutcome;
pub use instance::{
    ATTEMPT_ENV, CONTRACT_VERSION, InstanceConfig, MIGRATION_INTERFACE, OperatorInstance,
    PROCESSING_TIME_INTERFACE, PROCESSING_TIMERS_STATE, TWO_INPUT_INTERFACE, is_contract_interface,
};
pub use quota::{LOG_BYTES_PER_CALL, MAX_LOG_LINE, MAX_METRIC_NAME, MAX_METRICS};
pub use window_function::{Accumulated, WINDOW_FUNCTION_INTERFACE, WindowFunctionKind, WitWindow};

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use instance::InstanceState;

pub use crate::contract as bindings;

pub use bindings::weir::operator::types::{OperatorInfo, StateDescriptor, StateKind};

/// Set to `1` to have the engine write a perf map of guest code
/// (wasmtime's `ProfilingStrategy::PerfMap`): for profiling, off by default.
pub const PERF_MAP_ENV: &str = "WEIR_PERF_MAP";

/// How often the epoch ticker advances the engine's epoch. Call deadlines are
/// whole multiples of this; 10 ms keeps the ticker's cost negligible while a
/// runaway guest is stopped within one tick of its deadline.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Default cap on one instance's linear memory. Enough for a keyed operator's
/// working set (state lives in the host), small enough that a machine can run
/// hundreds of subtasks.
pub const DEFAULT_MEMORY_LIMIT: usize = 64 << 20;

/// Default CPU deadline for one call into a guest. A batch of 4096 records
/// takes milliseconds; ten seconds is only ever reached by a runaway guest.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Default cap on the bytes one call may emit (keys, values and metadata).
pub const DEFAULT_MAX_OUTPUT: usize = 16 << 20;

/// Native stack a guest may use. wasmtime's default; named so that a deep
/// recursion fails as a stack overflow here rather than anywhere else.
pub const MAX_WASM_STACK: usize = 512 << 10;

/// Bytes of a guest's stderr kept for error messages (a Rust panic message
/// goes there).
pub const STDERR_CAPTURE: usize = 64 << 10;

/// What can go wrong in a guest, as the restart strategy and the user need to
/// tell it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// The file could not be read.
    ModuleNotFound,
    /// The bytes are not a Wasm component (a core module, or not Wasm at all).
    NotAComponent,
    /// A component that does not implement `weir:operator/stream-operator`.
    ContractMismatch,
    /// Instantiation failed (e.g. the start function trapped).
    Instantiate,
    /// The guest trapped (other than the cases below).
    Trap,
    /// The guest panicked (a trap with a panic message on stderr).
    Panic,
    /// The call exceeded its CPU deadline.
    OutOfTime,
    /// The guest tried to grow its memory past the cap.
    OutOfMemory,
    /// The guest exhausted its stack.
    StackOverflow,
    /// The guest's output was malformed or over the size limit.
    BadOutput,
    /// The guest returned an error (`err(...)` from a lifecycle call).
    Guest,
    /// The guest called something the sandbox forbids (e.g. sleeping).
    Forbidden,
    /// The host failed (state backend, internal error).
    Host,
    /// The call was interrupted because the job was cancelled or aborted:
    /// not the operator's fault, and not a root cause.
    Cancelled,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            FailureKind::ModuleNotFound => "module not found",
            FailureKind::NotAComponent => "not a component",
            FailureKind::ContractMismatch => "contract mismatch",
            FailureKind::Instantiate => "instantiation failed",
            FailureKind::Trap => "trap",
            FailureKind::Panic => "panic",
            FailureKind::OutOfTime => "out of time",
            FailureKind::OutOfMemory => "out of memory",
            FailureKind::StackOverflow => "stack overflow",
            FailureKind::BadOutput => "bad output",
            FailureKind::Guest => "operator error",
            FailureKind::Forbidden => "forbidden by the sandbox",
            FailureKind::Host => "host error",
            FailureKind::Cancelled => "cancelled",
        };
        f.write_str(s)
    }
}

/// A failure of an operator, naming the operator and the kind.
#[derive(Debug, Clone, thiserror::Error)]
#[error("operator `{operator}`: {kind}: {message}")]
pub struct OperatorError {
    /// The operator's uid (or the module path when loading).
    pub operator: String,
    /// What went wrong.
    pub kind: FailureKind,
    /// Details for a human.
    pub message: String,
}

impl OperatorError {
    pub(crate) fn new(operator: &str, kind: FailureKind, message: impl Into<String>) -> Self {
        OperatorError {
            operator: operator.to_string(),
            kind,
            message: message.into(),
        }
    }
}

/// Settings for the process-wide [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
}

impl RuntimeConfig {
    /// The default cache location: `$WEIR_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/weir/components`, else `~/.cache/weir/components`.
    pub fn default_cache_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
            return Some(PathBuf::from(dir));
        }
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("weir").join("components"))
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: Self::default_cache_dir(),
        }
    }
}

/// Counters of the compiled-component cache, for tests and the run summary.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Components loaded from the cache without compiling.
    pub hits: AtomicU64,
    /// Components compiled (and then stored).
    pub misses: AtomicU64,
}

/// The process-wide Wasm runtime.
pub struct Runtime {
    engine: Engine,
    linker: Linker<InstanceState>,
    cache_dir: Option<PathBuf>,
    stats: Arc<CacheStats>,
    /// Modules loaded and still in use, by content hash: a second load of
    /// the same bytes while the first is alive (the embedded cluster's
    /// JobManager checks a module, then its TaskManager runs it) shares it
    /// instead of compiling or deserializing again. Weak: it keeps nothing
    /// alive.
    loaded: Mutex<HashMap<String, Weak<OperatorModule>>>,
    ticker_stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("cache_dir", &self.cache_dir)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Creates the engine, the linker and the epoch ticker. Fails when the
    /// cache folder cannot be made private (see [`cache`]).
    pub fn new(config: RuntimeConfig) -> Result<Runtime, OperatorError> {
        if let Some(dir) = &config.cache_dir {
            cache::prepare_dir(dir)
                .map_err(|e| OperatorError::new("<cache>", FailureKind::Host, e))?;
        }
        let mut cfg = Config::new();
        cfg.wasm_component_model(true)
            .epoch_interruption(true)
            .max_wasm_stack(MAX_WASM_STACK)
            .cranelift_opt_level(wasmtime::OptLevel::Speed);
        if std::env::var_os(PERF_MAP_ENV).is_some_and(|v| v == "1") {
            cfg.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&cfg)
            .map_err(|e| OperatorError::new("<engine>", FailureKind::Host, e.to_string()))?;
        let mut linker = Linker::new(&engine);
        host::add_to_linker(&mut linker)
            .map_err(|e| OperatorError::new("<engine>", FailureKind::Host, e.to_string()))?;

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let engine = engine.clone();
            let stop = ticker_stop.clone();
            std::thread::Builder::new()
                .name("weir-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| OperatorError::new("<engine>", FailureKind::Host, e.to_string()))?
        };
        Ok(Runtime {
            engine,
            linker,
            cache_dir: config.cache_dir,
            stats: Arc::default(),
            loaded: Mutex::default(),
            ticker_stop,
            ticker: Some(ticker),
        })
    }

    /// The engine (shared by every instance in the process).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Cache hit and miss counters.
    pub fn cache_stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Loads a component from a file: from the compiled cache when the same
    /// bytes were compiled before, else compiles (and caches) it; then checks
    /// it against the contract.
    pub fn load(&self, path: &Path) -> Result<Arc<OperatorModule>, OperatorError> {
        let (name, bytes) = read_module(path)?;
        self.load_bytes(&name, &bytes)
    }

    /// Like [`Runtime::load`], from bytes; `name` is used in errors. The
    /// same bytes loaded while an earlier load is alive return that module
    /// (counted neither as a cache hit nor as a compile).
    pub fn load_bytes(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<Arc<OperatorModule>, OperatorError> {
        let hash = cache::content_hash(bytes);
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(module) = loaded.get(&hash).and_then(Weak::upgrade) {
            return Ok(module);
        }
        loaded.retain(|_, m| m.strong_count() > 0);
        drop(loaded);
        let (component, outcome, hash) = self.compile(name, bytes)?;
        let module = self.check_contract(name, hash, outcome, component)?;
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(module.hash.clone(), Arc::downgrade(&module));
        Ok(module)
    }

    /// Checks the header, then compiles `bytes` or loads them from the
    /// cache, counting the outcome.
    fn compile(
        &self,
        name: &str,
        bytes: &[u8],
    ) -> Result<(Component, CacheOutcome, String), OperatorError> {
        check_component_header(name, bytes)?;
        let compiled = cache::compile_cached(&self.engine, self.cache_dir.as_deref(), name, bytes)?;
        match compiled.1 {
            CacheOutcome::Hit => self.stats.hits.fetch_add(1, Ordering::Relaxed),
            CacheOutcome::Miss | CacheOutcome::Disabled => {
                self.stats.misses.fetch_add(1, Ordering::Relaxed)
            }
        };
        Ok(compiled)
    }

    /// Links a compiled component against the contract's imports and checks
    /// its exports.
    fn check_contract(
        &self,
        name: &str,
        hash: String,
        cache: CacheOutcome,
        component: Component,
    ) -> Result<Arc<OperatorModule>, OperatorError> {
        let pre = self.linker.instantiate_pre(&component).map_err(|e| {
            OperatorError::new(
                name,
                FailureKind::ContractMismatch,
                format!(
                    "the component's imports do not match weir:operator@0.1.x \
                     (world stream-operator): {e:#}"
                ),
            )
        })?;
        let pre = bindings::StreamOperatorPre::new(pre).map_err(|e| {
            OperatorError::new(
                name,
                FailureKind::ContractMismatch,
                format!(
                    "the component does not export weir:operator/operator@0.1.x \
                     as world stream-operator requires: {e:#}"
                ),
            )
        })?;
        Ok(Arc::new(OperatorModule {
            name: name.to_string(),
            hash,
            cache,
            component,
            pre,
        }))
    }

    /// Everything `weir inspect` shows about a component: its imports and
    /// exports, and whether (and how) it fits the contract.
    pub fn inspect(&self, path: &Path) -> Result<Inspection, OperatorError> {
        let (name, bytes) = read_module(path)?;
        let (component, outcome, hash) = self.compile(&name, &bytes)?;
        let ty = component.component_type();
        let imports = ty
            .imports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        let exports = ty
            .exports(&self.engine)
            .map(|(n, _)| n.to_string())
            .collect();
        // Compiled once: the contract check reuses the component.
        let contract = self
            .check_contract(&name, hash.clone(), outcome, component)
            .and_then(|m| self.describe(&m))
            .map_err(|e| e.message);
        Ok(Inspection {
            hash,
            size: bytes.len(),
            imports,
            exports,
            contract,
        })
    }

    /// Whether `module` exports the optional `migration` interface
    /// ([`MIGRATION_INTERFACE`]): it can migrate state an older version of
    /// the operator wrote, when a job is upgraded.
    pub fn exports_migration(&self, module: &OperatorModule) -> bool {
        module
            .component
            .component_type()
            .exports(&self.engine)
            .any(|(name, _)| is_contract_interface(name, "migration"))
    }

    /// Whether `module` exports the optional `two-input` interface
    /// ([`TWO_INPUT_INTERFACE`]): it can take a second input.
    pub fn exports_two_input(&self, module: &OperatorModule) -> bool {
        module
            .component
            .component_type()
            .exports(&self.engine)
            .any(|(name, _)| is_contract_interface(name, "two-input"))
    }

    /// Instantiates `module` for one subtask.
    pub fn instantiate(
        &self,
        module: &OperatorModule,
        config: InstanceConfig,
    ) -> Result<OperatorInstance, OperatorError> {
        OperatorInstance::new(&self.engine, module, config)
    }

    /// Instantiates `module` without state and calls `describe`, under the
    /// default memory cap ([`DEFAULT_MEMORY_LIMIT`]).
    pub fn describe(&self, module: &OperatorModule) -> Result<OperatorInfo, OperatorError> {
        self.describe_within(module, DEFAULT_MEMORY_LIMIT)
    }

    /// [`Runtime::describe`] in an instance capped at `memory_limit` bytes
    /// (and never above the default): the cap of the operator in its job,
    /// so that an operator whose instantiation alone exceeds it is refused
    /// when the job is checked, not after it was deployed.
    pub fn describe_within(
        &self,
        module: &OperatorModule,
        memory_limit: usize,
    ) -> Result<OperatorInfo, OperatorError> {
        let mut config = InstanceConfig::new(&module.name);
        config.memory_limit = memory_limit.min(DEFAULT_MEMORY_LIMIT);
        let mut instance = self.instantiate(module, config)?;
        instance.describe()
    }

    /// [`Runtime::describe_within`], and what `module`'s window function is
    /// (`None`: it does not export `window-function`), from one instance.
    pub fn describe_with_window_kind(
        &self,
        module: &OperatorModule,
        memory_limit: usize,
    ) -> Result<(OperatorInfo, Option<WindowFunctionKind>), OperatorError> {
        let mut config = InstanceConfig::new(&module.name);
        config.memory_limit = memory_limit.min(DEFAULT_MEMORY_LIMIT);
        let mut instance = self.instantiate(module, config)?;
        Ok((instance.describe()?, instance.window_function_kind()?))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

/// What `weir inspect` reports.
#[derive(Debug)]
pub struct Inspection {
    /// SHA-256 of the file, hex.
    pub hash: String,
    /// File size in bytes.
    pub size: usize,
    /// Interfaces the component imports.
    pub imports: Vec<String>,
    /// Interfaces the component exports.
    pub exports: Vec<String>,
    /// The operator's self-description if it fits the contract, else why not.
    pub contract: Result<OperatorInfo, String>,
}

impl Inspection {
    /// The contract version the component was built against: the version
    /// of the `weir:operator/operator` interface it exports (`0.1.0`,
    /// `0.1.1`, …), if it exports one.
    pub fn contract_version(&self) -> Option<&str> {
        self.exports
            .iter()
            .find_map(|e| e.strip_prefix("weir:operator/operator@"))
    }
}

/// A compiled component that implements the contract.
pub struct OperatorModule {
    name: String,
    hash: String,
    cache: CacheOutcome,
    component: Component,
    pre: bindings::StreamOperatorPre<InstanceState>,
}

impl fmt::Debug for OperatorModule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorModule")
            .field("name", &self.name)
            .field("hash", &self.hash)
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

impl OperatorModule {
    /// The name it was loaded under (usually the path).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// SHA-256 of the component bytes, hex.
    pub fn hash(&self) -> &str {
        &self.hash
    }
    /// Whether loading hit the compiled cache.
    pub fn cache_outcome(&self) -> CacheOutcome {
        self.cache
    }
    /// The compiled component.
    pub fn component(&self) -> &Component {
        &self.component
    }
}

/// Reads a module file; the name for errors is its path.
fn read_module(path: &Path) -> Result<(String, Vec<u8>), OperatorError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        OperatorError::new(
            &name,
            FailureKind::ModuleNotFound,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    Ok((name, bytes))
}

/// Rejects bytes that are not a component with a message that says what they are.
fn check_component_header(name: &str, bytes: &[u8]) -> Result<(), OperatorError> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(OperatorError::new(
            name,
            FailureKind::NotAComponent,
            "not a WebAssembly file (no \\0asm header)",
        ));
    }
    // Bytes 4..8: version and layer. Core modules are version 1, layer 0;
    // components have layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(OperatorError::new(
            name,
            FailureKind::NotAComponent,
            "this is a core WebAssembly module, not a component: build it for \
             wasm32-wasip2 (cargo build --target wasm32-wasip2) or wrap it with \
             `wasm-tools component new`",
        ));
    }
    Ok(())
}
