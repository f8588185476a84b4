//! The heap state backend: a subtask's keyed state in in-memory maps.
//!
//! For small state and tests. Same observable semantics as the RocksDB
//! backend (the shared test suite runs against both), including TTL.
//!
//! Layout, as in Flink's heap backend: per declared state, one table per
//! owned key group (index `key group - range.start`), so a snapshot or a
//! rescale can take whole key groups. Tables are keyed by the raw key;
//! values are stored in their [`super::ttl`] form (expiry prefix when the
//! state has a TTL):
//! * value state: `key -> value`;
//! * list state: `key -> [element]`;
//! * map state: `key -> BTreeMap<user key, value>` (ordered by user key bytes).
//!
//! Invariant: no table holds an empty list or an empty map.
//!
//! Nothing is durable; [`KeyedStateBackend::flush`] is a no-op. No Wasm, no
//! job types, no disk.

use std::collections::BTreeMap;

use super::fast_hash::FastHashMap;
use super::key_group::KeyGroup;
use super::layout::Schema;
use super::{BackendKind, KeyedStateBackend, MapEntries, StateError, StateKind, ttl};

/// Per owned key group, one map from key to `V`.
struct Groups<V> {
    first: u16,
    tables: Vec<FastHashMap<Vec<u8>, V>>,
}

impl<V> Groups<V> {
    fn new(schema: &Schema) -> Self {
        let range = schema.key_groups();
        let tables = (0..range.len()).map(|_| FastHashMap::default()).collect();
        Self {
            first: range.start,
            tables,
        }
    }

    /// The table of `kg`, which [`Schema::check`] has verified is owned.
    #[inline]
    fn table(&mut self, kg: KeyGroup) -> &mut FastHashMap<Vec<u8>, V> {
        &mut self.tables[usize::from(kg.0 - self.first)]
    }
}

/// One declared state's storage.
enum Table {
    Value(Groups<Vec<u8>>),
    List(Groups<Vec<Vec<u8>>>),
    Map(Groups<BTreeMap<Vec<u8>, Vec<u8>>>),
}

/// Keyed state in memory; see the module docs.
pub struct HeapBackend {
    schema: Schema,
    tables: Vec<Table>,
}

impl HeapBackend {
    pub(crate) fn new(schema: Schema) -> Self {
        let tables = (0..schema.len())
            .map(|id| match schema.meta(id).kind {
                StateKind::Value => Table::Value(Groups::new(&schema)),
                StateKind::List => Table::List(Groups::new(&schema)),
                StateKind::Map => Table::Map(Groups::new(&schema)),
            })
            .collect();
        Self { schema, tables }
    }
}

/// A copy of the value in `stored` if it is live at `now`.
fn live_copy(stored: &[u8], now: Option<u64>) -> Result<Option<Vec<u8>>, StateError> {
    Ok(ttl::decode(stored, now)?.map(<[u8]>::to_vec))
}

/// Replaces `slot`'s contents with the stored form of `value`, reusing its allocation.
#[inline]
fn store_into(slot: &mut Vec<u8>, expiry: Option<u64>, value: &[u8]) {
    slot.clear();
    ttl::encode(slot, expiry, value);
}

fn stored(expiry: Option<u64>, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    ttl::encode(&mut v, expiry, value);
    v
}

// The kind was checked by `Schema::check`, so the table has the matching variant.
macro_rules! table {
    ($self:ident, $state:expr, $variant:ident) => {
        match &mut $self.tables[$state as usize] {
            Table::$variant(groups) => groups,
            _ => unreachable!("Schema::check verified the state kind"),
        }
    };
}

impl KeyedStateBackend for HeapBackend {
    fn value_get(&mut self, state: u32, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        let now = self.schema.now(meta);
        let table = table!(self, state, Value).table(kg);
        let Some(stored) = table.get(key) else {
            return Ok(None);
        };
        let value = live_copy(stored, now)?;
        if value.is_none() {
            table.remove(key);
        }
        Ok(value)
    }

    fn value_set(&mut self, state: u32, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        let expiry = self.schema.expiry(meta);
        let table = table!(self, state, Value).table(kg);
        match table.get_mut(key) {
            Some(slot) => store_into(slot, expiry, value),
            None => {
                table.insert(key.to_vec(), stored(expiry, value));
            }
        }
        Ok(())
    }

    fn list_get(&mut self, state: u32, key: &[u8]) -> Result<Vec<Vec<u8>>, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::List), key)?;
        let now = self.schema.now(meta);
        let table = table!(self, state, List).table(kg);
        let Some(elements) = table.get_mut(key) else {
            return Ok(Vec::new());
        };
        if now.is_some() {
            let mut live = Ok(());
            elements.retain(|e| match ttl::decode(e, now) {
                Ok(v) => v.is_some(),
                Err(err) => {
                    live = Err(err);
                    true
                }
            });
            live?;
            if elements.is_empty() {
                table.remove(key);
                return Ok(Vec::new());
            }
        }
        let skip = if now.is_some() { ttl::EXPIRY_LEN } else { 0 };
        Ok(elements.iter().map(|e| e[skip..].to_vec()).collect())
    }

    fn list_add(&mut self, state: u32, key: &[u8], element: &[u8]) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::List), key)?;
        let expiry = self.schema.expiry(meta);
        let table = table!(self, state, List).table(kg);
        let element = stored(expiry, element);
        match table.get_mut(key) {
            Some(list) => list.push(element),
            None => {
                table.insert(key.to_vec(), vec![element]);
            }
        }
        Ok(())
    }

    fn map_get(
        &mut self,
        state: u32,
        key: &[u8],
        user_key: &[u8],
    ) -> Result<Option<Vec<u8>>, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Map), key)?;
        let now = self.schema.now(meta);
        let table = table!(self, state, Map).table(kg);
        let Some(map) = table.get_mut(key) else {
            return Ok(None);
        };
        let Some(stored) = map.get(user_key) else {
            return Ok(None);
        };
        let value = live_copy(stored, now)?;
        if value.is_none() {
            map.remove(user_key);
            if map.is_empty() {
                table.remove(key);
            }
        }
        Ok(value)
    }

    fn map_put(
        &mut self,
        state: u32,
        key: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Map), key)?;
        let expiry = self.schema.expiry(meta);
        let table = table!(self, state, Map).table(kg);
        if !table.contains_key(key) {
            table.insert(key.to_vec(), BTreeMap::new());
        }
        let map = table.get_mut(key).expect("inserted above");
        match map.get_mut(user_key) {
            Some(slot) => store_into(slot, expiry, value),
            None => {
                map.insert(user_key.to_vec(), stored(expiry, value));
            }
        }
        Ok(())
    }

    fn map_remove(&mut self, state: u32, key: &[u8], user_key: &[u8]) -> Result<(), StateError> {
        let (kg, _) = self.schema.check(state, Some(StateKind::Map), key)?;
        let table = table!(self, state, Map).table(kg);
        if let Some(map) = table.get_mut(key) {
            map.remove(user_key);
            if map.is_empty() {
                table.remove(key);
            }
        }
        Ok(())
    }

    fn map_entries(&mut self, state: u32, key: &[u8]) -> Result<MapEntries, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Map), key)?;
        let now = self.schema.now(meta);
        let table = table!(self, state, Map).table(kg);
        let Some(map) = table.get_mut(key) else {
            return Ok(Vec::new());
        };
        let mut entries = Vec::with_capacity(map.len());
        let mut expired = Vec::new();
        for (user_key, stored) in map.iter() {
            match ttl::decode(stored, now)? {
                Some(value) => entries.push((user_key.clone(), value.to_vec())),
                None => expired.push(user_key.clone()),
            }
        }
        for user_key in &expired {
            map.remove(user_key);
        }
        if map.is_empty() {
            table.remove(key);
        }
        Ok(entries)
    }

    fn clear(&mut self, state: u32, key: &[u8]) -> Result<(), StateError> {
        let (kg, _) = self.schema.check(state, None, key)?;
        match &mut self.tables[state as usize] {
            Table::Value(groups) => {
                groups.table(kg).remove(key);
            }
            Table::List(groups) => {
                groups.table(kg).remove(key);
            }
            Table::Map(groups) => {
                groups.table(kg).remove(key);
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StateError> {
        Ok(())
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Heap
    }
}
