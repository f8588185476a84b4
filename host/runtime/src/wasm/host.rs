//! Host functions imported by operators: keyed state, timers, logging and
//! metrics, plus WASI (sandboxed: see [`super::instance`]).
//!
//! Log lines and metrics go to the instance's
//! [`OperatorTelemetry`](crate::telemetry::OperatorTelemetry) (a bounded,
//! rate-limited ring per subtask, which the TaskManager ships to the
//! JobManager and serves on `/metrics`); a line kept there is also printed
//! through `tracing` (target `weir::guest`), as `weir run` shows it.
//!
//! State calls are forwarded to the instance's [`crate::state`] backend,
//! which checks the state id, its kind and the key's key group.

use wasmtime::component::{HasSelf, Linker, Resource};
use wasmtime_wasi::p2::DynPollable;

use super::bindings::StreamOperator;
use super::bindings::weir::operator::{log, metrics, state, timers, types};
use super::instance::InstanceState;
use crate::state::{StateError, key_group_of};
use crate::telemetry::logs::LogLevel;

/// The WASI clocks interface whose timer subscriptions Weir replaces
/// (the version wasmtime-wasi 48 links; guests importing any 0.2.x match).
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Why a guest was stopped for waiting on a timer.
pub(crate) const SLEEP_FORBIDDEN: &str = "the operator tried to sleep or wait on a timer \
     (wasi:clocks/monotonic-clock subscribe), which the sandbox forbids: \
     operators must not block";

/// A guest call that the sandbox refuses; fails the task as
/// [`super::FailureKind::Forbidden`].
#[derive(Debug)]
pub(crate) struct Forbidden(pub(crate) &'static str);

impl std::fmt::Display for Forbidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Forbidden {}

/// Adds WASI and Weir's interfaces to `linker`.
///
/// WASI's timer subscriptions are replaced by functions that trap: a host
/// call that blocks cannot be interrupted by the epoch deadline, so a guest
/// that sleeps would hold its subtask's thread for as long as it asked.
/// Without preopens and network, and with an empty stdin, nothing else in
/// WASI can block.
pub(super) fn add_to_linker(linker: &mut Linker<InstanceState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    for name in ["subscribe-duration", "subscribe-instant"] {
        clock.func_wrap(
            name,
            |_, (_,): (u64,)| -> wasmtime::Result<(Resource<DynPollable>,)> {
                Err(wasmtime::Error::new(Forbidden(SLEEP_FORBIDDEN)))
            },
        )?;
    }
    linker.allow_shadowing(false);
    StreamOperator::add_to_linker::<InstanceState, HasSelf<InstanceState>>(linker, |s| s)?;
    Ok(())
}

fn to_wit(e: StateError) -> state::StateError {
    match e {
        StateError::UnknownState(id) => state::StateError::UnknownState(id),
        StateError::WrongKind { state, .. } => state::StateError::WrongKind(state),
        StateError::KeyOutOfRange { .. } => state::StateError::KeyOutOfRange,
        other => state::StateError::Backend(other.to_string()),
    }
}

impl InstanceState {
    fn backend(
        &mut self,
    ) -> Result<&mut Box<dyn crate::state::KeyedStateBackend>, state::StateError> {
        let operator = &self.operator;
        self.state.as_mut().ok_or_else(|| {
            state::StateError::Backend(format!(
                "operator `{operator}` has no keyed state: declare state in `describe` \
                 and give the operator a `key_by` in the job spec"
            ))
        })
    }

    /// The backend, for a guest call on state `state`: the host's hidden
    /// states (after the guest's) are not the guest's to touch.
    fn guest_backend(
        &mut self,
        state: u32,
    ) -> Result<&mut Box<dyn crate::state::KeyedStateBackend>, state::StateError> {
        if self.processing.is_some_and(|hidden| state >= hidden) {
            return Err(state::StateError::UnknownState(state));
        }
        self.backend()
    }

    fn check_key(&self, key: &[u8]) -> Result<(), state::StateError> {
        let Some(range) = self.key_groups else {
            return Err(state::StateError::Backend(format!(
                "operator `{}` is not keyed: give it a `key_by` in the job spec to use timers",
                self.operator
            )));
        };
        if range.contains(key_group_of(key, self.max_parallelism)) {
            Ok(())
        } else {
            Err(state::StateError::KeyOutOfRange)
        }
    }
}

impl types::Host for InstanceState {}

impl state::Host for InstanceState {
    fn value_get(
        &mut self,
        state: u32,
        key: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, state::StateError> {
        self.guest_backend(state)?
            .value_get(state, &key)
            .map_err(to_wit)
    }

    fn value_set(
        &mut self,
        state: u32,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), state::StateError> {
        self.guest_backend(state)?
            .value_set(state, &key, &value)
            .map_err(to_wit)
    }

    fn list_get(&mut self, state: u32, key: Vec<u8>) -> Result<Vec<Vec<u8>>, state::StateError> {
        self.guest_backend(state)?
            .list_get(state, &key)
            .map_err(to_wit)
    }

    fn list_add(
        &mut self,
        state: u32,
        key: Vec<u8>,
        element: Vec<u8>,
    ) -> Result<(), state::StateError> {
        self.guest_backend(state)?
            .list_add(state, &key, &element)
            .map_err(to_wit)
    }

    fn map_get(
        &mut self,
        state: u32,
        key: Vec<u8>,
        user_key: Vec<u8>,
    ) -> Result<Option<Vec<u8>>, state::StateError> {
        self.guest_backend(state)?
            .map_get(state, &key, &user_key)
            .map_err(to_wit)
    }

    fn map_put(
        &mut self,
        state: u32,
        key: Vec<u8>,
        user_key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<(), state::StateError> {
        self.guest_backend(state)?
            .map_put(state, &key, &user_key, &value)
            .map_err(to_wit)
    }

    fn map_remove(
        &mut self,
        state: u32,
        key: Vec<u8>,
        user_key: Vec<u8>,
    ) -> Result<(), state::StateError> {
        self.guest_backend(state)?
            .map_remove(state, &key, &user_key)
            .map_err(to_wit)
    }

    fn map_entries(
        &mut self,
        state: u32,
        key: Vec<u8>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, state::StateError> {
        self.guest_backend(state)?
            .map_entries(state, &key)
            .map_err(to_wit)
    }

    fn clear(&mut self, state: u32, key: Vec<u8>) -> Result<(), state::StateError> {
        self.guest_backend(state)?
            .clear(state, &key)
            .map_err(to_wit)
    }

    fn value_get_many(
        &mut self,
        state: u32,
        keys: state::Packed,
    ) -> Result<state::Packed, state::StateError> {
        let keys = unpack(&keys)?
            .into_iter()
            .map(|key| key.ok_or_else(|| bad_packed("an absent key")))
            .collect::<Result<Vec<_>, _>>()?;
        let backend = self.guest_backend(state)?;
        let mut data = Vec::new();
        let mut found = Vec::with_capacity(keys.len());
        backend
            .value_get_many_into(state, &keys, &mut data, &mut found)
            .map_err(to_wit)?;
        let lens = found
            .into_iter()
            .map(|len| len.map_or(Ok(-1), packed_len))
            .collect::<Result<_, _>>()?;
        Ok(state::Packed { lens, data })
    }

    fn value_set_many(
        &mut self,
        state: u32,
        keys: state::Packed,
        values: state::Packed,
    ) -> Result<(), state::StateError> {
        let (keys, values) = (unpack(&keys)?, unpack(&values)?);
        if keys.len() != values.len() {
            return Err(bad_packed(&format!(
                "{} keys but {} values",
                keys.len(),
                values.len()
            )));
        }
        // Every key is checked before the first write, so a refused call
        // changes nothing.
        let keys = keys
            .into_iter()
            .map(|key| key.ok_or_else(|| bad_packed("an absent key")))
            .collect::<Result<Vec<_>, _>>()?;
        if self.key_groups.is_some() {
            keys.iter().try_for_each(|key| self.check_key(key))?;
        }
        let backend = self.guest_backend(state)?;
        for (key, value) in keys.into_iter().zip(values) {
            match value {
                Some(value) => backend.value_set(state, key, value),
                None => backend.clear(state, key),
            }
            .map_err(to_wit)?;
        }
        Ok(())
    }
}

/// The entries of a `packed` (`None`: absent), or why it is malformed.
fn unpack(packed: &state::Packed) -> Result<Vec<Option<&[u8]>>, state::StateError> {
    let mut entries = Vec::with_capacity(packed.lens.len());
    let mut at = 0usize;
    for (i, &len) in packed.lens.iter().enumerate() {
        if len == -1 {
            entries.push(None);
            continue;
        }
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| at.checked_add(len))
            .filter(|&end| end <= packed.data.len())
            .ok_or_else(|| {
                bad_packed(&format!(
                    "entry {i} has length {len}, past the {} bytes of data",
                    packed.data.len()
                ))
            })?;
        entries.push(Some(&packed.data[at..end]));
        at = end;
    }
    if at != packed.data.len() {
        return Err(bad_packed(&format!(
            "the lengths add up to {at} bytes but data holds {}",
            packed.data.len()
        )));
    }
    Ok(entries)
}

fn packed_len(len: usize) -> Result<i32, state::StateError> {
    i32::try_from(len).map_err(|_| bad_packed("a value over 2 GiB"))
}

fn bad_packed(what: &str) -> state::StateError {
    state::StateError::Backend(format!("malformed packed list: {what}"))
}

impl timers::Host for InstanceState {
    fn register_event_timer(&mut self, key: Vec<u8>, time: i64) -> Result<(), state::StateError> {
        self.check_key(&key)?;
        self.timers
            .insert(&mut self.quota, time, key)
            .map_err(state::StateError::Backend)
    }

    fn delete_event_timer(&mut self, key: Vec<u8>, time: i64) -> Result<(), state::StateError> {
        self.check_key(&key)?;
        self.timers.remove(&mut self.quota, time, key);
        Ok(())
    }

    fn current_watermark(&mut self) -> i64 {
        self.watermark
    }

    fn register_processing_timer(
        &mut self,
        key: Vec<u8>,
        time: i64,
    ) -> Result<(), state::StateError> {
        self.check_key(&key)?;
        if !self.fires_processing_timers {
            return Err(state::StateError::Backend(
                "a processing-time timer needs the component to export \
                 `weir:operator/processing-time` (where it fires)"
                    .into(),
            ));
        }
        let Some(hidden) = self.processing else {
            return Err(state::StateError::Backend(
                "processing-time timers need keyed state (give the operator a key_by)".into(),
            ));
        };
        self.processing_timers
            .insert(&mut self.quota, time, key.clone())
            .map_err(state::StateError::Backend)?;
        self.backend()?
            .map_put(hidden, &key, &super::instance::time_bytes(time), &[])
            .map_err(to_wit)
    }

    fn delete_processing_timer(
        &mut self,
        key: Vec<u8>,
        time: i64,
    ) -> Result<(), state::StateError> {
        self.check_key(&key)?;
        let Some(hidden) = self.processing else {
            return Ok(());
        };
        self.processing_timers
            .remove(&mut self.quota, time, key.clone());
        self.backend()?
            .map_remove(hidden, &key, &super::instance::time_bytes(time))
            .map_err(to_wit)
    }

    fn current_processing_time(&mut self) -> i64 {
        crate::connectors::now_millis()
    }
}

impl log::Host for InstanceState {
    fn log(&mut self, level: log::Level, message: String) {
        let (op, sub) = (&self.operator, self.subtask_index);
        let message = match self.quota.admit_log(&message) {
            Ok(line) => line,
            Err(first) => {
                self.telemetry.drop_line();
                if first {
                    tracing::warn!(
                        target: "weir::guest", operator = %op, subtask = sub,
                        "more than {} bytes of log in one call: the rest of this call's \
                         log lines are dropped", super::quota::LOG_BYTES_PER_CALL
                    );
                }
                return;
            }
        };
        let kept = self.telemetry.log(
            crate::connectors::now_millis(),
            match level {
                log::Level::Trace => LogLevel::Trace,
                log::Level::Debug => LogLevel::Debug,
                log::Level::Info => LogLevel::Info,
                log::Level::Warn => LogLevel::Warn,
                log::Level::Error => LogLevel::Error,
            },
            message,
        );
        if !kept {
            // Over the subtask's rate limit: neither kept nor printed, and
            // counted (`weir_operator_log_lines_dropped_total`).
            return;
        }
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "weir::guest", operator = %op, subtask = sub, "{message}")
            }
            log::Level::Debug => {
                tracing::debug!(target: "weir::guest", operator = %op, subtask = sub, "{message}")
            }
            log::Level::Info => {
                tracing::info!(target: "weir::guest", operator = %op, subtask = sub, "{message}")
            }
            log::Level::Warn => {
                tracing::warn!(target: "weir::guest", operator = %op, subtask = sub, "{message}")
            }
            log::Level::Error => {
                tracing::error!(target: "weir::guest", operator = %op, subtask = sub, "{message}")
            }
        }
    }
}

impl metrics::Host for InstanceState {
    fn counter_add(&mut self, name: String, delta: u64) {
        if self
            .quota
            .admit_metric(&self.counters, self.gauges.len(), &name)
        {
            self.telemetry.counter_add(&name, delta);
            let counter = self.counters.entry(name).or_default();
            *counter = counter.saturating_add(delta);
        }
    }

    fn gauge_set(&mut self, name: String, value: f64) {
        if self
            .quota
            .admit_metric(&self.gauges, self.counters.len(), &name)
        {
            self.telemetry.gauge_set(&name, value);
            self.gauges.insert(name, value);
        }
    }
}
