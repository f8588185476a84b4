//! Keyed state: what the `weir:operator/state` host functions read and write.
//!
//! Owns key groups ([`key_group`]), the two state backends — RocksDB
//! ([`rocksdb`], the default: one database per subtask, one column family per
//! declared state) and heap ([`heap`], in-memory maps for small state and
//! tests) — the shared stored-bytes layout ([`layout`]) and processing-time
//! TTL ([`ttl`]).
//!
//! # Key types
//! * [`KeyedStateBackend`]: the object-safe trait the host functions call;
//!   one instance per subtask, opened by [`open_backend`] from a
//!   [`BackendConfig`].
//! * [`StateDescriptor`] / [`StateKind`]: the states an operator declares.
//!   A state's id (`u32`) is its index in the declared list, as in the WIT
//!   `operator-info.states`.
//! * [`KeyGroup`] / [`KeyGroupRange`]: which keys a subtask owns.
//!
//! # Invariants
//! * Every call checks the state id and kind and rejects a key whose key
//!   group lies outside the subtask's [`KeyGroupRange`]
//!   ([`StateError::KeyOutOfRange`]); this is how the host rejects keys of
//!   other subtasks, which keeps rescaling by key-group ranges correct.
//! * Both backends have the same observable semantics (one test suite runs
//!   against both).
//! * Writes are visible to the next read on the same backend immediately;
//!   [`KeyedStateBackend::flush`] only moves them to durable storage.
//!
//! # Must not touch
//! No Wasm, no job or task types, no networking: the `wasm` module maps the
//! WIT `state` interface onto [`KeyedStateBackend`], and the task driver
//! calls [`KeyedStateBackend::flush`] after each batch. The backends take a
//! local snapshot ([`KeyedStateBackend::snapshot_local`]) and open one
//! again ([`restore_backend`]); uploading, storage and reference counting
//! of checkpoint files belong to the `checkpoint` module.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

mod fast_hash;
pub mod heap;
pub mod key_group;
pub mod layout;
pub mod rocksdb;
pub mod ttl;

#[cfg(test)]
mod tests;

pub use fast_hash::{FastHashBuilder, FastHashMap, FastHasher};
pub use key_group::{
    DEFAULT_MAX_PARALLELISM, KeyGroup, KeyGroupRange, key_group_of, key_group_range_for_subtask,
    subtask_for_key_group,
};
pub use ttl::{Clock, SystemClock};

/// The kinds of keyed state (WIT `state-kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateKind {
    /// One value per key.
    Value,
    /// An append-mostly list of values per key.
    List,
    /// A map from user keys to values, per key.
    Map,
}

impl fmt::Display for StateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
        })
    }
}

/// A keyed state an operator declares (WIT `state-descriptor`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDescriptor {
    /// Unique within the operator, not empty.
    pub name: String,
    /// What the state holds.
    pub kind: StateKind,
    /// Time to live in processing time (at least 1 ms), enforced by the host:
    /// an entry not written for this long reads as absent.
    pub ttl: Option<Duration>,
}

impl StateDescriptor {
    /// A descriptor without TTL.
    pub fn new(name: impl Into<String>, kind: StateKind) -> Self {
        Self {
            name: name.into(),
            kind,
            ttl: None,
        }
    }

    /// The same descriptor with a TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
}

/// Which backend stores a subtask's keyed state.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// RocksDB on local disk: state larger than memory, incremental checkpoints.
    #[default]
    RocksDb,
    /// In-memory maps: small state and tests.
    Heap,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::RocksDb => "rocksdb",
            BackendKind::Heap => "heap",
        })
    }
}

/// The error of parsing a [`BackendKind`] from a string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown state backend `{0}` (expected `rocksdb` or `heap`)")]
pub struct ParseBackendKindError(pub String);

impl FromStr for BackendKind {
    type Err = ParseBackendKindError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rocksdb" => Ok(BackendKind::RocksDb),
            "heap" => Ok(BackendKind::Heap),
            other => Err(ParseBackendKindError(other.to_owned())),
        }
    }
}

/// Why a state access (or opening a backend) failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No state with this id was declared.
    #[error("unknown state id {0}")]
    UnknownState(u32),
    /// The state exists but is of another kind than the call needs.
    #[error("state {state} is {actual} state, but the call needs {expected} state")]
    WrongKind {
        /// The state id.
        state: u32,
        /// The kind the call works on.
        expected: StateKind,
        /// The kind the state was declared with.
        actual: StateKind,
    },
    /// The key belongs to a key group this subtask does not own.
    #[error("key in key group {key_group} is outside this subtask's key groups {range}")]
    KeyOutOfRange {
        /// The key's key group.
        key_group: u16,
        /// The key groups this subtask owns.
        range: KeyGroupRange,
    },
    /// The declared states or the backend configuration are invalid
    /// (empty or duplicate name, zero TTL, key-group range outside
    /// `max_parallelism`).
    #[error("invalid state configuration: {0}")]
    InvalidDescriptor(String),
    /// The storage failed; the message says how.
    #[error("state backend error: {0}")]
    Backend(String),
}

/// The entries of one key's map state: `(user key, value)`, ordered by user key bytes.
pub type MapEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// A subtask's keyed state. All access is scoped explicitly by key; see the
/// module docs for the checks every call makes.
///
/// Map, list and value contents are opaque bytes.
pub trait KeyedStateBackend: Send {
    /// The value for `key`, if any.
    fn value_get(&mut self, state: u32, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;
    /// [`value_get`](Self::value_get) without a `Vec` of its own: appends
    /// the value for `key`, if any, to `out` and says whether there was
    /// one. The batched read (`value-get-many`) packs every value of a
    /// batch into one buffer with it.
    fn value_get_into(
        &mut self,
        state: u32,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        Ok(match self.value_get(state, key)? {
            Some(value) => {
                out.extend_from_slice(&value);
                true
            }
            None => false,
        })
    }
    /// [`value_get_into`](Self::value_get_into) for many keys in one call,
    /// as `value-get-many` asks: appends each key's value, in order, to
    /// `out` and pushes its length (`None`: no value) to `lens`. The same
    /// key may come more than once. On an error, what was appended so far
    /// is meaningless.
    ///
    /// The RocksDB backend reads all keys that miss its buffer with one
    /// `MultiGet`, which probes each SST file's bloom filter and blocks for
    /// the whole batch at once instead of once per key.
    fn value_get_many_into(
        &mut self,
        state: u32,
        keys: &[&[u8]],
        out: &mut Vec<u8>,
        lens: &mut Vec<Option<usize>>,
    ) -> Result<(), StateError> {
        for key in keys {
            let start = out.len();
            let found = self.value_get_into(state, key, out)?;
            lens.push(found.then(|| out.len() - start));
        }
        Ok(())
    }
    /// Sets the value for `key`.
    fn value_set(&mut self, state: u32, key: &[u8], value: &[u8]) -> Result<(), StateError>;
    /// All elements of the list for `key`, oldest first (empty if none).
    fn list_get(&mut self, state: u32, key: &[u8]) -> Result<Vec<Vec<u8>>, StateError>;
    /// Appends one element to the list for `key`.
    fn list_add(&mut self, state: u32, key: &[u8], element: &[u8]) -> Result<(), StateError>;
    /// The value under `user_key` in the map for `key`.
    fn map_get(
        &mut self,
        state: u32,
        key: &[u8],
        user_key: &[u8],
    ) -> Result<Option<Vec<u8>>, StateError>;
    /// Puts `value` under `user_key` in the map for `key`.
    fn map_put(
        &mut self,
        state: u32,
        key: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError>;
    /// Removes `user_key` from the map for `key` (a no-op if absent).
    fn map_remove(&mut self, state: u32, key: &[u8], user_key: &[u8]) -> Result<(), StateError>;
    /// All entries of the map for `key`, ordered by user key bytes.
    fn map_entries(&mut self, state: u32, key: &[u8]) -> Result<MapEntries, StateError>;
    /// Removes whatever the state holds for `key` (value, list or map).
    fn clear(&mut self, state: u32, key: &[u8]) -> Result<(), StateError>;
    /// Makes buffered writes durable in the backend (one RocksDB
    /// `WriteBatch`). Called by the driver at the end of input (and, with
    /// checkpoints, before each snapshot); in between, the RocksDB backend
    /// flushes itself when its write-back buffer passes its size limit.
    /// A no-op for the heap.
    fn flush(&mut self) -> Result<(), StateError>;
    /// Synchronous part of a checkpoint: flushes buffered writes and writes
    /// a local snapshot of the whole state into `dir`, which must not exist
    /// or be empty (its parent is created if missing). RocksDB: a native
    /// checkpoint (hard links to the immutable SST files, a fresh
    /// MANIFEST); heap: one serialized file, [`heap::SNAPSHOT_FILE`].
    /// Cheap for RocksDB; the caller then uploads `dir` asynchronously
    /// (`checkpoint::snapshot::upload`) and deletes it. Later writes do not
    /// change the snapshot.
    fn snapshot_local(&mut self, dir: &Path) -> Result<(), StateError>;
    /// Flushes, then compacts all state now (synchronously). RocksDB
    /// rewrites every column family into new SST files, dropping the old
    /// ones (what its background compactions do over time); a no-op for the
    /// heap. Tests use it to make later checkpoints drop shared files.
    fn compact(&mut self) -> Result<(), StateError> {
        self.flush()
    }
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// About how many bytes the state takes now, for metrics. Heap: the
    /// bytes of keys, user keys and stored values in its tables. RocksDB:
    /// its live SST files, its memtables and the write-back buffer's
    /// unflushed writes (RocksDB's own estimate: between compactions, SST
    /// files also hold overwritten versions). Cheap enough to call every
    /// second; never fails.
    fn size_bytes(&self) -> u64;
    /// Every entry of every state in the canonical form both backends
    /// share ([`layout`]): `visit(state id, stored key, stored value)`,
    /// where the stored key is `[key group][key len][key][user key for
    /// maps]`, the stored value is a value or map value in its TTL form,
    /// or a whole encoded list. Flushes first. By state id, then stored
    /// key: the same state exports the same entries in the same order from
    /// either backend, which is what makes a savepoint independent of the
    /// backend. Expired entries not yet removed may be included (they
    /// still expire on read after an import).
    fn export(&mut self, visit: &mut ExportVisitor<'_>) -> Result<(), StateError>;
    /// The entries of state `state` alone, as [`KeyedStateBackend::export`]
    /// gives them (flushes first): reads that state only.
    fn export_state(&mut self, state: u32, visit: &mut ExportVisitor<'_>)
    -> Result<(), StateError>;
    /// Writes one entry as [`KeyedStateBackend::export`] gives it (a list
    /// replaces the key's list). Its key group must be this subtask's
    /// ([`StateError::KeyOutOfRange`] if not: callers restoring a subset
    /// filter with [`layout::decode_key`]). For filling a freshly opened
    /// backend before any other call; [`KeyedStateBackend::flush`] after
    /// the last one.
    fn import(
        &mut self,
        state: u32,
        stored_key: &[u8],
        stored_value: &[u8],
    ) -> Result<(), StateError>;
}

/// What [`KeyedStateBackend::export`] calls for each entry.
pub type ExportVisitor<'a> = dyn FnMut(u32, &[u8], &[u8]) -> Result<(), StateError> + 'a;

/// Everything needed to open one subtask's keyed state.
#[derive(Clone, Copy, Debug)]
pub struct BackendConfig<'a> {
    /// Which backend.
    pub kind: BackendKind,
    /// Working directory for this subtask's RocksDB (created if missing);
    /// unused by the heap backend.
    pub dir: &'a Path,
    /// The operator's declared states; a state's id is its index here.
    pub states: &'a [StateDescriptor],
    /// The key groups this subtask owns.
    pub key_groups: KeyGroupRange,
    /// The number of key groups (`max_parallelism` in the job spec).
    pub max_parallelism: u16,
}

/// Opens the keyed state of one subtask from a local snapshot in
/// `from_dir` (written by [`KeyedStateBackend::snapshot_local`], or
/// downloaded by `checkpoint::snapshot::download`), with processing time
/// from the system clock.
///
/// RocksDB: the snapshot's files are moved (or copied, across filesystems)
/// into `cfg.dir`, which must not exist or be empty, and opened there as
/// the working database; `from_dir` is left empty. Heap: the snapshot file
/// is read; `from_dir` is untouched.
///
/// The snapshot must come from a subtask with the same `max_parallelism`
/// and key groups (restoring with another parallelism is not supported
/// yet; the heap backend checks it, the RocksDB one does not).
pub fn restore_backend(
    cfg: BackendConfig<'_>,
    from_dir: &Path,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    restore_backend_with_clock(cfg, from_dir, Arc::new(SystemClock))
}

/// [`restore_backend`] with `clock` as processing time for TTL.
pub fn restore_backend_with_clock(
    cfg: BackendConfig<'_>,
    from_dir: &Path,
    clock: Arc<dyn Clock>,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    let schema = layout::Schema::new(cfg.states, cfg.key_groups, cfg.max_parallelism, clock)?;
    Ok(match cfg.kind {
        BackendKind::RocksDb => {
            rocksdb::move_snapshot_into(from_dir, cfg.dir)?;
            Box::new(rocksdb::RocksDbBackend::open(cfg.dir, cfg.states, schema)?)
        }
        BackendKind::Heap => Box::new(heap::HeapBackend::restore(
            schema,
            &from_dir.join(heap::SNAPSHOT_FILE),
        )?),
    })
}

/// Makes `dir` ready to receive a snapshot: absent, with its parent
/// present. An existing empty `dir` is removed; a non-empty one is an error
/// (a snapshot never overwrites files).
pub(crate) fn prepare_snapshot_dir(dir: &Path) -> Result<(), StateError> {
    let err = |what: &str, e: std::io::Error| {
        StateError::Backend(format!(
            "snapshot dir {}: cannot {what}: {e}",
            dir.display()
        ))
    };
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(StateError::Backend(format!(
                    "snapshot dir {} is not empty",
                    dir.display()
                )));
            }
            std::fs::remove_dir(dir).map_err(|e| err("remove empty dir", e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err("list", e)),
    }
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err("create parent", e))?;
    }
    Ok(())
}

/// Opens the keyed state of one subtask, with processing time from the
/// system clock.
pub fn open_backend(cfg: BackendConfig<'_>) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    open_backend_with_clock(cfg, Arc::new(SystemClock))
}

/// Opens the keyed state of one subtask with `clock` as processing time for
/// TTL: for tests and simulations (a fake clock instead of sleeps).
pub fn open_backend_with_clock(
    cfg: BackendConfig<'_>,
    clock: Arc<dyn Clock>,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    let schema = layout::Schema::new(cfg.states, cfg.key_groups, cfg.max_parallelism, clock)?;
    Ok(match cfg.kind {
        BackendKind::RocksDb => {
            Box::new(rocksdb::RocksDbBackend::open(cfg.dir, cfg.states, schema)?)
        }
        BackendKind::Heap => Box::new(heap::HeapBackend::new(schema)),
    })
}
