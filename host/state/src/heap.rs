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
//! [`KeyedStateBackend::size_bytes`] is the bytes of keys, user keys and
//! stored values the tables hold, kept up to date by every call that adds
//! or drops an entry (invariant: it equals a full count over the tables,
//! which the tests check after random operations); the maps' own overhead
//! is not counted.
//!
//! Nothing is durable; [`KeyedStateBackend::flush`] is a no-op. For
//! checkpoints, [`KeyedStateBackend::snapshot_local`] writes the whole state
//! to one file, [`SNAPSHOT_FILE`], that [`HeapBackend::restore`] reads back
//! (format below). No Wasm, no job types; disk only for snapshots.
//!
//! # Snapshot format (version 1)
//! Little-endian integers; `bytes` is `[len: u32][bytes]`.
//! ```text
//! "WEIRHEAP" version:u32 max_parallelism:u16 key_groups.start:u16 key_groups.end:u16
//! states:u32, per state: name:bytes kind:u8 (0 value, 1 list, 2 map) has_ttl:u8
//! per state, per owned key group in order:
//!   key_group:u16 keys:u32, per key: key:bytes, then
//!     value: stored:bytes | list: n:u32 n×stored:bytes | map: n:u32 n×(user_key:bytes stored:bytes)
//! checksum:u64 (xxh3-64 of everything before it)
//! ```
//! Values are in their stored form (with the TTL expiry prefix), so expiry
//! times survive a restore. Key groups stay separate so that a restore can
//! one day take a subset of them (rescaling).

use std::collections::BTreeMap;
use std::path::Path;

use super::fast_hash::FastHashMap;
use super::key_group::KeyGroup;
use super::layout::{self, Schema};
use super::{BackendKind, KeyedStateBackend, MapEntries, StateError, StateKind, ttl};

/// The file [`KeyedStateBackend::snapshot_local`] writes in its directory.
pub const SNAPSHOT_FILE: &str = "heap.snapshot";

const MAGIC: &[u8; 8] = b"WEIRHEAP";
const FORMAT_VERSION: u32 = 1;

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

    /// Every owned key group with its table, in key-group order.
    fn iter(&self) -> impl Iterator<Item = (u16, &FastHashMap<Vec<u8>, V>)> {
        (self.first..).zip(&self.tables)
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

// The kind was checked by `Schema::check`, so the table has the matching variant.
macro_rules! table {
    ($self:ident, $state:expr, $variant:ident) => {
        match &mut $self.tables[$state as usize] {
            Table::$variant(groups) => groups,
            _ => unreachable!("Schema::check verified the state kind"),
        }
    };
}

/// Keyed state in memory; see the module docs.
pub struct HeapBackend {
    schema: Schema,
    tables: Vec<Table>,
    /// Bytes of keys, user keys and stored values held (module docs).
    bytes: u64,
}

/// Bytes of one list's elements.
fn list_bytes(elements: &[Vec<u8>]) -> u64 {
    elements.iter().map(|e| e.len() as u64).sum()
}

/// Bytes of one map's user keys and values.
fn map_bytes(map: &BTreeMap<Vec<u8>, Vec<u8>>) -> u64 {
    map.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()
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
        Self {
            schema,
            tables,
            bytes: 0,
        }
    }

    /// Counts every byte [`HeapBackend::bytes`] stands for, table by table.
    pub(crate) fn count_bytes(&self) -> u64 {
        let mut bytes = 0;
        for table in &self.tables {
            bytes += match table {
                Table::Value(groups) => groups
                    .iter()
                    .flat_map(|(_, t)| t)
                    .map(|(k, v)| (k.len() + v.len()) as u64)
                    .sum::<u64>(),
                Table::List(groups) => groups
                    .iter()
                    .flat_map(|(_, t)| t)
                    .map(|(k, l)| k.len() as u64 + list_bytes(l))
                    .sum(),
                Table::Map(groups) => groups
                    .iter()
                    .flat_map(|(_, t)| t)
                    .map(|(k, m)| k.len() as u64 + map_bytes(m))
                    .sum(),
            };
        }
        bytes
    }

    /// The whole state in the snapshot format (module docs).
    fn encode_snapshot(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(1 << 16);
        let range = self.schema.key_groups();
        w.extend_from_slice(MAGIC);
        w.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        w.extend_from_slice(&self.schema.max_parallelism().to_le_bytes());
        w.extend_from_slice(&range.start.to_le_bytes());
        w.extend_from_slice(&range.end.to_le_bytes());
        put_u32(&mut w, self.tables.len());
        for (id, table) in self.tables.iter().enumerate() {
            put_bytes(&mut w, self.schema.name(id).as_bytes());
            w.push(match table {
                Table::Value(_) => 0,
                Table::List(_) => 1,
                Table::Map(_) => 2,
            });
            w.push(u8::from(self.schema.meta(id).ttl_ms.is_some()));
        }
        for table in &self.tables {
            match table {
                Table::Value(g) => encode_groups(&mut w, g, |w, v| put_bytes(w, v)),
                Table::List(g) => encode_groups(&mut w, g, |w, list| {
                    put_u32(w, list.len());
                    list.iter().for_each(|e| put_bytes(w, e));
                }),
                Table::Map(g) => encode_groups(&mut w, g, |w, map| {
                    put_u32(w, map.len());
                    for (uk, v) in map {
                        put_bytes(w, uk);
                        put_bytes(w, v);
                    }
                }),
            }
        }
        let checksum = xxhash_rust::xxh3::xxh3_64(&w);
        w.extend_from_slice(&checksum.to_le_bytes());
        w
    }

    /// A backend holding the state in `file`, written by
    /// [`KeyedStateBackend::snapshot_local`]. States are matched by name;
    /// a state in the snapshot that is no longer declared is dropped (with
    /// a warning). The snapshot's key groups must lie in this subtask's
    /// range and its `max_parallelism` must be the same.
    pub(crate) fn restore(schema: Schema, file: &Path) -> Result<Self, StateError> {
        let bytes = std::fs::read(file).map_err(|e| {
            StateError::Backend(format!("cannot read heap snapshot {}: {e}", file.display()))
        })?;
        let mut backend = Self::new(schema);
        backend
            .decode_snapshot(&bytes)
            .map_err(|e| StateError::Backend(format!("heap snapshot {}: {e}", file.display())))?;
        backend.bytes = backend.count_bytes();
        Ok(backend)
    }

    fn decode_snapshot(&mut self, bytes: &[u8]) -> Result<(), String> {
        let (body, checksum) = bytes
            .split_last_chunk::<8>()
            .ok_or("too short for a snapshot")?;
        if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(*checksum) {
            return Err("checksum mismatch (corrupt or truncated)".into());
        }
        let mut r = Reader(body);
        if r.take(8)? != MAGIC {
            return Err("not a heap snapshot".into());
        }
        let version = r.u32()?;
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            ));
        }
        let max_parallelism = r.u16()?;
        if max_parallelism != self.schema.max_parallelism() {
            return Err(format!(
                "taken with max_parallelism {max_parallelism}, restored with {}",
                self.schema.max_parallelism()
            ));
        }
        let (_start, _end) = (r.u16()?, r.u16()?);
        let snapshot_range = super::KeyGroupRange::new(_start, _end);
        let n_states = r.u32()? as usize;
        // Per snapshot state: the declared state id it maps to, if any.
        let mut targets = Vec::with_capacity(n_states.min(1024));
        for _ in 0..n_states {
            let name =
                String::from_utf8(r.bytes()?.to_vec()).map_err(|_| "state name is not UTF-8")?;
            let kind = match r.u8()? {
                0 => StateKind::Value,
                1 => StateKind::List,
                2 => StateKind::Map,
                k => return Err(format!("unknown state kind {k}")),
            };
            let has_ttl = r.u8()? != 0;
            let Some(id) = (0..self.schema.len()).find(|&id| self.schema.name(id) == name) else {
                tracing::warn!(state = %name, "state in heap snapshot is not declared; dropping it");
                targets.push((None, kind));
                continue;
            };
            let meta = self.schema.meta(id);
            if meta.kind != kind {
                return Err(format!(
                    "state `{name}` is {kind} state in the snapshot but declared as {}",
                    meta.kind
                ));
            }
            if meta.ttl_ms.is_some() != has_ttl {
                return Err(format!(
                    "state `{name}` {} a TTL in the snapshot but {} now; changing whether a \
                     state has a TTL is not supported",
                    if has_ttl { "has" } else { "has no" },
                    if has_ttl { "not" } else { "has one" },
                ));
            }
            targets.push((Some(id), kind));
        }
        let own = self.schema.key_groups();
        for (target, kind) in targets {
            for _ in 0..snapshot_range.len() {
                let kg = KeyGroup(r.u16()?);
                let keys = r.u32()?;
                if !snapshot_range.contains(kg) {
                    return Err(format!(
                        "key group {kg} outside the snapshot's {snapshot_range}"
                    ));
                }
                if keys > 0 && target.is_some() && !own.contains(kg) {
                    return Err(format!(
                        "holds key group {kg}, outside this subtask's key groups {own} \
                         (restoring with another parallelism is not supported yet)"
                    ));
                }
                for _ in 0..keys {
                    let key = r.bytes()?.to_vec();
                    match kind {
                        StateKind::Value => {
                            let v = r.bytes()?.to_vec();
                            if let Some(id) = target {
                                table!(self, id, Value).table(kg).insert(key, v);
                            }
                        }
                        StateKind::List => {
                            let n = r.u32()?;
                            let list = (0..n)
                                .map(|_| r.bytes().map(<[u8]>::to_vec))
                                .collect::<Result<Vec<_>, _>>()?;
                            if let Some(id) = target
                                && !list.is_empty()
                            {
                                table!(self, id, List).table(kg).insert(key, list);
                            }
                        }
                        StateKind::Map => {
                            let n = r.u32()?;
                            let mut map = BTreeMap::new();
                            for _ in 0..n {
                                let uk = r.bytes()?.to_vec();
                                map.insert(uk, r.bytes()?.to_vec());
                            }
                            if let Some(id) = target
                                && !map.is_empty()
                            {
                                table!(self, id, Map).table(kg).insert(key, map);
                            }
                        }
                    }
                }
            }
        }
        if !r.0.is_empty() {
            return Err(format!("{} trailing bytes", r.0.len()));
        }
        Ok(())
    }
}

fn put_u32(w: &mut Vec<u8>, n: usize) {
    let n = u32::try_from(n).expect("heap snapshot: more than u32::MAX items or bytes");
    w.extend_from_slice(&n.to_le_bytes());
}

fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    put_u32(w, b.len());
    w.extend_from_slice(b);
}

/// Writes every owned key group of `groups`, in order, with `entry`
/// encoding one key's payload.
fn encode_groups<V>(w: &mut Vec<u8>, groups: &Groups<V>, entry: impl Fn(&mut Vec<u8>, &V)) {
    for (i, table) in groups.tables.iter().enumerate() {
        w.extend_from_slice(&(groups.first + i as u16).to_le_bytes());
        put_u32(w, table.len());
        for (key, v) in table {
            put_bytes(w, key);
            entry(w, v);
        }
    }
}

/// A cursor over snapshot bytes; every read fails cleanly on truncation.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
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
            self.bytes -= (key.len() + stored.len()) as u64;
            table.remove(key);
        }
        Ok(value)
    }

    fn value_get_into(
        &mut self,
        state: u32,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        let now = self.schema.now(meta);
        let table = table!(self, state, Value).table(kg);
        let Some(stored) = table.get(key) else {
            return Ok(false);
        };
        if let Some(value) = ttl::decode(stored, now)? {
            out.extend_from_slice(value);
            return Ok(true);
        }
        self.bytes -= (key.len() + stored.len()) as u64;
        table.remove(key);
        Ok(false)
    }

    fn value_set(&mut self, state: u32, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let (kg, meta) = self.schema.check(state, Some(StateKind::Value), key)?;
        let expiry = self.schema.expiry(meta);
        let table = table!(self, state, Value).table(kg);
        match table.get_mut(key) {
            Some(slot) => {
                self.bytes -= slot.len() as u64;
                store_into(slot, expiry, value);
                self.bytes += slot.len() as u64;
            }
            None => {
                let slot = stored(expiry, value);
                self.bytes += (key.len() + slot.len()) as u64;
                table.insert(key.to_vec(), slot);
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
            let before = list_bytes(elements);
            elements.retain(|e| match ttl::decode(e, now) {
                Ok(v) => v.is_some(),
                Err(err) => {
                    live = Err(err);
                    true
                }
            });
            self.bytes -= before - list_bytes(elements);
            live?;
            if elements.is_empty() {
                self.bytes -= key.len() as u64;
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
        self.bytes += element.len() as u64;
        match table.get_mut(key) {
            Some(list) => list.push(element),
            None => {
                self.bytes += key.len() as u64;
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
            self.bytes -= (user_key.len() + stored.len()) as u64;
            map.remove(user_key);
            if map.is_empty() {
                self.bytes -= key.len() as u64;
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
            self.bytes += key.len() as u64;
            table.insert(key.to_vec(), BTreeMap::new());
        }
        let map = table.get_mut(key).expect("inserted above");
        match map.get_mut(user_key) {
            Some(slot) => {
                self.bytes -= slot.len() as u64;
                store_into(slot, expiry, value);
                self.bytes += slot.len() as u64;
            }
            None => {
                let slot = stored(expiry, value);
                self.bytes += (user_key.len() + slot.len()) as u64;
                map.insert(user_key.to_vec(), slot);
            }
        }
        Ok(())
    }

    fn map_remove(&mut self, state: u32, key: &[u8], user_key: &[u8]) -> Result<(), StateError> {
        let (kg, _) = self.schema.check(state, Some(StateKind::Map), key)?;
        let table = table!(self, state, Map).table(kg);
        if let Some(map) = table.get_mut(key) {
            if let Some(old) = map.remove(user_key) {
                self.bytes -= (user_key.len() + old.len()) as u64;
            }
            if map.is_empty() {
                self.bytes -= key.len() as u64;
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
            if let Some(old) = map.remove(user_key) {
                self.bytes -= (user_key.len() + old.len()) as u64;
            }
        }
        if map.is_empty() {
            self.bytes -= key.len() as u64;
            table.remove(key);
        }
        Ok(entries)
    }

    fn clear(&mut self, state: u32, key: &[u8]) -> Result<(), StateError> {
        let (kg, _) = self.schema.check(state, None, key)?;
        let freed = match &mut self.tables[state as usize] {
            Table::Value(groups) => groups.table(kg).remove(key).map(|v| v.len() as u64),
            Table::List(groups) => groups.table(kg).remove(key).map(|l| list_bytes(&l)),
            Table::Map(groups) => groups.table(kg).remove(key).map(|m| map_bytes(&m)),
        };
        if let Some(freed) = freed {
            self.bytes -= key.len() as u64 + freed;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StateError> {
        Ok(())
    }

    fn snapshot_local(&mut self, dir: &Path) -> Result<(), StateError> {
        super::prepare_snapshot_dir(dir)?;
        std::fs::create_dir_all(dir).map_err(|e| {
            StateError::Backend(format!("cannot create snapshot dir {}: {e}", dir.display()))
        })?;
        let bytes = self.encode_snapshot();
        let file = dir.join(SNAPSHOT_FILE);
        std::fs::write(&file, bytes).map_err(|e| {
            StateError::Backend(format!(
                "cannot write heap snapshot {}: {e}",
                file.display()
            ))
        })
    }

    fn kind(&self) -> BackendKind {
        BackendKind::Heap
    }

    fn size_bytes(&self) -> u64 {
        self.bytes
    }

    fn export(&mut self, visit: &mut crate::ExportVisitor<'_>) -> Result<(), StateError> {
        for state in 0..self.tables.len() as u32 {
            self.export_state(state, visit)?;
        }
        Ok(())
    }

    fn export_state(
        &mut self,
        state: u32,
        visit: &mut crate::ExportVisitor<'_>,
    ) -> Result<(), StateError> {
        let Some(table) = self.tables.get(state as usize) else {
            return Err(StateError::UnknownState(state));
        };
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let canonical = |kg: u16, key: &[u8], namespace: &[u8]| {
            let mut stored = Vec::new();
            layout::encode_key(&mut stored, KeyGroup(kg), key)?;
            stored.extend_from_slice(namespace);
            Ok::<_, StateError>(stored)
        };
        match table {
            Table::Value(groups) => {
                for (kg, t) in groups.iter() {
                    for (key, value) in t {
                        entries.push((canonical(kg, key, &[])?, value.clone()));
                    }
                }
            }
            Table::List(groups) => {
                for (kg, t) in groups.iter() {
                    for (key, elements) in t {
                        let mut list = Vec::new();
                        for e in elements {
                            layout::push_stored_list_element(&mut list, e)?;
                        }
                        entries.push((canonical(kg, key, &[])?, list));
                    }
                }
            }
            Table::Map(groups) => {
                for (kg, t) in groups.iter() {
                    for (key, map) in t {
                        for (user_key, value) in map {
                            entries.push((canonical(kg, key, user_key)?, value.clone()));
                        }
                    }
                }
            }
        }
        // Stored-key order, as RocksDB keeps it.
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (key, value) in &entries {
            visit(state, key, value)?;
        }
        Ok(())
    }

    fn import(
        &mut self,
        state: u32,
        stored_key: &[u8],
        stored_value: &[u8],
    ) -> Result<(), StateError> {
        let layout::StoredKey {
            key_group: kg,
            key,
            namespace,
            ..
        } = self.schema.check_stored(state, stored_key)?;
        let key_len = key.len() as u64;
        // Bytes the key held before (`None`: absent) and holds after.
        let (before, after) = match &mut self.tables[state as usize] {
            Table::Value(groups) => {
                let old = groups.table(kg).insert(key.to_vec(), stored_value.to_vec());
                (old.map(|v| v.len() as u64), Some(stored_value.len() as u64))
            }
            Table::List(groups) => {
                let elements = layout::list_elements(stored_value)
                    .map(|e| e.map(<[u8]>::to_vec))
                    .collect::<Result<Vec<_>, _>>()?;
                let after = (!elements.is_empty()).then(|| list_bytes(&elements));
                let old = if elements.is_empty() {
                    groups.table(kg).remove(key)
                } else {
                    groups.table(kg).insert(key.to_vec(), elements)
                };
                (old.map(|l| list_bytes(&l)), after)
            }
            Table::Map(groups) => {
                let map = groups.table(kg).entry(key.to_vec()).or_default();
                let fresh = map.is_empty();
                let old = map.insert(namespace.to_vec(), stored_value.to_vec());
                let entry = |v: &[u8]| (namespace.len() + v.len()) as u64;
                // Only the one user key changes: count it alone.
                (
                    (!fresh).then(|| old.as_deref().map_or(0, entry)),
                    Some(entry(stored_value)),
                )
            }
        };
        self.bytes += after.map_or(0, |a| key_len + a);
        self.bytes -= before.map_or(0, |b| key_len + b);
        Ok(())
    }
}
