//! The one place that calls the host: state, timers, log and metrics.
//!
//! On `wasm32` every function forwards to the WIT imports. Natively (unit
//! tests, the [`testing`](crate::testing) harness) the imports exist but must
//! never be called, so every function goes to a [`MemoryBackend`] that the
//! harness installs in a thread-local for the duration of each call into the
//! operator. Outside the harness, natively, state and timer calls fail with a
//! clear error, logs go to stderr and metrics are dropped.
//!
//! The in-memory backend follows the host's contract: an undeclared state id
//! is `unknown-state`, a state used as the wrong kind is `wrong-kind`, map
//! entries come back ordered by user-key bytes, and registering the same
//! timer twice is a no-op. It also carries the harness's switch of the
//! batch cache ([`batch_cache_enabled`]), and its stored part (state,
//! timers, watermark) can be taken out and put into a fresh backend: the
//! harness's checkpoint and restore.

pub(crate) use crate::bindings::weir::operator::log::Level;
#[cfg(not(target_arch = "wasm32"))]
use crate::bindings::weir::operator::state::Packed;
use crate::bindings::weir::operator::state::StateError;

/// A state or timer call's result, as the host returns it.
pub(crate) type HostResult<T> = Result<T, StateError>;

#[cfg(target_arch = "wasm32")]
mod imp {
    //! Forwarding to the WIT imports.
    use super::*;
    use crate::bindings::weir::operator::{log, metrics, state, timers};

    pub(crate) fn value_get(id: u32, key: &[u8]) -> HostResult<Option<Vec<u8>>> {
        state::value_get(id, key)
    }
    pub(crate) fn value_set(id: u32, key: &[u8], value: &[u8]) -> HostResult<()> {
        state::value_set(id, key, value)
    }
    pub(crate) fn list_get(id: u32, key: &[u8]) -> HostResult<Vec<Vec<u8>>> {
        state::list_get(id, key)
    }
    pub(crate) fn list_add(id: u32, key: &[u8], element: &[u8]) -> HostResult<()> {
        state::list_add(id, key, element)
    }
    pub(crate) fn map_get(id: u32, key: &[u8], user_key: &[u8]) -> HostResult<Option<Vec<u8>>> {
        state::map_get(id, key, user_key)
    }
    pub(crate) fn map_put(id: u32, key: &[u8], user_key: &[u8], value: &[u8]) -> HostResult<()> {
        state::map_put(id, key, user_key, value)
    }
    pub(crate) fn map_remove(id: u32, key: &[u8], user_key: &[u8]) -> HostResult<()> {
        state::map_remove(id, key, user_key)
    }
    pub(crate) fn map_entries(id: u32, key: &[u8]) -> HostResult<Vec<(Vec<u8>, Vec<u8>)>> {
        state::map_entries(id, key)
    }
    pub(crate) fn clear(id: u32, key: &[u8]) -> HostResult<()> {
        state::clear(id, key)
    }
    pub(crate) fn value_get_many(id: u32, keys: &state::Packed) -> HostResult<state::Packed> {
        state::value_get_many(id, keys)
    }
    pub(crate) fn value_set_many(
        id: u32,
        keys: &state::Packed,
        values: &state::Packed,
    ) -> HostResult<()> {
        state::value_set_many(id, keys, values)
    }
    /// Always: only the native harness runs keyed functions without it.
    #[inline(always)]
    pub(crate) fn batch_cache_enabled() -> bool {
        true
    }
    pub(crate) fn register_event_timer(key: &[u8], time: i64) -> HostResult<()> {
        timers::register_event_timer(key, time)
    }
    pub(crate) fn delete_event_timer(key: &[u8], time: i64) -> HostResult<()> {
        timers::delete_event_timer(key, time)
    }
    pub(crate) fn current_watermark() -> i64 {
        timers::current_watermark()
    }
    pub(crate) fn register_processing_timer(key: &[u8], time: i64) -> HostResult<()> {
        timers::register_processing_timer(key, time)
    }
    pub(crate) fn delete_processing_timer(key: &[u8], time: i64) -> HostResult<()> {
        timers::delete_processing_timer(key, time)
    }
    pub(crate) fn current_processing_time() -> i64 {
        timers::current_processing_time()
    }
    pub(crate) fn log(level: Level, message: &str) {
        log::log(level, message)
    }
    pub(crate) fn counter_add(name: &str, delta: u64) {
        metrics::counter_add(name, delta)
    }
    pub(crate) fn gauge_set(name: &str, value: f64) {
        metrics::gauge_set(name, value)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    //! Forwarding to the installed in-memory backend.
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    thread_local! {
        static CURRENT: RefCell<Option<Rc<RefCell<MemoryBackend>>>> = const { RefCell::new(None) };
    }

    /// Makes `backend` the current one until the guard drops (which restores
    /// the previous one, so harnesses may nest or interleave on one thread).
    pub(crate) fn install(backend: Rc<RefCell<MemoryBackend>>) -> InstallGuard {
        let previous = CURRENT.with(|c| c.borrow_mut().replace(backend));
        InstallGuard { previous }
    }

    /// Restores the previously installed backend on drop.
    pub(crate) struct InstallGuard {
        previous: Option<Rc<RefCell<MemoryBackend>>>,
    }

    impl Drop for InstallGuard {
        fn drop(&mut self) {
            let previous = self.previous.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }

    const NO_BACKEND: &str = "no state backend: natively, state and timers work only inside \
                              weir_sdk::testing::Harness";

    fn with<T>(f: impl FnOnce(&mut MemoryBackend) -> HostResult<T>) -> HostResult<T> {
        let backend = CURRENT.with(|c| c.borrow().clone());
        match backend {
            Some(backend) => f(&mut backend.borrow_mut()),
            None => Err(StateError::Backend(NO_BACKEND.to_owned())),
        }
    }

    pub(crate) fn value_get(id: u32, key: &[u8]) -> HostResult<Option<Vec<u8>>> {
        with(|b| b.value_get(id, key))
    }
    pub(crate) fn value_set(id: u32, key: &[u8], value: &[u8]) -> HostResult<()> {
        with(|b| b.value_set(id, key, value))
    }
    pub(crate) fn list_get(id: u32, key: &[u8]) -> HostResult<Vec<Vec<u8>>> {
        with(|b| b.list_get(id, key))
    }
    pub(crate) fn list_add(id: u32, key: &[u8], element: &[u8]) -> HostResult<()> {
        with(|b| b.list_add(id, key, element))
    }
    pub(crate) fn map_get(id: u32, key: &[u8], user_key: &[u8]) -> HostResult<Option<Vec<u8>>> {
        with(|b| b.map_get(id, key, user_key))
    }
    pub(crate) fn map_put(id: u32, key: &[u8], user_key: &[u8], value: &[u8]) -> HostResult<()> {
        with(|b| b.map_put(id, key, user_key, value))
    }
    pub(crate) fn map_remove(id: u32, key: &[u8], user_key: &[u8]) -> HostResult<()> {
        with(|b| b.map_remove(id, key, user_key))
    }
    pub(crate) fn map_entries(id: u32, key: &[u8]) -> HostResult<Vec<(Vec<u8>, Vec<u8>)>> {
        with(|b| b.map_entries(id, key))
    }
    pub(crate) fn clear(id: u32, key: &[u8]) -> HostResult<()> {
        with(|b| b.clear(id, key))
    }
    /// As the host: one `value_get` per key, packed.
    pub(crate) fn value_get_many(id: u32, keys: &Packed) -> HostResult<Packed> {
        let keys = crate::cache::unpacked_optional(keys)
            .ok_or_else(|| StateError::Backend("malformed packed list".into()))?;
        with(|b| {
            b.batched_calls += 1;
            let mut out = Packed {
                lens: Vec::new(),
                data: Vec::new(),
            };
            for key in keys {
                let key = key.ok_or_else(|| StateError::Backend("an absent key".into()))?;
                match b.value_get(id, key)? {
                    Some(v) => {
                        out.lens.push(v.len() as i32);
                        out.data.extend_from_slice(&v);
                    }
                    None => out.lens.push(-1),
                }
            }
            Ok(out)
        })
    }
    /// As the host: one `value_set` (or `clear`) per key.
    pub(crate) fn value_set_many(id: u32, keys: &Packed, values: &Packed) -> HostResult<()> {
        let bad = || StateError::Backend("malformed packed list".into());
        let keys = crate::cache::unpacked_optional(keys).ok_or_else(bad)?;
        let values = crate::cache::unpacked_optional(values).ok_or_else(bad)?;
        if keys.len() != values.len() {
            return Err(bad());
        }
        with(|b| {
            b.batched_calls += 1;
            for (key, value) in keys.into_iter().zip(values) {
                let key = key.ok_or_else(bad)?;
                match value {
                    Some(v) => b.value_set(id, key, v)?,
                    None => b.clear(id, key)?,
                }
            }
            Ok(())
        })
    }
    /// False when the installed harness runs the operator on the per-call
    /// path (`HarnessBuilder::batched_state(false)`); true outside one.
    pub(crate) fn batch_cache_enabled() -> bool {
        with(|b| Ok(b.batched_state)).unwrap_or(true)
    }
    pub(crate) fn register_event_timer(key: &[u8], time: i64) -> HostResult<()> {
        with(|b| {
            b.timers.insert((time, key.to_vec()));
            Ok(())
        })
    }
    pub(crate) fn delete_event_timer(key: &[u8], time: i64) -> HostResult<()> {
        with(|b| {
            b.timers.remove(&(time, key.to_vec()));
            Ok(())
        })
    }
    pub(crate) fn current_watermark() -> i64 {
        with(|b| Ok(b.watermark)).unwrap_or(i64::MIN)
    }
    pub(crate) fn register_processing_timer(key: &[u8], time: i64) -> HostResult<()> {
        with(|b| {
            b.processing_timers.insert((time, key.to_vec()));
            Ok(())
        })
    }
    pub(crate) fn delete_processing_timer(key: &[u8], time: i64) -> HostResult<()> {
        with(|b| {
            b.processing_timers.remove(&(time, key.to_vec()));
            Ok(())
        })
    }
    pub(crate) fn current_processing_time() -> i64 {
        with(|b| Ok(b.processing_time)).unwrap_or(0)
    }
    pub(crate) fn log(level: Level, message: &str) {
        let logged = with(|b| {
            b.logs.push((level, message.to_owned()));
            Ok(())
        });
        if logged.is_err() {
            eprintln!("[{}] {message}", super::level_name(level));
        }
    }
    pub(crate) fn counter_add(name: &str, delta: u64) {
        let _ = with(|b| {
            let counter = b.counters.entry(name.to_owned()).or_insert(0);
            *counter = counter.wrapping_add(delta);
            Ok(())
        });
    }
    pub(crate) fn gauge_set(name: &str, value: f64) {
        let _ = with(|b| {
            b.gauges.insert(name.to_owned(), value);
            Ok(())
        });
    }
}

pub(crate) use imp::*;

/// The lowercase name of a log level, as in WIT.
#[cfg(not(target_arch = "wasm32"))]
fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use memory::{MemoryBackend, Stored};

#[cfg(not(target_arch = "wasm32"))]
mod memory {
    //! State, timers, logs and metrics in memory, for the native harness.
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use super::{HostResult, Level};
    use crate::bindings::weir::operator::state::StateError;
    use crate::state::{StateDescriptor, StateKind};

    /// Where a state lives: (state id, key).
    type Slot = (u32, Vec<u8>);

    /// What a checkpoint of one operator instance holds: every value, list
    /// and map of every key, the registered timers of both kinds, the
    /// watermark, and the harness's processing-time clock. Ordered
    /// collections, so two are equal exactly when they hold the same.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Stored {
        pub(crate) values: BTreeMap<Slot, Vec<u8>>,
        pub(crate) lists: BTreeMap<Slot, Vec<Vec<u8>>>,
        pub(crate) maps: BTreeMap<Slot, BTreeMap<Vec<u8>, Vec<u8>>>,
        pub(crate) timers: BTreeSet<(i64, Vec<u8>)>,
        pub(crate) watermark: i64,
        pub(crate) processing_timers: BTreeSet<(i64, Vec<u8>)>,
        pub(crate) processing_time: i64,
    }

    /// What the host would hold for one operator instance.
    #[derive(Debug, Default)]
    pub(crate) struct MemoryBackend {
        /// The kinds of the declared states, by id.
        kinds: Vec<StateKind>,
        values: HashMap<Slot, Vec<u8>>,
        lists: HashMap<Slot, Vec<Vec<u8>>>,
        maps: HashMap<Slot, BTreeMap<Vec<u8>, Vec<u8>>>,
        /// Registered timers, ordered by time then key: the firing order.
        pub(crate) timers: BTreeSet<(i64, Vec<u8>)>,
        pub(crate) watermark: i64,
        /// Registered processing-time timers, in firing order.
        pub(crate) processing_timers: BTreeSet<(i64, Vec<u8>)>,
        /// The harness's clock (ms), moved by the test.
        pub(crate) processing_time: i64,
        pub(crate) logs: Vec<(Level, String)>,
        pub(crate) counters: BTreeMap<String, u64>,
        pub(crate) gauges: BTreeMap<String, f64>,
        /// Calls of `value-get-many` and `value-set-many` (the batch cache's).
        pub(crate) batched_calls: u64,
        /// False: keyed functions run without the batch cache, every
        /// value-state access a single call (the guest's switch, kept here
        /// because the harness installs this for every call).
        pub(crate) batched_state: bool,
    }

    impl MemoryBackend {
        pub(crate) fn new(states: &[StateDescriptor]) -> Self {
            Self {
                kinds: states.iter().map(|s| s.kind).collect(),
                watermark: i64::MIN,
                batched_state: true,
                ..Self::default()
            }
        }

        /// A backend holding what `stored` holds, as after a restore.
        pub(crate) fn restored(states: &[StateDescriptor], stored: Stored) -> Self {
            Self {
                values: stored.values.into_iter().collect(),
                lists: stored.lists.into_iter().collect(),
                maps: stored.maps.into_iter().collect(),
                timers: stored.timers,
                watermark: stored.watermark,
                processing_timers: stored.processing_timers,
                processing_time: stored.processing_time,
                ..Self::new(states)
            }
        }

        /// A copy of everything a checkpoint would hold.
        pub(crate) fn stored(&self) -> Stored {
            fn sorted<T: Clone>(map: &HashMap<Slot, T>) -> BTreeMap<Slot, T> {
                map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
            }
            Stored {
                values: sorted(&self.values),
                lists: sorted(&self.lists),
                maps: sorted(&self.maps),
                timers: self.timers.clone(),
                watermark: self.watermark,
                processing_timers: self.processing_timers.clone(),
                processing_time: self.processing_time,
            }
        }

        fn check(&self, id: u32, kind: StateKind) -> HostResult<()> {
            match self.kinds.get(id as usize) {
                None => Err(StateError::UnknownState(id)),
                Some(k) if *k != kind => Err(StateError::WrongKind(id)),
                Some(_) => Ok(()),
            }
        }

        pub(crate) fn value_get(&self, id: u32, key: &[u8]) -> HostResult<Option<Vec<u8>>> {
            self.check(id, StateKind::Value)?;
            Ok(self.values.get(&(id, key.to_vec())).cloned())
        }

        pub(crate) fn value_set(&mut self, id: u32, key: &[u8], value: &[u8]) -> HostResult<()> {
            self.check(id, StateKind::Value)?;
            self.values.insert((id, key.to_vec()), value.to_vec());
            Ok(())
        }

        pub(crate) fn list_get(&self, id: u32, key: &[u8]) -> HostResult<Vec<Vec<u8>>> {
            self.check(id, StateKind::List)?;
            Ok(self
                .lists
                .get(&(id, key.to_vec()))
                .cloned()
                .unwrap_or_default())
        }

        pub(crate) fn list_add(&mut self, id: u32, key: &[u8], element: &[u8]) -> HostResult<()> {
            self.check(id, StateKind::List)?;
            self.lists
                .entry((id, key.to_vec()))
                .or_default()
                .push(element.to_vec());
            Ok(())
        }

        pub(crate) fn map_get(
            &self,
            id: u32,
            key: &[u8],
            user_key: &[u8],
        ) -> HostResult<Option<Vec<u8>>> {
            self.check(id, StateKind::Map)?;
            Ok(self
                .maps
                .get(&(id, key.to_vec()))
                .and_then(|m| m.get(user_key).cloned()))
        }

        pub(crate) fn map_put(
            &mut self,
            id: u32,
            key: &[u8],
            user_key: &[u8],
            value: &[u8],
        ) -> HostResult<()> {
            self.check(id, StateKind::Map)?;
            self.maps
                .entry((id, key.to_vec()))
                .or_default()
                .insert(user_key.to_vec(), value.to_vec());
            Ok(())
        }

        pub(crate) fn map_remove(
            &mut self,
            id: u32,
            key: &[u8],
            user_key: &[u8],
        ) -> HostResult<()> {
            self.check(id, StateKind::Map)?;
            let map_key = (id, key.to_vec());
            if let Some(map) = self.maps.get_mut(&map_key) {
                map.remove(user_key);
                if map.is_empty() {
                    self.maps.remove(&map_key);
                }
            }
            Ok(())
        }

        pub(crate) fn map_entries(
            &self,
            id: u32,
            key: &[u8],
        ) -> HostResult<Vec<(Vec<u8>, Vec<u8>)>> {
            self.check(id, StateKind::Map)?;
            Ok(self
                .maps
                .get(&(id, key.to_vec()))
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default())
        }

        pub(crate) fn clear(&mut self, id: u32, key: &[u8]) -> HostResult<()> {
            let Some(kind) = self.kinds.get(id as usize) else {
                return Err(StateError::UnknownState(id));
            };
            let map_key = (id, key.to_vec());
            match kind {
                StateKind::Value => drop(self.values.remove(&map_key)),
                StateKind::List => drop(self.lists.remove(&map_key)),
                StateKind::Map => drop(self.maps.remove(&map_key)),
            }
            Ok(())
        }

        /// Sets the raw value of a value state for `key` (what a restore
        /// would put there).
        pub(crate) fn set_raw_value(&mut self, id: u32, key: &[u8], value: &[u8]) {
            self.values.insert((id, key.to_vec()), value.to_vec());
        }

        /// The raw value of a value state for `key`.
        pub(crate) fn raw_value(&self, id: u32, key: &[u8]) -> Option<&[u8]> {
            self.values.get(&(id, key.to_vec())).map(Vec::as_slice)
        }

        /// The keys that have any state in `id`.
        pub(crate) fn keys(&self, id: u32) -> BTreeSet<Vec<u8>> {
            let values = self.values.keys();
            let lists = self.lists.keys();
            let maps = self.maps.keys();
            values
                .chain(lists)
                .chain(maps)
                .filter(|(i, _)| *i == id)
                .map(|(_, k)| k.clone())
                .collect()
        }
    }
}
