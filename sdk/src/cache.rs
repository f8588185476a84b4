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

use std::cell::RefCell;
use std::collections::HashMap;

use crate::backend::{self, HostResult};
use crate::bindings::weir::operator::state::{Packed, StateError};

/// What is known of one key's value.
#[derive(Debug, Clone)]
enum Slot {
    /// Not read yet.
    Unknown,
    /// The value (`None`: none), and whether it changed.
    Known(Option<Vec<u8>>, bool),
}

/// One value state's entries, by key index.
#[derive(Debug)]
struct StateCache {
    id: u32,
    slots: Vec<Slot>,
    /// Whether the batch's keys have been read.
    fetched: bool,
}

/// The current batch's keys and cached states.
#[derive(Debug)]
struct BatchCache {
    /// The distinct keys, packed (the wire form of `value-get-many`).
    keys: Packed,
    /// Key → index.
    index: HashMap<Vec<u8>, usize>,
    states: Vec<StateCache>,
}

thread_local! {
    static CACHE: RefCell<Option<BatchCache>> = const { RefCell::new(None) };
}

/// Opens the cache for a batch with `keys` (any order, repeats allowed).
pub(crate) fn begin<'a>(keys: impl IntoIterator<Item = &'a [u8]>) {
    let mut cache = BatchCache {
        keys: Packed {
            lens: Vec::new(),
            data: Vec::new(),
        },
        index: HashMap::new(),
        states: Vec::new(),
    };
    for key in keys {
        if !cache.index.contains_key(key) {
            cache.index.insert(key.to_vec(), cache.keys.lens.len());
            cache.keys.lens.push(key.len() as i32);
            cache.keys.data.extend_from_slice(key);
        }
    }
    CACHE.with(|c| *c.borrow_mut() = Some(cache));
}

/// Writes every changed entry back and closes the cache. Returns the first
/// failure (with the state's id).
pub(crate) fn end() -> Result<(), (u32, StateError)> {
    let Some(cache) = CACHE.with(|c| c.borrow_mut().take()) else {
        return Ok(());
    };
    let keys = unpacked(&cache.keys);
    for state in cache.states {
        let mut changed_keys = Packed {
            lens: Vec::new(),
            data: Vec::new(),
        };
        let mut values = Packed {
            lens: Vec::new(),
            data: Vec::new(),
        };
        for (i, slot) in state.slots.into_iter().enumerate() {
            if let Slot::Known(value, true) = slot {
                changed_keys.lens.push(keys[i].len() as i32);
                changed_keys.data.extend_from_slice(keys[i]);
                match value {
                    Some(v) => {
                        values.lens.push(v.len() as i32);
                        values.data.extend_from_slice(&v);
                    }
                    None => values.lens.push(-1),
                }
            }
        }
        if !changed_keys.lens.is_empty() {
            backend::value_set_many(state.id, &changed_keys, &values).map_err(|e| (state.id, e))?;
        }
    }
    Ok(())
}

/// The value of state `id` for `key`, from the cache if the key is the
/// batch's; `None` if there is no cache or the key is not the batch's.
pub(crate) fn get(id: u32, key: &[u8]) -> Option<HostResult<Option<Vec<u8>>>> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let cache = c.as_mut()?;
        let &i = cache.index.get(key)?;
        let n = cache.keys.lens.len();
        let at = state_index(cache, id, n);
        if let Slot::Unknown = cache.states[at].slots[i]
            && let Err(e) = fetch(&cache.keys, &mut cache.states[at])
        {
            return Some(Err(e));
        }
        match &cache.states[at].slots[i] {
            Slot::Known(value, _) => Some(Ok(value.clone())),
            Slot::Unknown => unreachable!("fetched above"),
        }
    })
}

/// Sets (`Some`) or clears (`None`) the value of state `id` for `key` in
/// the cache; false if there is no cache or the key is not the batch's.
pub(crate) fn set(id: u32, key: &[u8], value: Option<&[u8]>) -> bool {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let Some(cache) = c.as_mut() else {
            return false;
        };
        let Some(&i) = cache.index.get(key) else {
            return false;
        };
        let n = cache.keys.lens.len();
        let at = state_index(cache, id, n);
        cache.states[at].slots[i] = Slot::Known(value.map(<[u8]>::to_vec), true);
        true
    })
}

/// Clears whatever state `id` holds for `key` in the cache, if it caches
/// that state (a value state used in this batch); false otherwise, and the
/// caller clears in the host.
pub(crate) fn clear(id: u32, key: &[u8]) -> bool {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let Some(cache) = c.as_mut() else {
            return false;
        };
        let Some(&i) = cache.index.get(key) else {
            return false;
        };
        match cache.states.iter_mut().find(|s| s.id == id) {
            Some(state) => {
                state.slots[i] = Slot::Known(None, true);
                true
            }
            None => false,
        }
    })
}

/// The index of state `id` in the cache, added if new.
fn state_index(cache: &mut BatchCache, id: u32, keys: usize) -> usize {
    match cache.states.iter().position(|s| s.id == id) {
        Some(at) => at,
        None => {
            cache.states.push(StateCache {
                id,
                slots: vec![Slot::Unknown; keys],
                fetched: false,
            });
            cache.states.len() - 1
        }
    }
}

/// Reads state `state` for every key of the batch in one call; entries
/// already set in this batch keep their new values.
fn fetch(keys: &Packed, state: &mut StateCache) -> HostResult<()> {
    debug_assert!(!state.fetched);
    let values = backend::value_get_many(state.id, keys)?;
    let values = unpacked_optional(&values)
        .ok_or_else(|| StateError::Backend("the host returned a malformed packed list".into()))?;
    if values.len() != state.slots.len() {
        return Err(StateError::Backend(format!(
            "the host returned {} values for {} keys",
            values.len(),
            state.slots.len()
        )));
    }
    for (slot, value) in state.slots.iter_mut().zip(values) {
        if let Slot::Unknown = slot {
            *slot = Slot::Known(value.map(<[u8]>::to_vec), false);
        }
    }
    state.fetched = true;
    Ok(())
}

/// The entries of a packed list without absent ones (the batch's keys).
fn unpacked(packed: &Packed) -> Vec<&[u8]> {
    let mut at = 0;
    packed
        .lens
        .iter()
        .map(|&len| {
            let len = len.max(0) as usize;
            let entry = &packed.data[at..at + len];
            at += len;
            entry
        })
        .collect()
}

/// The entries of a packed list (`None`: absent), if it is well formed.
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
