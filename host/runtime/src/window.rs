//! The host's window operator: Flink's `WindowOperator`. An assigner puts
//! each record into windows, the window state lives in the keyed state
//! backend, the event-time trigger fires a window when the watermark passes
//! its last millisecond, and the window's function computes its output: a
//! built-in aggregate, or a window function in Wasm ([`function`]).
//!
//! # Rules (as Flink's, for event time)
//!
//! - A window `[start, end)` fires when the watermark reaches `end - 1`
//!   (its *max timestamp*). Its output has the key and the timestamp `end -
//!   1`: a built-in aggregate's value is
//!   `{"key":"…","start":…,"end":…,"<aggregate>":…}`, a Wasm aggregate's is
//!   what its `get-result` returns; a process-window function emits what
//!   it likes, every record stamped `end - 1`.
//! - A window is *late* once `end - 1 + allowed_lateness_ms <= watermark`.
//!   A record whose windows are all late goes unchanged to the side output
//!   [`LATE_TAG`]; it is never dropped silently. A record for a window that
//!   fired but is not late yet updates it and fires it again at once (the
//!   new result follows the old one). A window's state is dropped when it is
//!   late (a cleanup timer at `end - 1 + allowed_lateness_ms`).
//! - Tumbling: the window of `ts` starts at `ts - ts mod size`. Sliding: every
//!   window of `size` starting at a multiple of `slide` that covers `ts`.
//!   Session: `[ts, ts + gap)`, merged with every window of its key it
//!   intersects (touching counts), transitively, accumulators merged
//!   (records moved, session by session, for a process-window function); if
//!   the merged window is late the record is late and nothing changes.
//! - Global (`count = N`): one window per key, never late, fires and
//!   empties every `N` records (timestamp: the N-th record's); a partial
//!   window at the end of input does not fire (Flink's `countWindow`).
//!   Its records have no `start`/`end`.
//! - Timers are `(time, key)`; a timer fires every window of its key whose
//!   max timestamp (or cleanup time) it is. Timers of windows merged away
//!   are not deleted: they find nothing and do nothing.
//!
//! # Batches
//!
//! A batch's windows are read from the state once, updated in memory, and
//! written back once at its end; an aggregate adds all of the batch's
//! records with one call (`add` with every window the batch touched), and
//! the windows one watermark fires get their results with one call. A
//! record that fires its window at once (late within the lateness, a full
//! count window) first applies the records before it, so outputs are as if
//! records were added one by one.
//!
//! # State
//!
//! One map state, [`WINDOW_STATE`], key → user key → bytes, so
//! checkpoints, savepoints and rescaling treat it like any operator's map
//! state. A window's user key is its 16-byte encoding (ordered by start);
//! its value is its record count (u64, little-endian), then, for an
//! aggregate, the accumulator (a built-in's: its running number as f64).
//! A process-window function's records are under the window's key plus a
//! big-endian sequence number (24 bytes): the timestamp (i64,
//! little-endian), then the value.
//!
//! Session windows also keep each recent key's list of windows in memory
//! ([`SessionIndex`], Flink's `MergingWindowSet`), always equal to what the
//! state holds, so that a key's windows are not scanned from the state at
//! every batch and timer; it is rebuilt from the state after a restore.

mod function;

use crate::host_operator::HostOperatorCore;
use crate::job::{WindowAssigner, WindowSpec};
use crate::record::{Batch, Emitted, RecordRef};
use crate::state::{FastHashMap, KeyedStateBackend, StateDescriptor, StateKind};
use crate::wasm::{FailureKind, OperatorError, OperatorInstance, WindowFunctionKind};
use function::{Fired, Function};

/// The name of the window operator's one state.
pub const WINDOW_STATE: &str = "windows";
/// The side output late records go to (`from = "<operator>:late"`).
pub const LATE_TAG: &str = "late";
/// State id of [`WINDOW_STATE`].
const STATE: u32 = 0;

/// The states a window operator declares.
pub fn window_states() -> Vec<StateDescriptor> {
    vec![StateDescriptor {
        name: WINDOW_STATE.to_owned(),
        kind: StateKind::Map,
        ttl: None,
    }]
}

/// `[start, end)`; the global window is `[i64::MIN, i64::MAX)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Window {
    start: i64,
    end: i64,
}

const GLOBAL: Window = Window {
    start: i64::MIN,
    end: i64::MAX,
};

impl Window {
    fn max_timestamp(self) -> i64 {
        self.end - 1
    }

    fn intersects(self, other: Window) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    fn cover(self, other: Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// Order-preserving bytes (sign bit flipped, big-endian): map entries
    /// come back ordered by start.
    fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&((self.start as u64) ^ (1 << 63)).to_be_bytes());
        out[8..].copy_from_slice(&((self.end as u64) ^ (1 << 63)).to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Window> {
        let word = |b: &[u8]| Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64);
        (bytes.len() == 16).then_some(())?;
        Some(Window {
            start: word(&bytes[..8])?,
            end: word(&bytes[8..])?,
        })
    }
}

/// One window of one key while a batch is processed: read from the state
/// once, written back once at the end of the batch.
#[derive(Debug, Default)]
struct Slot {
    /// Records in the window.
    count: u64,
    /// Aggregates: the accumulator before `pending` (`None`: a new window).
    accumulator: Option<Vec<u8>>,
    /// Aggregates: the batch's records not yet added, by index.
    pending: Vec<usize>,
    /// Changed since it was read.
    dirty: bool,
}

/// The windows a batch touched.
#[derive(Debug, Default)]
struct BatchCache {
    slots: FastHashMap<(Vec<u8>, Window), Slot>,
}

/// Keys whose session windows [`WindowOperator`] keeps in memory at most;
/// past that the index starts over (each key is read again from the state
/// when it next comes).
const SESSION_INDEX_KEYS: usize = 1 << 18;

/// Session windows: each key's windows, exactly as in the state (the
/// window operator is the only writer of its state; every window it adds
/// or removes goes through [`WindowOperator::assign_to_session`] or
/// [`WindowOperator::remove`], which keep this current). It spares a scan
/// of the key's map state per batch and per timer, which cost q11 a third
/// of its time (`benches/README.md`, Nexmark); Flink keeps the same in its
/// `MergingWindowSet`. Not part of checkpoints: a restored operator starts
/// empty and reads each key's windows from the state once.
#[derive(Debug, Default)]
struct SessionIndex {
    windows: FastHashMap<Vec<u8>, Vec<Window>>,
}

/// See the [module docs](self).
pub struct WindowOperator {
    spec: WindowSpec,
    function: Function,
    core: HostOperatorCore,
    cache: BatchCache,
    sessions: SessionIndex,
}

impl std::fmt::Debug for WindowOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowOperator")
            .field("spec", &self.spec)
            .field("core", &self.core)
            .finish_non_exhaustive()
    }
}

impl WindowOperator {
    /// The window operator `operator` (its uid) of `spec` with its built-in
    /// aggregate. Give it its state with [`WindowOperator::attach_state`]
    /// before the first record.
    pub fn new(operator: &str, spec: WindowSpec) -> WindowOperator {
        let function = Function::BuiltIn {
            aggregate: spec.aggregate,
            field: spec.field.clone(),
        };
        WindowOperator {
            spec,
            function,
            core: HostOperatorCore::new(operator),
            cache: BatchCache::default(),
            sessions: SessionIndex::default(),
        }
    }

    /// The window operator `operator` of `spec` whose function is the Wasm
    /// `instance` (`spec.function`'s module). Fails unless the component
    /// exports an aggregate or a process-window function.
    pub fn with_function(
        operator: &str,
        spec: WindowSpec,
        mut instance: OperatorInstance,
    ) -> Result<WindowOperator, OperatorError> {
        let function = match instance.window_function_kind()? {
            Some(WindowFunctionKind::Aggregate) => Function::Aggregate(Box::new(instance)),
            Some(WindowFunctionKind::ProcessWindow) => Function::Process(Box::new(instance)),
            kind => {
                return Err(OperatorError::new(
                    operator,
                    FailureKind::ContractMismatch,
                    not_a_window_function(kind),
                ));
            }
        };
        Ok(WindowOperator {
            spec,
            function,
            core: HostOperatorCore::new(operator),
            cache: BatchCache::default(),
            sessions: SessionIndex::default(),
        })
    }

    /// Its operator uid.
    pub fn operator(&self) -> &str {
        &self.core.operator
    }

    /// Gives it its keyed state (declared as [`window_states`]).
    pub fn attach_state(&mut self, backend: Box<dyn KeyedStateBackend>) {
        self.core.attach(backend);
    }

    /// Opens its window function (a Wasm function gets its `config`).
    pub fn open(&mut self) -> Result<(), OperatorError> {
        self.function.open()
    }

    /// Its Wasm window function's instance, if it has one.
    pub fn instance(&self) -> Option<&OperatorInstance> {
        self.function.instance()
    }

    /// Adds every record of `batch` to its windows; returns what fired at
    /// once (late firings within the allowed lateness, full count windows)
    /// and the late records.
    pub fn process(&mut self, batch: &Batch) -> Result<Emitted, OperatorError> {
        let records: Vec<RecordRef<'_>> = batch.iter().collect();
        let done = self.process_records(&records);
        self.cache = BatchCache::default();
        done?;
        Ok(self.core.take_out())
    }

    fn process_records(&mut self, records: &[RecordRef<'_>]) -> Result<(), OperatorError> {
        for (i, r) in records.iter().enumerate() {
            let Some(key) = r.key else {
                return Err(self.core.fail(
                    FailureKind::Host,
                    "a record without a key reached a window (a bug: its input edge is keyed)"
                        .into(),
                ));
            };
            let on_time = match self.spec.assigner {
                WindowAssigner::Tumbling { size_ms } => {
                    let size = size_ms as i64;
                    let start = r.timestamp - r.timestamp.rem_euclid(size);
                    self.assign(records, i, key, start_window(start, size))?
                }
                WindowAssigner::Sliding { size_ms, slide_ms } => {
                    let (size, slide) = (size_ms as i64, slide_ms as i64);
                    let mut start = r.timestamp - r.timestamp.rem_euclid(slide);
                    let mut on_time = false;
                    while start > r.timestamp.saturating_sub(size) {
                        on_time |= self.assign(records, i, key, start_window(start, size))?;
                        start = start.saturating_sub(slide);
                    }
                    on_time
                }
                WindowAssigner::Session { gap_ms } => {
                    let window = start_window(r.timestamp, gap_ms as i64);
                    self.assign_to_session(records, i, key, window)?
                }
                WindowAssigner::Global { count } => {
                    self.assign_to_global(records, i, key, count)?;
                    true
                }
            };
            if !on_time {
                self.core.side(LATE_TAG, key, r.value, r.timestamp);
            }
        }
        self.apply_pending(records)?;
        self.write_back()
    }

    fn is_late(&self, window: Window) -> bool {
        window
            .max_timestamp()
            .saturating_add(self.spec.allowed_lateness_ms as i64)
            <= self.core.watermark
    }

    /// Adds record `i` to `window` of `key` unless the window is late;
    /// fires the window at once if it already fired.
    fn assign(
        &mut self,
        records: &[RecordRef<'_>],
        i: usize,
        key: &[u8],
        window: Window,
    ) -> Result<bool, OperatorError> {
        if self.is_late(window) {
            return Ok(false);
        }
        self.load(key, window)?;
        self.add_record(records, i, key, window)?;
        if window.max_timestamp() <= self.core.watermark {
            self.fire_now(records, key, window, window.max_timestamp())?;
        }
        Ok(true)
    }

    /// Reads `window` of `key` into the batch's cache, unless it is there;
    /// a window that is not in the state either is new: its timers are
    /// registered.
    fn load(&mut self, key: &[u8], window: Window) -> Result<(), OperatorError> {
        let id = (key.to_vec(), window);
        if self.cache.slots.contains_key(&id) {
            return Ok(());
        }
        let stored = self
            .core
            .backend()?
            .map_get(STATE, key, &window.encode())
            .map_err(|e| self.core.host(e))?;
        let slot = match stored {
            Some(bytes) => self.decode_slot(key, &bytes)?,
            None => {
                self.register(key, window);
                Slot::default()
            }
        };
        self.cache.slots.insert(id, slot);
        Ok(())
    }

    /// A window's stored value: its count, then (aggregates) its accumulator.
    fn decode_slot(&self, key: &[u8], bytes: &[u8]) -> Result<Slot, OperatorError> {
        let (count, accumulator) = bytes
            .split_first_chunk::<8>()
            .ok_or_else(|| self.core.corrupt(key))?;
        // A process-window function's window holds only its count (an
        // aggregate's accumulator may be empty bytes).
        let keeps_records = self.function.keeps_records();
        if keeps_records && !accumulator.is_empty() {
            return Err(self.core.corrupt(key));
        }
        Ok(Slot {
            count: u64::from_le_bytes(*count),
            accumulator: (!keeps_records).then(|| accumulator.to_vec()),
            pending: Vec::new(),
            dirty: false,
        })
    }

    /// Adds record `i` to `window` of `key`, which is in the cache: an
    /// aggregate adds it with the batch's other records; a process-window
    /// function's state keeps it.
    fn add_record(
        &mut self,
        records: &[RecordRef<'_>],
        i: usize,
        key: &[u8],
        window: Window,
    ) -> Result<(), OperatorError> {
        let slot = self
            .cache
            .slots
            .get_mut(&(key.to_vec(), window))
            .expect("loaded before");
        let seq = slot.count;
        slot.count += 1;
        slot.dirty = true;
        if !self.function.keeps_records() {
            slot.pending.push(i);
            return Ok(());
        }
        let r = records[i];
        let mut element = Vec::with_capacity(8 + r.value.len());
        element.extend_from_slice(&r.timestamp.to_le_bytes());
        element.extend_from_slice(r.value);
        self.core
            .backend()?
            .map_put(STATE, key, &element_key(window, seq), &element)
            .map_err(|e| self.core.host(e))
    }

    /// Adds every pending record to its accumulators: one call of the
    /// aggregate for all windows of the batch.
    fn apply_pending(&mut self, records: &[RecordRef<'_>]) -> Result<(), OperatorError> {
        let mut ids = Vec::new();
        let mut accumulators = Vec::new();
        let mut targets = Vec::new();
        let mut batch = Batch::new();
        for (id, slot) in self.cache.slots.iter_mut() {
            if slot.pending.is_empty() {
                continue;
            }
            let target = ids.len() as u32;
            for &i in &slot.pending {
                targets.push(target);
                batch.push_ref(records[i]);
            }
            slot.pending.clear();
            accumulators.push(slot.accumulator.take());
            ids.push(id.clone());
        }
        if ids.is_empty() {
            return Ok(());
        }
        let operator = self.core.operator.clone();
        let added = self
            .function
            .add(&operator, accumulators, targets, &batch)?;
        for (id, accumulator) in ids.into_iter().zip(added) {
            let slot = self.cache.slots.get_mut(&id).expect("listed above");
            slot.accumulator = Some(accumulator);
        }
        Ok(())
    }

    /// Writes every changed window of the batch to the state.
    fn write_back(&mut self) -> Result<(), OperatorError> {
        let slots = std::mem::take(&mut self.cache.slots);
        for ((key, window), slot) in slots {
            if !slot.dirty {
                continue;
            }
            let mut value = slot.count.to_le_bytes().to_vec();
            value.extend_from_slice(slot.accumulator.as_deref().unwrap_or_default());
            self.core
                .backend()?
                .map_put(STATE, &key, &window.encode(), &value)
                .map_err(|e| self.core.host(e))?;
        }
        Ok(())
    }

    /// Fires `window` of `key` during a batch (a late record within the
    /// allowed lateness, a full count window), with `timestamp`.
    fn fire_now(
        &mut self,
        records: &[RecordRef<'_>],
        key: &[u8],
        window: Window,
        timestamp: i64,
    ) -> Result<(), OperatorError> {
        self.apply_pending(records)?;
        let slot = &self.cache.slots[&(key.to_vec(), window)];
        let (count, accumulator) = (slot.count, slot.accumulator.clone().unwrap_or_default());
        let records = self.records_of(key, window)?;
        self.fire(vec![Fired {
            key: key.to_vec(),
            window,
            count,
            accumulator,
            records,
            timestamp,
        }])
    }

    fn fire(&mut self, fired: Vec<Fired>) -> Result<(), OperatorError> {
        if fired.is_empty() {
            return Ok(());
        }
        let mut out = std::mem::replace(&mut self.core.out, Emitted::empty());
        let done = self.function.fire(fired, &mut out);
        self.core.out = out;
        done
    }

    /// A process-window function's records of `window` of `key`, in arrival
    /// order (empty for aggregates).
    fn records_of(&mut self, key: &[u8], window: Window) -> Result<Batch, OperatorError> {
        let mut batch = Batch::new();
        if !self.function.keeps_records() {
            return Ok(batch);
        }
        let prefix = window.encode();
        let entries = self
            .core
            .backend()?
            .map_entries(STATE, key)
            .map_err(|e| self.core.host(e))?;
        for (user_key, element) in &entries {
            if user_key.len() != ELEMENT_KEY_LEN || user_key[..16] != prefix {
                continue;
            }
            let (ts, value) = element
                .split_first_chunk::<8>()
                .ok_or_else(|| self.core.corrupt(key))?;
            batch.push(Some(key), value, i64::from_le_bytes(*ts));
        }
        Ok(batch)
    }

    /// Removes `window` of `key` from the state and the batch's cache
    /// (with its records, for a process-window function).
    fn remove(&mut self, key: &[u8], window: Window) -> Result<(), OperatorError> {
        self.cache.slots.remove(&(key.to_vec(), window));
        if let Some(windows) = self.sessions.windows.get_mut(key) {
            windows.retain(|w| *w != window);
        }
        let mut user_keys = vec![window.encode().to_vec()];
        if self.function.keeps_records() {
            let prefix = window.encode();
            let entries = self
                .core
                .backend()?
                .map_entries(STATE, key)
                .map_err(|e| self.core.host(e))?;
            user_keys.extend(
                entries
                    .into_iter()
                    .map(|(k, _)| k)
                    .filter(|k| k.len() == ELEMENT_KEY_LEN && k[..16] == prefix),
            );
        }
        for user_key in user_keys {
            let removed = self.core.backend()?.map_remove(STATE, key, &user_key);
            removed.map_err(|e| self.core.host(e))?;
        }
        Ok(())
    }

    fn register(&mut self, key: &[u8], window: Window) {
        for time in self.timer_times(window) {
            self.core.timers.insert((time, key.to_vec()));
        }
    }

    /// The times of `window`'s timers: when it fires and, with allowed
    /// lateness, when it is cleaned up.
    fn timer_times(&self, window: Window) -> Vec<i64> {
        if window == GLOBAL {
            return Vec::new();
        }
        let fire = window.max_timestamp();
        let lateness = self.spec.allowed_lateness_ms as i64;
        if lateness > 0 {
            vec![fire, fire.saturating_add(lateness)]
        } else {
            vec![fire]
        }
    }

    /// Every window of `key` in the state, ordered by start.
    fn windows_of(&mut self, key: &[u8]) -> Result<Vec<Window>, OperatorError> {
        let entries = self
            .core
            .backend()?
            .map_entries(STATE, key)
            .map_err(|e| self.core.host(e))?;
        let mut windows = Vec::new();
        for (user_key, _) in entries {
            if user_key.len() == ELEMENT_KEY_LEN {
                continue;
            }
            windows.push(Window::decode(&user_key).ok_or_else(|| self.core.corrupt(key))?);
        }
        Ok(windows)
    }

    /// Puts `key`'s session windows into the [`SessionIndex`] unless they
    /// are there.
    fn load_sessions(&mut self, key: &[u8]) -> Result<(), OperatorError> {
        if self.sessions.windows.contains_key(key) {
            return Ok(());
        }
        let windows = self.windows_of(key)?;
        if self.sessions.windows.len() >= SESSION_INDEX_KEYS {
            self.sessions.windows.clear();
        }
        self.sessions.windows.insert(key.to_vec(), windows);
        Ok(())
    }

    fn assign_to_session(
        &mut self,
        records: &[RecordRef<'_>],
        i: usize,
        key: &[u8],
        window: Window,
    ) -> Result<bool, OperatorError> {
        self.load_sessions(key)?;
        let existing = &self.sessions.windows[key];
        let mut merged = window;
        let mut absorbed = vec![false; existing.len()];
        loop {
            let mut grew = false;
            for (j, w) in existing.iter().enumerate() {
                if !absorbed[j] && w.intersects(merged) {
                    absorbed[j] = true;
                    merged = merged.cover(*w);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        if self.is_late(merged) {
            return Ok(false);
        }
        let (mut joined, mut kept) = (Vec::new(), Vec::new());
        for (w, a) in existing.iter().zip(&absorbed) {
            if *a { joined.push(*w) } else { kept.push(*w) }
        }
        let absorbed = joined;
        if absorbed != [merged] {
            self.merge_into(records, key, &absorbed, merged)?;
        }
        let mut windows = kept;
        windows.push(merged);
        windows.sort_by_key(|w| w.start);
        // The absorbed sessions' timers would only find nothing to fire,
        // after reading all of the key's windows from the backend each
        // time: one per record of a growing session. Drop them, unless a
        // remaining session of the key needs the same time.
        for w in absorbed.iter().filter(|w| **w != merged) {
            for time in self.timer_times(*w) {
                let needed = windows.iter().any(|k| self.timer_times(*k).contains(&time));
                if !needed {
                    self.core.timers.remove(&(time, key.to_vec()));
                }
            }
        }
        self.sessions.windows.insert(key.to_vec(), windows);
        // (Loaded already unless the record fell inside one session.)
        self.load(key, merged)?;
        self.add_record(records, i, key, merged)?;
        if merged.max_timestamp() <= self.core.watermark {
            self.fire_now(records, key, merged, merged.max_timestamp())?;
        }
        Ok(true)
    }

    /// Makes `merged` the one window of `key` that holds the sessions
    /// `absorbed` (none: a new session): accumulators merged (records
    /// moved, for a process-window function), the others removed.
    fn merge_into(
        &mut self,
        records: &[RecordRef<'_>],
        key: &[u8],
        absorbed: &[Window],
        merged: Window,
    ) -> Result<(), OperatorError> {
        if absorbed.is_empty() {
            self.register(key, merged);
            let slot = Slot {
                dirty: true,
                ..Slot::default()
            };
            self.cache.slots.insert((key.to_vec(), merged), slot);
            return Ok(());
        }
        for w in absorbed {
            self.load(key, *w)?;
        }
        if absorbed.len() > 1 {
            self.apply_pending(records)?;
        }
        let mut slot = Slot {
            dirty: true,
            ..Slot::default()
        };
        let mut moved = Batch::new();
        for w in absorbed {
            let old = self
                .cache
                .slots
                .remove(&(key.to_vec(), *w))
                .expect("loaded above");
            slot.count += old.count;
            // One absorbed window keeps its pending records (no call);
            // with several, none are pending (applied above).
            slot.pending.extend(old.pending);
            slot.accumulator = match (slot.accumulator.take(), old.accumulator) {
                (Some(a), Some(b)) => Some(self.function.merge(a, b)?),
                (a, b) => a.or(b),
            };
            moved.append(&mut self.records_of(key, *w)?);
            self.remove(key, *w)?;
        }
        if !absorbed.contains(&merged) {
            self.register(key, merged);
        }
        for (seq, r) in moved.iter().enumerate() {
            let mut element = Vec::with_capacity(8 + r.value.len());
            element.extend_from_slice(&r.timestamp.to_le_bytes());
            element.extend_from_slice(r.value);
            self.core
                .backend()?
                .map_put(STATE, key, &element_key(merged, seq as u64), &element)
                .map_err(|e| self.core.host(e))?;
        }
        self.cache.slots.insert((key.to_vec(), merged), slot);
        Ok(())
    }

    fn assign_to_global(
        &mut self,
        records: &[RecordRef<'_>],
        i: usize,
        key: &[u8],
        count: u64,
    ) -> Result<(), OperatorError> {
        self.load(key, GLOBAL)?;
        self.add_record(records, i, key, GLOBAL)?;
        if self.cache.slots[&(key.to_vec(), GLOBAL)].count >= count {
            self.fire_now(records, key, GLOBAL, records[i].timestamp)?;
            self.remove(key, GLOBAL)?;
        }
        Ok(())
    }

    /// Advances the watermark: fires (and cleans up) every window whose
    /// timer it passed, in time order.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<Vec<Emitted>, OperatorError> {
        if !self.core.advance_to(watermark) {
            return Ok(Vec::new());
        }
        let mut fired = Vec::new();
        while let Some((time, key)) = self.core.pop_due() {
            self.on_timer(&key, time, &mut fired)?;
        }
        self.fire(fired)?;
        Ok(vec![self.core.take_out()])
    }

    /// The windows of `key` whose max timestamp is `time` go to `fired`;
    /// those whose lateness ends at `time` are removed.
    fn on_timer(
        &mut self,
        key: &[u8],
        time: i64,
        fired: &mut Vec<Fired>,
    ) -> Result<(), OperatorError> {
        let lateness = self.spec.allowed_lateness_ms as i64;
        let size = match self.spec.assigner {
            WindowAssigner::Tumbling { size_ms } | WindowAssigner::Sliding { size_ms, .. } => {
                size_ms as i64
            }
            WindowAssigner::Session { .. } | WindowAssigner::Global { .. } => 0,
        };
        let candidates = if size > 0 {
            // Fixed-size windows: the timer names them (the one that ends
            // here, the one whose lateness ends here).
            let mut windows: Vec<Window> = Vec::new();
            for last in [time, time.saturating_sub(lateness)] {
                let window = start_window(last.saturating_add(1).saturating_sub(size), size);
                if !windows.contains(&window) {
                    windows.push(window);
                }
            }
            windows
        } else if let WindowAssigner::Session { .. } = self.spec.assigner {
            self.load_sessions(key)?;
            self.sessions.windows[key].clone()
        } else {
            self.windows_of(key)?
        };
        for window in candidates {
            if window == GLOBAL {
                continue;
            }
            let fire = window.max_timestamp();
            let cleanup = fire.saturating_add(lateness) == time;
            if fire != time && !cleanup {
                continue;
            }
            let stored = self
                .core
                .backend()?
                .map_get(STATE, key, &window.encode())
                .map_err(|e| self.core.host(e))?;
            let Some(bytes) = stored else {
                continue;
            };
            if fire == time {
                let slot = self.decode_slot(key, &bytes)?;
                fired.push(Fired {
                    key: key.to_vec(),
                    window,
                    count: slot.count,
                    accumulator: slot.accumulator.unwrap_or_default(),
                    records: self.records_of(key, window)?,
                    timestamp: fire,
                });
            }
            if cleanup {
                self.remove(key, window)?;
            }
        }
        Ok(())
    }

    /// Its state, timers and watermark (checkpoints and restores go
    /// through them).
    pub(crate) fn core_mut(&mut self) -> &mut HostOperatorCore {
        &mut self.core
    }

    /// Its state, timers and watermark, to read.
    pub(crate) fn core(&self) -> &HostOperatorCore {
        &self.core
    }
}

/// Why a module cannot be a window's function.
pub fn not_a_window_function(kind: Option<WindowFunctionKind>) -> String {
    match kind {
        None => "a window's `module` must export `weir:operator/window-function` (contract \
                 0.1.3): build it with an aggregate or process-window function"
            .into(),
        Some(_) => "a window's `module` must be an aggregate or a process-window function, \
                    but its window-function kind is `none` (it is an ordinary operator: drop \
                    `window`, or build the module with an aggregate or process-window function)"
            .into(),
    }
}

/// Length of a process-window function's record's user key: the window,
/// then a sequence number.
const ELEMENT_KEY_LEN: usize = 24;

/// The user key of record `seq` of `window`: sorts right after the window.
fn element_key(window: Window, seq: u64) -> [u8; ELEMENT_KEY_LEN] {
    let mut out = [0; ELEMENT_KEY_LEN];
    out[..16].copy_from_slice(&window.encode());
    out[16..].copy_from_slice(&seq.to_be_bytes());
    out
}

fn start_window(start: i64, size: i64) -> Window {
    Window {
        start,
        end: start.saturating_add(size),
    }
}

#[cfg(test)]
mod tests;
