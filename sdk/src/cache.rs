//! The batch cache of value states: what makes a keyed process function's
//! `ValueState::get`/`set` cost one host call per state and batch instead
//! of one per record (contract 0.1.3, `state.value-get-many` and
//! `value-set-many`).
//!
//! The keyed adapters open a cache for a batch with its distinct keys
//! ([`begin`]). The first `get` of a value state in the batch reads that
//! state for every key of the batch in one call; `get`, `set` and `clear`
//! of the batch's keys are then served from memory; [`end`] writes every
//! changed entry back in one call per state, before the adapter returns
//! (so timers, checkpoints and `close`, which come in later host calls,
//! see them). Semantics stay Flink's per record: a record sees the
//! updates of the records before it, also for its own key. Keys outside
//! the batch (an explicit key) and every other state kind go to the host
//! directly.
//!
//! The per-record path costs no hashing and no allocation: the adapter
//! says which record runs ([`at_record`]), and a state call for that
//! record's own key (the same bytes of the batch, compared by address)
//! finds the key's entry by the record's index. Values the host returned
//! stay in its answer; values the batch writes go to one buffer per state,
//! a new value taking the place of the key's previous one when it fits.
//! Only a key the record does not own (an explicit key) is looked up by
//! hash. [`begin`] hashes each record's key once to find the batch's
//! distinct keys, with foldhash (fast on short keys; seeded per instance,
//! since the keys are the job's data).

use std::cell::RefCell;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;

use crate::backend::{self, HostResult};
use crate::bindings::weir::operator::state::{Packed, StateError};

/// Where one key's value of one state is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    /// None (never set, or cleared).
    Absent,
    /// `fetched.data[at..at + len]`: as the host returned it.
    Fetched { at: u32, len: u32 },
    /// `written[at..at + len]`, with room for `room` bytes there.
    Written { at: u32, len: u32, room: u32 },
}

/// What is known of one key's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// Not read yet.
    Unknown,
    /// The value, and whether the batch changed it.
    Known(Value, bool),
}

/// One value state's entries, by key index.
#[derive(Debug)]
struct StateCache {
    id: u32,
    slots: Vec<Slot>,
    /// The host's answer to `value-get-many` (empty until fetched).
    fetched: Vec<u8>,
    /// The values this batch wrote, back to back.
    written: Vec<u8>,
}

impl StateCache {
    fn value(&self, value: Value) -> Option<&[u8]> {
        match value {
            Value::Absent => None,
            Value::Fetched { at, len } => Some(&self.fetched[at as usize..(at + len) as usize]),
            Value::Written { at, len, .. } => Some(&self.written[at as usize..(at + len) as usize]),
        }
    }

    /// Stores `new` as key `i`'s value, in place of the value the batch
    /// wrote before if it fits.
    fn write(&mut self, i: usize, new: Option<&[u8]>) {
        let Some(bytes) = new else {
            self.slots[i] = Slot::Known(Value::Absent, true);
            return;
        };
        let len = bytes.len() as u32;
        let value = match self.slots[i] {
            Slot::Known(Value::Written { at, room, .. }, _) if len <= room => {
                self.written[at as usize..(at + len) as usize].copy_from_slice(bytes);
                Value::Written { at, len, room }
            }
            _ => {
                let at = self.written.len() as u32;
                self.written.extend_from_slice(bytes);
                Value::Written { at, len, room: len }
            }
        };
        self.slots[i] = Slot::Known(value, true);
    }
}

/// No key: a record without one, or an empty slot of the table.
const NONE: u32 = u32::MAX;

/// The current batch's keys and cached states, kept from batch to batch
/// for their allocations.
#[derive(Debug)]
struct BatchCache {
    open: bool,
    /// The distinct keys, packed (the wire form of `value-get-many`), and
    /// where each starts in `keys.data`.
    keys: Packed,
    starts: Vec<u32>,
    /// Open addressing over the keys: a key index, or [`NONE`]; its length
    /// is a power of two at least twice the keys.
    table: Vec<u32>,
    hasher: RandomState,
    /// Per record of the batch: its key's address and length in the batch,
    /// and the key's index ([`NONE`]: no key).
    records: Vec<(usize, usize, u32)>,
    /// The record being processed ([`at_record`]).
    current: usize,
    states: Vec<StateCache>,
}

impl BatchCache {
    fn key(&self, i: usize) -> &[u8] {
        let at = self.starts[i] as usize;
        &self.keys.data[at..at + self.keys.lens[i] as usize]
    }

    /// `key`'s index among the batch's keys: by the current record when it
    /// is that record's key, else by hash.
    fn index(&self, key: &[u8]) -> Option<usize> {
        if let Some(&(address, len, i)) = self.records.get(self.current)
            && address == key.as_ptr() as usize
            && len == key.len()
            && i != NONE
        {
            return Some(i as usize);
        }
        self.probe(key).1
    }

    /// The table slot where `key` is or would go, and its index if there.
    fn probe(&self, key: &[u8]) -> (usize, Option<usize>) {
        let mask = self.table.len() - 1;
        let mut slot = self.hasher.hash_one(key) as usize & mask;
        loop {
            match self.table[slot] {
                NONE => return (slot, None),
                i if self.key(i as usize) == key => return (slot, Some(i as usize)),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn state_index(&mut self, id: u32) -> usize {
        match self.states.iter().position(|s| s.id == id) {
            Some(at) => at,
            None => {
                self.states.push(StateCache {
                    id,
                    slots: vec![Slot::Unknown; self.keys.lens.len()],
                    fetched: Vec::new(),
                    written: Vec::new(),
                });
                self.states.len() - 1
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<BatchCache> = RefCell::new(BatchCache {
        open: false,
        keys: Packed { lens: Vec::new(), data: Vec::new() },
        starts: Vec::new(),
        table: Vec::new(),
        hasher: RandomState::default(),
        records: Vec::new(),
        current: usize::MAX,
        states: Vec::new(),
    });
}

/// Opens the cache for a batch of `records` records whose keys are `keys`
/// (`None`: a record without a key), in record order.
pub(crate) fn begin<'a>(records: usize, keys: impl Iterator<Item = Option<&'a [u8]>>) {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let cache = &mut *c;
        cache.open = true;
        cache.current = usize::MAX;
        cache.states.clear();
        cache.keys.lens.clear();
        cache.keys.data.clear();
        cache.starts.clear();
        cache.records.clear();
        let size = (records * 2).next_power_of_two().max(16);
        cache.table.clear();
        cache.table.resize(size, NONE);
        for key in keys {
            let Some(key) = key else {
                cache.records.push((0, 0, NONE));
                continue;
            };
            let index = match cache.probe(key) {
                (_, Some(i)) => i as u32,
                (slot, None) => {
                    let i = cache.keys.lens.len() as u32;
                    cache.table[slot] = i;
                    cache.starts.push(cache.keys.data.len() as u32);
                    cache.keys.lens.push(key.len() as i32);
                    cache.keys.data.extend_from_slice(key);
                    i
                }
            };
            cache
                .records
                .push((key.as_ptr() as usize, key.len(), index));
        }
    });
}

/// Record `i` of the batch runs next: a state call with its key finds the
/// key's entry without hashing.
pub(crate) fn at_record(i: usize) {
    CACHE.with(|c| c.borrow_mut().current = i);
}

/// Writes every changed entry back and closes the cache. Returns the first
/// failure (with the state's id).
pub(crate) fn end() -> Result<(), (u32, StateError)> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if !std::mem::replace(&mut c.open, false) {
            return Ok(());
        }
        c.current = usize::MAX;
        let cache = &*c;
        let mut changed_keys = Packed {
            lens: Vec::new(),
            data: Vec::new(),
        };
        let mut values = Packed {
            lens: Vec::new(),
            data: Vec::new(),
        };
        for state in &cache.states {
            changed_keys.lens.clear();
            changed_keys.data.clear();
            values.lens.clear();
            values.data.clear();
            for (i, slot) in state.slots.iter().enumerate() {
                if let Slot::Known(value, true) = *slot {
                    let key = cache.key(i);
                    changed_keys.lens.push(key.len() as i32);
                    changed_keys.data.extend_from_slice(key);
                    match state.value(value) {
                        Some(v) => {
                            values.lens.push(v.len() as i32);
                            values.data.extend_from_slice(v);
                        }
                        None => values.lens.push(-1),
                    }
                }
            }
            if !changed_keys.lens.is_empty() {
                backend::value_set_many(state.id, &changed_keys, &values)
                    .map_err(|e| (state.id, e))?;
            }
        }
        Ok(())
    })
}

/// `f` of the value of state `id` for `key`, from the cache if the key is
/// the batch's; `None` if there is no cache or the key is not the batch's.
/// (`f` runs with the cache borrowed: it must not touch state.)
pub(crate) fn get_with<R>(
    id: u32,
    key: &[u8],
    f: impl FnOnce(Option<&[u8]>) -> R,
) -> Option<HostResult<R>> {
    CACHE.with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else {
            return Some(Err(StateError::Backend(
                "value state read while the batch cache was in use (from a state codec?)".into(),
            )));
        };
        if !c.open {
            return None;
        }
        let i = c.index(key)?;
        let at = c.state_index(id);
        if let Slot::Unknown = c.states[at].slots[i] {
            let cache = &mut *c;
            if let Err(e) = fetch(&cache.keys, &mut cache.states[at]) {
                return Some(Err(e));
            }
        }
        let state = &c.states[at];
        match state.slots[i] {
            Slot::Known(value, _) => Some(Ok(f(state.value(value)))),
            Slot::Unknown => unreachable!("fetched above"),
        }
    })
}

/// Sets (`Some`) or clears (`None`) the value of state `id` for `key` in
/// the cache; false if there is no cache or the key is not the batch's.
pub(crate) fn set(id: u32, key: &[u8], value: Option<&[u8]>) -> bool {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if !c.open {
            return false;
        }
        let Some(i) = c.index(key) else {
            return false;
        };
        let at = c.state_index(id);
        c.states[at].write(i, value);
        true
    })
}

/// Clears whatever state `id` holds for `key` in the cache, if it caches
/// that state (a value state used in this batch); false otherwise, and the
/// caller clears in the host.
pub(crate) fn clear(id: u32, key: &[u8]) -> bool {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if !c.open {
            return false;
        }
        let Some(i) = c.index(key) else {
            return false;
        };
        match c.states.iter_mut().find(|s| s.id == id) {
            Some(state) => {
                state.write(i, None);
                true
            }
            None => false,
        }
    })
}

/// Reads state `state` for every key of the batch in one call; entries
/// already set in this batch keep their new values.
fn fetch(keys: &Packed, state: &mut StateCache) -> HostResult<()> {
    let values = backend::value_get_many(state.id, keys)?;
    if values.lens.len() != state.slots.len() {
        return Err(StateError::Backend(format!(
            "the host returned {} values for {} keys",
            values.lens.len(),
            state.slots.len()
        )));
    }
    let malformed = || StateError::Backend("the host returned a malformed packed list".into());
    let mut at = 0u32;
    for (slot, &len) in state.slots.iter_mut().zip(&values.lens) {
        let value = if len == -1 {
            Value::Absent
        } else {
            let len = u32::try_from(len).map_err(|_| malformed())?;
            let value = Value::Fetched { at, len };
            at = at.checked_add(len).ok_or_else(malformed)?;
            value
        };
        if let Slot::Unknown = slot {
            *slot = Slot::Known(value, false);
        }
    }
    if at as usize != values.data.len() {
        return Err(malformed());
    }
    state.fetched = values.data;
    Ok(())
}

/// The entries of a packed list (`None`: absent), if it is well formed.
/// For the native harness's host side.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn unpacked_optional(packed: &Packed) -> Option<Vec<Option<&[u8]>>> {
    let mut at = 0usize;
    let mut out = Vec::with_capacity(packed.lens.len());
    for &len in &packed.lens {
        if len == -1 {
            out.push(None);
            continue;
        }
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        out.push(Some(packed.data.get(at..end)?));
        at = end;
    }
    (at == packed.data.len()).then_some(out)
}
